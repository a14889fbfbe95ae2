package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestLargeRoomMemberLists: a room of 1,024 members with 64-byte ids has a
// member list over the default --max-frame (66,5xx bytes of ids) and far
// over a datagram; joined over TCP and over UDP, the list arrives whole,
// in frames the client's 64 KiB limit accepts, ending with the joiner.
func TestLargeRoomMemberLists(t *testing.T) {
	p := startRelay(t, "--max-room-members", "1024")
	name := func(i int) string { return fmt.Sprintf("%064d", i) }
	const members = 1022
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c := dial(t, p.TCP)
				if _, err := c.Join("huge", name(i), nil); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("member %d: %w", i, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < members; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	check := func(j client.Joined, self string, n int) {
		t.Helper()
		if len(j.Members) != n || j.Members[n-1] != self || j.Owner != j.Members[0] {
			t.Fatalf("%d members (want %d), last %.8s, owner %.8s", len(j.Members), n, j.Members[len(j.Members)-1], j.Owner)
		}
		sorted := slices.Sorted(slices.Values(j.Members))
		if len(slices.Compact(sorted)) != n {
			t.Fatalf("member list has duplicates")
		}
		for i := 0; i < members; i++ {
			if _, ok := slices.BinarySearch(sorted, name(i)); !ok {
				t.Fatalf("member %d missing from the list", i)
			}
		}
	}
	tcp := dial(t, p.TCP)
	j, err := tcp.Join("huge", name(members), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(j, name(members), members+1)
	udp := dialUDP(t, p.UDP)
	j, err = udp.Join("huge", name(members+1), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(j, name(members+1), members+2)
	// The room is full now: the next join is refused.
	if _, err := dial(t, p.TCP).Join("huge", "one-too-many", nil); !isCode(err, wire.ErrRoomFull) {
		t.Fatalf("join of member 1025: %v, want room_full", err)
	}
}

// TestSizeLimitsRefused: flag values the protocol cannot honour stop the
// relay at start with one clear line: a --max-frame under a padded UDP
// join's frame (every UDP join would be dropped as oversized), and a room
// larger than a joined frame's u16 count.
func TestSizeLimitsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-frame", "1187"}, "--max-frame 1187: at least 1188"},
		{[]string{"--max-room-members", "65536"}, "--max-room-members 65536: at most 65535"},
	} {
		cmd := exec.Command(bins["relay"], append([]string{"--listen", "127.0.0.1:0", "--metrics", "off"}, tt.args...)...)
		var stderr testproc.SyncBuffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "goroutine") {
			t.Errorf("%v: exit %d (%v), stderr %q; want 1 and %q", tt.args, code, err, stderr.String(), tt.want)
		}
	}
}

// TestFramesFitTheLimits: at the smallest --max-frame a padded UDP join
// still gets in; a send whose deliver would be over --max-frame (the
// deliver adds the sender's id) is refused with oversized instead of
// reaching clients as a frame over the limit; and a deliver too large for
// one datagram is not sent to a UDP member but counted, while TCP members
// get it and the UDP member gets what follows.
func TestFramesFitTheLimits(t *testing.T) {
	t.Run("deliver over max-frame", func(t *testing.T) {
		p := startRelay(t, "--max-frame", fmt.Sprint(wire.MinMaxFrame))
		u := dialUDP(t, p.UDP)
		if _, err := u.Join("fit", "udp-member", nil); err != nil {
			t.Fatalf("padded UDP join at the smallest --max-frame: %v", err)
		}
		sender := join(t, p.TCP, "fit", "a-sender-with-a-long-name")
		listener := join(t, p.TCP, "fit", "listener")
		// The largest send that fits: its deliver would be 1+25 bytes over.
		payload := make([]byte, wire.MinMaxFrame-2)
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: payload})
		expectError(t, sender, wire.ErrOversized)
		// 26 bytes less fits, deliver and all.
		send(t, join(t, p.TCP, "fit", "a-sender-with-a-long-nam2"), wire.Send{Mode: wire.Othercast, Payload: payload[:len(payload)-26]})
		if from, pl := nextDeliver(t, listener); from != "a-sender-with-a-long-nam2" || len(pl) != len(payload)-26 {
			t.Fatalf("listener got %d bytes from %s", len(pl), from)
		}
	})
	t.Run("deliver over a datagram", func(t *testing.T) {
		p := startRelay(t)
		u := dialUDP(t, p.UDP)
		if _, err := u.Join("dgram", "udp-member", nil); err != nil {
			t.Fatal(err)
		}
		sender := join(t, p.TCP, "dgram", "big")
		listener := join(t, p.TCP, "dgram", "listener")
		big := make([]byte, wire.MaxDatagram)
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: big})
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: []byte("small")})
		if _, pl := nextDeliver(t, listener); len(pl) != len(big) {
			t.Fatalf("TCP listener got %d bytes, want %d", len(pl), len(big))
		}
		if _, pl := nextDeliver(t, u); pl != "small" {
			t.Fatalf("UDP member got %q first, want the small deliver after the dropped big one", pl)
		}
		p.waitMetric(t, `relay_undelivered_frames_total{reason="datagram_too_large"}`, 1)
	})
}

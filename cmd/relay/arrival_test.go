package main

import (
	"encoding/binary"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// castRoom has every member of a room send othercasts at rate for d, each
// payload carrying its sender's index and sequence number, while every
// member reads; it returns how many frames were sent and, per member, how
// many it got from each sender in order (a frame out of order or lost
// stops that count).
//
// With lossy, a member counts every frame it gets from each sender, in
// order or not (a room whose limit drops frames).
//
// A sender keeps to its schedule: frame k is due k/rate after the start,
// and a sender the host starved sends what fell due at once, as a real
// client catching up does (a ticker would drop the missed ticks, and a
// loaded host would offer less than the test means to). took is how long
// the senders took to send their rate*d frames each.
func castRoom(t *testing.T, addr, room string, members, rate, payload int, d time.Duration, lossy bool) (sent []int64, got [][]int64, took time.Duration) {
	t.Helper()
	conns := make([]*client.Conn, members)
	for i := range conns {
		conns[i] = join(t, addr, room, fmt.Sprintf("m%d", i))
		conns[i].SetDeadline(time.Now().Add(d + 30*time.Second))
	}
	sent = make([]int64, members)
	got = make([][]int64, members)
	var readers, senders sync.WaitGroup
	var stop atomic.Bool
	for i, c := range conns {
		got[i] = make([]int64, members)
		readers.Add(1)
		go func() {
			defer readers.Done()
			for !stop.Load() {
				// The read deadline only: the senders write on this
				// connection, and a deadline that lapsed while this
				// reader waited failed their writes as i/o timeouts.
				c.NetConn().SetReadDeadline(time.Now().Add(time.Second))
				f, err := c.Recv()
				if err != nil {
					if stop.Load() {
						return
					}
					continue // a read deadline: look at stop again
				}
				if f.Type != wire.TypeDeliver || len(f.Payload) < 12 {
					continue
				}
				from, seq := int(binary.BigEndian.Uint32(f.Payload)), int64(binary.BigEndian.Uint64(f.Payload[4:]))
				if from < members && (lossy || seq == atomic.LoadInt64(&got[i][from])) {
					atomic.AddInt64(&got[i][from], 1)
				}
			}
		}()
	}
	start := time.Now()
	for i, c := range conns {
		senders.Add(1)
		go func() {
			defer senders.Done()
			buf := make([]byte, max(payload, 12))
			interval := time.Second / time.Duration(rate)
			for seq := int64(0); time.Duration(seq)*interval < d; seq++ {
				time.Sleep(time.Until(start.Add(time.Duration(seq) * interval)))
				binary.BigEndian.PutUint32(buf, uint32(i))
				binary.BigEndian.PutUint64(buf[4:], uint64(seq))
				if err := c.Send(wire.Send{Mode: wire.Othercast, Payload: buf}); err != nil {
					t.Errorf("%s/m%d: %v", room, i, err)
					return
				}
				sent[i] = seq + 1
			}
		}()
	}
	senders.Wait()
	took = time.Since(start)
	// Wait for the last frames (a starved relay delivers late) or until
	// nothing more comes for a second, then stop.
	deadline, last, still := time.Now().Add(10*time.Second), int64(-1), 0
	for time.Now().Before(deadline) && !allIn(sent, got) && still < 20 {
		time.Sleep(50 * time.Millisecond)
		if n := total(got); n != last {
			last, still = n, 0
		} else {
			still++
		}
	}
	stop.Store(true)
	readers.Wait()
	return sent, got, took
}

// total is the sum of the counts.
func total(got [][]int64) int64 {
	var n int64
	for i := range got {
		for j := range got[i] {
			n += atomic.LoadInt64(&got[i][j])
		}
	}
	return n
}

// allIn reports whether every member got every other member's frames
// (the counts are atomic: castRoom's readers may still be adding).
func allIn(sent []int64, got [][]int64) bool {
	for i := range got {
		for j := range sent {
			if i != j && atomic.LoadInt64(&got[i][j]) < sent[j] {
				return false
			}
		}
	}
	return true
}

// TestRoomLimitBindsAtDefaults: at the relay's defaults, ten senders each
// under their own rate limit (240 of 250 frames a second) into one room
// are held to the room's share per sender (150 a second, two seconds of
// it at once), while a room of twelve honest members at 72 Hz beside it
// loses nothing.
func TestRoomLimitBindsAtDefaults(t *testing.T) {
	p := startRelay(t, "--log-level", "info")
	// Ten seconds: the flood offers 1.6 times the room's share, less the
	// two seconds of burst the room allows; over five a host starved by a
	// fifth (load 44 per 2 CPUs) sent it too slowly to pass the limit.
	const run = 10 * time.Second
	var wg sync.WaitGroup
	var honestSent []int64
	var honestGot [][]int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		honestSent, honestGot, _ = castRoom(t, p.TCP, "honest", 12, 72, 150, run, false)
	}()
	floodSent, floodGot, took := castRoom(t, p.TCP, "flood", 10, 240, 12, run, true)
	wg.Wait()
	var sent, got int64
	for i := range floodSent {
		sent += floodSent[i]
		for j := range floodSent {
			if i != j {
				got += floodGot[i][j]
			}
		}
	}
	limited := p.metric(t, `relay_rate_limited_frames_total{limit="room_messages"}`)
	// What the room let through reaches the 9 others of each sender.
	// The room's bucket refills for as long as the sends took (a starved
	// test process sends late and catches up); what it lets through
	// reaches the 9 others of each sender.
	roomFrames := 150*10*max(took, run).Seconds() + 300*10
	if float64(sent) <= roomFrames {
		t.Fatalf("the flood did not flood: %d frames in %v, the room allows %.0f in that time", sent, took, roomFrames)
	}
	allowed := roomFrames * 9
	t.Logf("flood room: %d sent, %d delivered (the room allows %.0f deliveries), %v over the room's limit", sent, got, allowed, limited)
	if limited == 0 {
		t.Errorf("ten senders at 240 frames a second: none over the room's limit")
	}
	if float64(got) > allowed*1.05 {
		t.Errorf("%d deliveries, over the %.0f the room's limit allows", got, allowed)
	}
	for _, l := range []string{"messages", "bytes"} {
		if n := p.metric(t, `relay_rate_limited_frames_total{limit="`+l+`"}`); n != 0 {
			t.Errorf("%v frames over the senders' own %s limit: they were under it", n, l)
		}
	}
	if !allIn(honestSent, honestGot) {
		t.Errorf("honest room: sent %v, got %v", honestSent, honestGot)
	}
}

// TestStarvedRelayDropsNoHonestFrame: the relay shares one CPU with two
// busy loops (and whatever else the machine runs), so its readers run
// late and read what their senders sent meanwhile at once; four rooms of
// eight honest members at 72 Hz lose no frame to any rate limit: frames
// are charged by when they arrived, not when they were read.
func TestStarvedRelayDropsNoHonestFrame(t *testing.T) {
	taskset := testproc.NeedTool(t, "taskset", "util-linux")
	for range 2 {
		busy := exec.Command(taskset, "-c", "0", "sh", "-c", "while :; do :; done")
		if err := busy.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	}
	script := wrapper(t, fmt.Sprintf("exec %s -c 0 %s \"$@\"", taskset, bins["relay"]))
	p := relayProc{testproc.StartRelay(t, script, "--log-level", "info")}
	const rooms, members, run = 4, 8, 5 * time.Second
	var wg sync.WaitGroup
	sent := make([][]int64, rooms)
	got := make([][][]int64, rooms)
	for r := range rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent[r], got[r], _ = castRoom(t, p.TCP, fmt.Sprintf("room-%d", r), members, 72, 150, run, false)
		}()
	}
	wg.Wait()
	for _, l := range []string{"messages", "bytes", "room_messages", "room_bytes"} {
		if n := p.metric(t, `relay_rate_limited_frames_total{limit="`+l+`"}`); n != 0 {
			t.Errorf("%v honest frames dropped by the %s limit", n, l)
		}
	}
	for r := range rooms {
		if !allIn(sent[r], got[r]) {
			t.Errorf("room %d: sent %v, got %v", r, sent[r], got[r])
		}
	}
}

package main

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestDeliveryToSelfAndEmptyPayloads: a send reaches every member its mode
// names, the sender included (docs/protocol.md): unicast to oneself,
// manycast listing oneself (twice: once), ownercast by the owner,
// broadcast; othercast never does. Empty payloads are delivered empty.
func TestDeliveryToSelfAndEmptyPayloads(t *testing.T) {
	p := startRelay(t)
	owner := join(t, p.TCP, "self", "owner")
	join(t, p.TCP, "self", "other") // a second member, named in the manycast
	fence := func(c *client.Conn) {
		send(t, c, wire.Send{Mode: wire.Unicast, Targets: []string{"owner"}, Payload: []byte("fence")})
	}
	tests := []struct {
		name string
		send wire.Send
		self bool // the owner gets its own send
	}{
		{"unicast to self", wire.Send{Mode: wire.Unicast, Targets: []string{"owner"}}, true},
		{"manycast listing self twice", wire.Send{Mode: wire.Manycast, Targets: []string{"owner", "other", "owner"}}, true},
		{"ownercast by the owner", wire.Send{Mode: wire.Ownercast}, true},
		{"broadcast", wire.Send{Mode: wire.Broadcast}, true},
		{"othercast", wire.Send{Mode: wire.Othercast}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, payload := range [][]byte{[]byte("x"), nil} {
				tt.send.Payload = payload
				send(t, owner, tt.send)
				fence(owner)
				got := 0
				for {
					f, err := owner.RecvType(wire.TypeDeliver)
					if err != nil {
						t.Fatal(err)
					}
					if string(f.Payload) == "fence" {
						break
					}
					if string(f.User) != "owner" || string(f.Payload) != string(payload) || f.Mode != tt.send.Mode {
						t.Fatalf("owner got %s %q from %s", f.Mode, f.Payload, f.User)
					}
					got++
				}
				want := 0
				if tt.self {
					want = 1
				}
				if got != want {
					t.Errorf("payload %q: owner got its own send %d times, want %d", payload, got, want)
				}
			}
		})
	}
}

// TestOrderPerSenderAndRoom: on TCP every member gets each sender's sends
// in order, and all members see the same order of the room's deliveries.
func TestOrderPerSenderAndRoom(t *testing.T) {
	p := startRelay(t)
	const perSender = 300
	senders := []*client.Conn{join(t, p.TCP, "order", "s0"), join(t, p.TCP, "order", "s1")}
	receivers := []*client.Conn{join(t, p.TCP, "order", "r0"), join(t, p.TCP, "order", "r1")}
	var wg sync.WaitGroup
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perSender {
				if err := s.Send(wire.Send{Mode: wire.Othercast, Payload: binary.BigEndian.AppendUint32(nil, uint32(n))}); err != nil {
					t.Errorf("sender %d: %v", i, err)
					return
				}
			}
		}()
	}
	seqs := make([][]string, len(receivers))
	for i, r := range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := map[string]uint32{}
			for len(seqs[i]) < 2*perSender {
				f, err := r.RecvType(wire.TypeDeliver)
				if err != nil {
					t.Errorf("receiver %d: %v", i, err)
					return
				}
				n := binary.BigEndian.Uint32(f.Payload)
				if n != next[string(f.User)] {
					t.Errorf("receiver %d: %d from %s, want %d", i, n, f.User, next[string(f.User)])
					return
				}
				next[string(f.User)]++
				seqs[i] = append(seqs[i], fmt.Sprintf("%s/%d", f.User, n))
			}
		}()
	}
	wg.Wait()
	if !slices.Equal(seqs[0], seqs[1]) {
		t.Errorf("the two receivers saw the room's deliveries in different orders")
	}
}

// TestJoinTimeoutRestartsAfterLeave: a connection that left has a fresh
// --join-timeout to join again, counted from the leave.
func TestJoinTimeoutRestartsAfterLeave(t *testing.T) {
	p := startRelay(t, "--join-timeout", "1s")
	c := join(t, p.TCP, "again", "u")
	time.Sleep(800 * time.Millisecond)
	if err := c.Leave(); err != nil {
		t.Fatal(err)
	}
	// 1.4 s after the connect but 0.6 s after the leave: still allowed.
	time.Sleep(600 * time.Millisecond)
	if _, err := c.Join("again", "u", nil); err != nil {
		t.Fatalf("join 0.6 s after the leave: %v", err)
	}
	if err := c.Leave(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	expectError(t, c, wire.ErrJoinTimeout)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("join_timeout %v after the second leave, want about 1 s", d)
	}
}

// TestUDPErrorsAndLeave: a refused datagram of a UDP session gets its
// error frame and the session survives; leave is not acknowledged, the
// others get member_left, and the token is dead after it.
func TestUDPErrorsAndLeave(t *testing.T) {
	p := startRelay(t)
	watcher := join(t, p.TCP, "udperr", "watcher")
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("udperr", "u", nil); err != nil {
		t.Fatal(err)
	}
	token := u.Token()
	for _, tt := range []struct {
		name  string
		frame []byte
		code  wire.ErrorCode
	}{
		{"cast mode 7", frame(0x03, 0x07, 'x'), wire.ErrMalformed},
		{"unknown type", frame(0x07, 1), wire.ErrUnknownType},
		{"manycast no targets", frame(0x03, 0x04, 0), wire.ErrBadTarget},
		{"second join", wire.AppendJoin(nil, "udperr", "u2", nil, 0), wire.ErrAlreadyJoined},
	} {
		if err := u.WriteRaw(cat(wire.AppendDatagram(nil, token), tt.frame)); err != nil {
			t.Fatal(err)
		}
		f, err := u.Recv()
		if err != nil || f.Type != wire.TypeError || f.Code != tt.code {
			t.Fatalf("%s: %v %v, want error %s", tt.name, f, err, tt.code)
		}
		// Still a session: a heartbeat is answered.
		if err := u.Heartbeat(5); err != nil {
			t.Fatal(err)
		}
		if f, err := u.RecvType(wire.TypeHeartbeatReply); err != nil || f.Timestamp != 5 {
			t.Fatalf("%s: session gone after the error: %v", tt.name, err)
		}
	}
	if err := u.Leave(); err != nil {
		t.Fatal(err)
	}
	if f, err := watcher.RecvType(wire.TypeMemberLeft); err != nil || string(f.User) != "u" {
		t.Fatalf("watcher: %v, want member_left u", err)
	}
	// No acknowledgement, and the token is dead: a heartbeat gets nothing.
	if err := u.Heartbeat(6); err != nil {
		t.Fatal(err)
	}
	u.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if f, err := u.Recv(); err == nil {
		t.Fatalf("after leave: got %v", f.Type)
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="unknown_session"}`, 1)
}

package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestCastModes checks each mode reaches exactly the right members, TCP
// and UDP alike: after each cast the sender broadcasts a fence, and every
// member records which cast payloads it got before the fence.
func TestCastModes(t *testing.T) {
	p := startRelay(t)
	names := []string{"ann", "bob", "cat", "dan", "eve"} // eve is on UDP
	conns := map[string]*client.Conn{}
	for _, n := range names[:4] {
		conns[n] = join(t, p.TCP, "modes", n)
	}
	u := dialUDP(t, p.UDP)
	if j, err := u.Join("modes", "eve", nil); err != nil || j.Owner != "ann" || len(j.Members) != 5 {
		t.Fatalf("udp join: %+v %v", j, err)
	}
	conns["eve"] = u
	tests := []struct {
		name    string
		from    string
		send    wire.Send
		reached []string
	}{
		{"broadcast", "bob", wire.Send{Mode: wire.Broadcast}, names},
		{"othercast", "bob", wire.Send{Mode: wire.Othercast}, []string{"ann", "cat", "dan", "eve"}},
		{"othercast from udp", "eve", wire.Send{Mode: wire.Othercast}, []string{"ann", "bob", "cat", "dan"}},
		{"unicast", "bob", wire.Send{Mode: wire.Unicast, Targets: []string{"dan"}}, []string{"dan"}},
		{"unicast to udp", "ann", wire.Send{Mode: wire.Unicast, Targets: []string{"eve"}}, []string{"eve"}},
		{"unicast absent", "bob", wire.Send{Mode: wire.Unicast, Targets: []string{"zed"}}, nil},
		{"manycast each once", "cat", wire.Send{Mode: wire.Manycast, Targets: []string{"ann", "eve", "ann", "zed"}}, []string{"ann", "eve"}},
		{"ownercast", "dan", wire.Send{Mode: wire.Ownercast}, []string{"ann"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := fmt.Sprintf("cast-%d", i)
			fence := fmt.Sprintf("fence-%d", i)
			tt.send.Payload = []byte(payload)
			tt.send.HasTrace, tt.send.Trace = true, int64(i)+1000
			send(t, conns[tt.from], tt.send)
			send(t, conns[tt.from], wire.Send{Mode: wire.Broadcast, Payload: []byte(fence)})
			var reached []string
			for _, n := range names {
				got := 0
				for {
					f, err := conns[n].RecvType(wire.TypeDeliver)
					if err != nil {
						t.Fatalf("%s: %v", n, err)
					}
					if string(f.Payload) == fence {
						break
					}
					if string(f.Payload) != payload || string(f.User) != tt.from || f.Mode != tt.send.Mode || f.Trace != tt.send.Trace {
						t.Fatalf("%s got deliver %s from %s mode %s trace %d", n, f.Payload, f.User, f.Mode, f.Trace)
					}
					got++
				}
				if got > 1 {
					t.Errorf("%s got the cast %d times", n, got)
				}
				if got == 1 {
					reached = append(reached, n)
				}
			}
			if !slices.Equal(reached, tt.reached) {
				t.Errorf("reached %v, want %v", reached, tt.reached)
			}
		})
	}
}

func TestOwnerHandOverAndNotices(t *testing.T) {
	p := startRelay(t)
	a := join(t, p.TCP, "r", "a")
	b := join(t, p.TCP, "r", "b")
	if f, err := a.RecvType(wire.TypeMemberJoined); err != nil || string(f.User) != "b" {
		t.Fatalf("a: member_joined b: %v", err)
	}
	c := dial(t, p.TCP)
	j, err := c.Join("r", "c", nil)
	if err != nil || j.Owner != "a" || !slices.Equal(j.Members, []string{"a", "b", "c"}) {
		t.Fatalf("c joined %+v, %v", j, err)
	}
	for _, m := range []*client.Conn{a, b} {
		if f, err := m.RecvType(wire.TypeMemberJoined); err != nil || string(f.User) != "c" {
			t.Fatalf("member_joined c: %v", err)
		}
	}
	// The owner leaves: b, the longest present, owns the room now.
	if err := a.Leave(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*client.Conn{b, c} {
		f, err := m.RecvType(wire.TypeMemberLeft)
		if err != nil || string(f.User) != "a" || string(f.Owner) != "b" {
			t.Fatalf("member_left a: %v %+v", err, f)
		}
	}
	send(t, c, wire.Send{Mode: wire.Ownercast, Payload: []byte("to-owner")})
	if from, pl := nextDeliver(t, b); from != "c" || pl != "to-owner" {
		t.Fatalf("owner b got %s from %s", pl, from)
	}
	// a rejoins on the same connection (TCP may join again after leave)
	// and is the newest member now.
	if j, err := a.Join("r", "a", nil); err != nil || j.Owner != "b" || !slices.Equal(j.Members, []string{"b", "c", "a"}) {
		t.Fatalf("rejoin %+v %v", j, err)
	}
	// b closes without leave: ownership passes to c.
	b.Close()
	f, err := c.RecvType(wire.TypeMemberLeft)
	if err != nil || string(f.User) != "b" || string(f.Owner) != "c" {
		t.Fatalf("member_left b: %v", err)
	}
}

func TestHeartbeatAndIdleTimeout(t *testing.T) {
	p := startRelay(t, "--idle-timeout", "600ms")
	a := join(t, p.TCP, "hb", "a")
	b := join(t, p.TCP, "hb", "b")
	if err := a.Heartbeat(424242); err != nil {
		t.Fatal(err)
	}
	f, err := a.RecvType(wire.TypeHeartbeatReply)
	if err != nil || f.Timestamp != 424242 || f.ServerTime == 0 {
		t.Fatalf("heartbeat reply %+v %v", f, err)
	}
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("hb", "u", nil); err != nil {
		t.Fatal(err)
	}
	if err := u.Heartbeat(7); err != nil {
		t.Fatal(err)
	}
	if f, err := u.RecvType(wire.TypeHeartbeatReply); err != nil || f.Timestamp != 7 {
		t.Fatalf("udp heartbeat reply: %v", err)
	}
	// b keeps heartbeating; a and u go silent and are timed out.
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				b.Heartbeat(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	expectError(t, a, wire.ErrIdleTimeout)
	if f, err := u.RecvType(wire.TypeError); err != nil || f.Code != wire.ErrIdleTimeout {
		t.Fatalf("udp session: %v, want idle_timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("idle timeout took %v", d)
	}
	left := map[string]bool{}
	for len(left) < 2 {
		f, err := b.RecvType(wire.TypeMemberLeft)
		if err != nil {
			t.Fatal(err)
		}
		left[string(f.User)] = true
	}
	if !left["a"] || !left["u"] {
		t.Errorf("b saw leaves %v", left)
	}
}

func TestJoinTimeout(t *testing.T) {
	p := startRelay(t, "--join-timeout", "400ms")
	start := time.Now()
	silent := dial(t, p.TCP)
	// A byte-at-a-time client can't extend its time: the deadline counts
	// from connect.
	trickle := dial(t, p.TCP)
	join := wire.AppendJoin(nil, "r", "slowpoke", nil, 0)
	go func() {
		for _, b := range join[:len(join)-1] {
			if trickle.WriteRaw([]byte{b}) != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	expectError(t, silent, wire.ErrJoinTimeout)
	expectError(t, trickle, wire.ErrJoinTimeout)
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("join timeout took %v", d)
	}
	p.waitMetric(t, `relay_disconnects_total{reason="join_timeout"}`, 2)
}

func TestLimits(t *testing.T) {
	p := startRelay(t, "--max-room-members", "2", "--max-connections", "4")
	a := join(t, p.TCP, "r", "a")
	join(t, p.TCP, "r", "b")
	full := dial(t, p.TCP)
	if _, err := full.Join("r", "c", nil); !isCode(err, wire.ErrRoomFull) {
		t.Fatalf("third member: %v", err)
	}
	// Refused connections are closed and stop counting.
	full.Close()
	p.waitMetricEq(t, `relay_connections{transport="tcp"}`, 2)
	// The same user id in another room is fine.
	join(t, p.TCP, "other", "a")
	// 3 connections left; up to 4 is allowed, then server_full.
	join(t, p.TCP, "other", "b")
	over := dial(t, p.TCP)
	if _, err := over.Join("other", "z", nil); !isCode(err, wire.ErrServerFull) {
		t.Fatalf("over max connections: %v", err)
	}
	// a is untouched by all of that.
	send(t, a, wire.Send{Mode: wire.Broadcast, Payload: []byte("still here")})
	if _, pl := nextDeliver(t, a); pl != "still here" {
		t.Fatalf("a got %q", pl)
	}
	p.waitMetric(t, `relay_joins_total{result="room_full"}`, 1)
	p.waitMetric(t, `relay_joins_total{result="ok"}`, 4)
}

func isCode(err error, code wire.ErrorCode) bool {
	se, ok := err.(*client.ServerError)
	return ok && se.Code == code
}

func TestAuth(t *testing.T) {
	secret := []byte("s3cret")
	p := startRelay(t, "--auth-secret", string(secret))
	future := time.Now().Add(time.Hour)
	tests := []struct {
		name  string
		user  string
		token []byte
		want  wire.ErrorCode // 0: accepted
	}{
		{"accepted", "alice", auth.Sign(secret, "alice", future), 0},
		{"missing", "bob", nil, wire.ErrAuthRequired},
		{"expired", "carol", auth.Sign(secret, "carol", time.Now().Add(-time.Second)), wire.ErrAuthExpired},
		{"forged", "dave", auth.Sign([]byte("guess"), "dave", future), wire.ErrAuthInvalid},
		{"other user's token", "eve", auth.Sign(secret, "alice", future), wire.ErrAuthInvalid},
		{"truncated", "fay", auth.Sign(secret, "fay", future)[:20], wire.ErrAuthInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, p.TCP)
			_, err := c.Join("auth", tt.user, tt.token)
			if tt.want == 0 {
				if err != nil {
					t.Fatalf("join: %v", err)
				}
				return
			}
			if !isCode(err, tt.want) {
				t.Fatalf("join: %v, want %s", err, tt.want)
			}
			if _, err := c.Recv(); err == nil {
				t.Fatal("connection still open after refusal")
			}
		})
	}
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("auth", "uma", auth.Sign(secret, "uma", future)); err != nil {
		t.Fatalf("udp auth join: %v", err)
	}
}

// frame builds a raw frame: length, type, body.
func frame(typ byte, body ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(body)))
	return append(append(b, typ), body...)
}

func id(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// TestBadInput sends each malformed input on its own connection and checks
// the documented reaction (error frame with the code, then close), while a
// healthy neighbour in the same room keeps receiving.
func TestBadInput(t *testing.T) {
	p := startRelay(t, "--max-frame", "1188")
	talker := join(t, p.TCP, "room", "talker")
	neighbour := join(t, p.TCP, "room", "neighbour")
	long := strings.Repeat("x", 65)
	joinBody := func(version byte, room, user string) []byte {
		return cat([]byte{version}, id(room), id(user), []byte{0, 0})
	}
	tests := []struct {
		name   string
		joined bool // join first, then send raw
		raw    []byte
		want   wire.ErrorCode
	}{
		{"length zero", false, []byte{0, 0, 0, 0, 1}, wire.ErrMalformed},
		{"oversized", false, cat(binary.BigEndian.AppendUint32(nil, 5000), []byte{3}), wire.ErrOversized},
		{"oversized header only", false, binary.BigEndian.AppendUint32(nil, 1<<31), wire.ErrOversized},
		{"unknown type", false, frame(0x07, 1, 2), wire.ErrUnknownType},
		{"server type from client", true, frame(0x84, 0x01, 1, 'a'), wire.ErrUnknownType},
		{"send before join", false, frame(0x03, 0x01, 'h', 'i'), wire.ErrNotJoined},
		{"heartbeat before join", false, frame(0x04, 0, 0, 0, 0, 0, 0, 0, 1), wire.ErrNotJoined},
		{"leave before join", false, frame(0x02), wire.ErrNotJoined},
		{"bad version", false, frame(0x01, joinBody(9, "room", "v")...), wire.ErrBadVersion},
		{"empty user id", false, frame(0x01, joinBody(1, "room", "")...), wire.ErrBadName},
		{"room name over 64", false, frame(0x01, joinBody(1, long, "u")...), wire.ErrBadName},
		{"join truncated", false, frame(0x01, 1, 4, 'r', 'o', 'o', 'm', 1, 'u'), wire.ErrMalformed},
		{"auth length past end", false, frame(0x01, cat([]byte{1}, id("room"), id("u"), []byte{0, 9, 1})...), wire.ErrMalformed},
		{"second join", true, wire.AppendJoin(nil, "room", "again", nil, 0), wire.ErrAlreadyJoined},
		{"reserved flag bits", true, frame(0x03, 0x41, 'x'), wire.ErrMalformed},
		{"cast mode 0", true, frame(0x03, 0x00, 'x'), wire.ErrMalformed},
		{"cast mode 6", true, frame(0x03, 0x06, 'x'), wire.ErrMalformed},
		{"cast mode 7", true, frame(0x03, 0x07, 'x'), wire.ErrMalformed},
		{"manycast no targets", true, frame(0x03, 0x04, 0), wire.ErrBadTarget},
		{"unicast empty target", true, frame(0x03, 0x03, 0, 'x'), wire.ErrBadName},
		{"manycast target past end", true, frame(0x03, 0x04, 2, 3, 'b', 'o', 'b', 5, 'x'), wire.ErrMalformed},
		{"trace cut short", true, frame(0x03, 0x81, 1, 2, 3), wire.ErrMalformed},
		{"heartbeat short", true, frame(0x04, 1, 2, 3), wire.ErrMalformed},
		{"heartbeat trailing bytes", true, frame(0x04, 0, 0, 0, 0, 0, 0, 0, 1, 9), wire.ErrMalformed},
		{"leave with body", true, frame(0x02, 1), wire.ErrMalformed},
		{"good frame then garbage", true, cat(wire.AppendHeartbeat(nil, 5), []byte{0, 0, 0, 2, 0xff, 0}), wire.ErrUnknownType},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, p.TCP)
			if tt.joined {
				if _, err := c.Join("room", fmt.Sprintf("bad%d", i), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.WriteRaw(tt.raw); err != nil {
				t.Fatal(err)
			}
			expectError(t, c, tt.want)
			// The neighbour keeps getting the talker's messages.
			msg := fmt.Sprintf("after-%d", i)
			send(t, talker, wire.Send{Mode: wire.Othercast, Payload: []byte(msg)})
			if from, pl := nextDeliver(t, neighbour); from != "talker" || pl != msg {
				t.Fatalf("neighbour got %q from %s", pl, from)
			}
		})
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="malformed"}`, 9)
	p.waitMetric(t, `relay_rejected_frames_total{reason="not_joined"}`, 3)
}

// TestUDPGarbageAndAmplification: garbage datagrams get nothing back and
// are counted; frames with token 0 other than a good join get their error,
// never more bytes than they had; a join gets one joined no larger than the
// join datagram, and nothing more until the session is confirmed, when the
// rest of its member list follows.
func TestUDPGarbageAndAmplification(t *testing.T) {
	p := startRelay(t)
	// Fill a room so its member list is longer than a small join.
	var members []string
	for i := 0; i < 20; i++ {
		members = append(members, fmt.Sprintf("member-with-a-long-name-%02d", i))
		join(t, p.TCP, "big", members[i])
	}
	uc := rawUDP(t, p.UDP)
	garbage := [][]byte{
		{1, 2, 3},
		make([]byte, 40),
		cat(make([]byte, 8), []byte{0, 0, 0, 99, 3}),                      // length over datagram
		cat([]byte{0, 0, 0, 0, 0, 0, 0, 7}, wire.AppendHeartbeat(nil, 1)), // unknown session
	}
	for _, g := range garbage {
		if _, err := uc.Write(g); err != nil {
			t.Fatal(err)
		}
	}
	// Frames with token 0 that are not a good join: their error, cut to
	// the datagram's size.
	for _, tt := range []struct {
		d    []byte
		code wire.ErrorCode
	}{
		{cat(make([]byte, 8), wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast})), wire.ErrNotJoined},
		{cat(make([]byte, 8), frame(0x03, 0x41)), wire.ErrMalformed},
		{cat(make([]byte, 8), frame(0x01, cat([]byte{9}, id("big"), id("v"), []byte{0, 0})...)), wire.ErrBadVersion},
		{cat(make([]byte, 8), frame(0x01, cat([]byte{1}, id("big"), id(""), []byte{0, 0})...)), wire.ErrBadName},
	} {
		f, n := exchange(t, uc, tt.d)
		if f.Type != wire.TypeError || f.Code != tt.code || n > len(tt.d) {
			t.Fatalf("answer to %x: %d bytes, %v %s %q; want %s in at most %d bytes", tt.d, n, f.Type, f.Code, f.Text, tt.code, len(tt.d))
		}
	}
	// An unpadded join: not even a joined with no members fits, so
	// pad_required, no larger than the join.
	small := cat(make([]byte, 8), wire.AppendJoin(nil, "big", "newcomer", nil, 0))
	f, n := exchange(t, uc, small)
	if f.Type != wire.TypeError || f.Code != wire.ErrPadRequired || n > len(small) {
		t.Fatalf("reply of %d bytes to a %d-byte join: %v %s, want pad_required", n, len(small), f.Type, f.Code)
	}
	var need int
	fmt.Sscan(string(f.Text), &need)
	// Padded to exactly the size asked for: a joined of exactly that size
	// (pad_required is not off by one), listing no member yet.
	padded := cat(make([]byte, 8), wire.AppendJoin(nil, "big", "newcomer", nil, need-len(small)))
	f, n = exchange(t, uc, padded)
	if f.Type != wire.TypeJoined || n != len(padded) || f.NumMembers != 0 {
		t.Fatalf("padded join (%d bytes) answer: %d bytes, %v with %d members", len(padded), n, f.Type, f.NumMembers)
	}
	token := f.SessionToken
	// Unconfirmed: nothing more, even while the room talks.
	talker := join(t, p.TCP, "big", "talker")
	send(t, talker, wire.Send{Mode: wire.Broadcast, Payload: []byte("hello")})
	expectSilence(t, uc, 300*time.Millisecond)
	// Confirm: the rest of the list (the joiner last), the notice of the
	// talker's join, then the heartbeat's reply.
	if _, err := uc.Write(wire.AppendHeartbeat(wire.AppendDatagram(nil, token), 42)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 || got[len(got)-1] != "newcomer" {
		f, _ = recvDatagram(t, uc)
		if f.Type != wire.TypeJoined || f.SessionToken != token {
			t.Fatalf("after confirm: %v, want the rest of the member list", f.Type)
		}
		f.Members(func(id []byte) { got = append(got, string(id)) })
	}
	if want := append(slices.Clone(members), "newcomer"); !slices.Equal(got, want) {
		t.Fatalf("member list %q, want %q", got, want)
	}
	if f, _ = recvDatagram(t, uc); f.Type != wire.TypeMemberJoined || string(f.User) != "talker" {
		t.Fatalf("after the list: %v %q, want member_joined talker", f.Type, f.User)
	}
	if f, _ = recvDatagram(t, uc); f.Type != wire.TypeHeartbeatReply || f.Timestamp != 42 {
		t.Fatalf("after the notices: %v, want the heartbeat reply", f.Type)
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="garbage"}`, 3)
	p.waitMetric(t, `relay_rejected_frames_total{reason="unknown_session"}`, 1)
	p.waitMetric(t, `relay_rejected_frames_total{reason="not_joined"}`, 1)
	p.waitMetric(t, `relay_rejected_frames_total{reason="malformed"}`, 1)
	p.waitMetric(t, `relay_undelivered_frames_total{reason="unconfirmed"}`, 1)
}

// rawUDP is a UDP socket connected to the relay, closed at the test's end.
func rawUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc
}

// exchange sends datagram d and returns the answer decoded and its size.
func exchange(t *testing.T, uc *net.UDPConn, d []byte) (*wire.Frame, int) {
	t.Helper()
	if _, err := uc.Write(d); err != nil {
		t.Fatal(err)
	}
	return recvDatagram(t, uc)
}

// recvDatagram reads one datagram (within 5 s) and decodes its one frame.
func recvDatagram(t *testing.T, uc *net.UDPConn) (*wire.Frame, int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := uc.Read(buf)
	if err != nil {
		t.Fatalf("no datagram from the relay: %v", err)
	}
	var f wire.Frame
	if m, err := wire.Decode(buf[:n], wire.DefaultMaxFrame, &f); err != nil || m != n {
		t.Fatalf("datagram %x: %v", buf[:n], err)
	}
	return &f, n
}

// expectSilence fails if a datagram arrives within d.
func expectSilence(t *testing.T, uc *net.UDPConn, d time.Duration) {
	t.Helper()
	buf := make([]byte, 64<<10)
	uc.SetReadDeadline(time.Now().Add(d))
	if n, err := uc.Read(buf); err == nil {
		t.Fatalf("unexpected datagram of %d bytes: %x", n, buf[:min(n, 32)])
	}
}

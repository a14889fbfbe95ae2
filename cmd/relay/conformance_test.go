package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Conformance: the cases where docs/protocol.md and the relay once
// disagreed (issue 23), each as the document now states it.

// TestAuthExpiryAndFieldCap: a token's expiry is a u64 (2^63 and 2^64−1
// are far in the future, not negative); the auth field holds at most 1024
// bytes (1025 is malformed); a relay without a secret ignores the field.
func TestAuthExpiryAndFieldCap(t *testing.T) {
	secret := []byte("conformance")
	p := startRelay(t, "--auth-secret", string(secret))
	tests := []struct {
		name  string
		token []byte
		want  wire.ErrorCode
	}{
		{"expiry 2^64-1", auth.SignUntil(secret, "u1", 1<<64-1), 0},
		{"expiry 2^63", auth.SignUntil(secret, "u2", 1<<63), 0},
		{"expiry 2^63-1", auth.SignUntil(secret, "u3", 1<<63-1), 0},
		{"expired", auth.SignUntil(secret, "u4", uint64(time.Now().Unix()-1)), wire.ErrAuthExpired},
		{"auth field of 1024 bytes", make([]byte, wire.MaxAuthLen), wire.ErrAuthInvalid},
		{"auth field of 1025 bytes", make([]byte, wire.MaxAuthLen+1), wire.ErrMalformed},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, p.TCP)
			user := fmt.Sprintf("u%d", i+1)
			if err := c.WriteRaw(joinRaw("auth", user, tt.token)); err != nil {
				t.Fatal(err)
			}
			if tt.want != 0 {
				expectError(t, c, tt.want)
				return
			}
			f, err := c.Recv()
			if err != nil || f.Type != wire.TypeJoined {
				t.Fatalf("answer %v (%v), want joined", f, err)
			}
		})
	}
	open := startRelay(t)
	for _, tok := range [][]byte{auth.Sign(secret, "x", time.Now()), make([]byte, wire.MaxAuthLen)} {
		c := dial(t, open.TCP)
		if err := c.WriteRaw(joinRaw("open", "x", tok)); err != nil {
			t.Fatal(err)
		}
		if f, err := c.Recv(); err != nil || f.Type != wire.TypeJoined {
			t.Fatalf("relay without a secret, join with a %d-byte token: %v (%v), want joined", len(tok), f, err)
		}
		c.Close()
	}
}

// joinRaw encodes a join whose auth field may be longer than the encoder
// allows (to test the cap).
func joinRaw(room, user string, tok []byte) []byte {
	body := cat([]byte{wire.Version}, id(room), id(user), []byte{byte(len(tok) >> 8), byte(len(tok))}, tok)
	return frame(0x01, body...)
}

// TestWrongSourceWhicheverWorker: a live session's token from another
// source is wrong_source whichever UDP worker the kernel hands it to, and
// never unknown_session.
func TestWrongSourceWhicheverWorker(t *testing.T) {
	p := startRelay(t, "--udp-workers", "4")
	c := dialUDP(t, p.UDP)
	if _, err := c.Join("ws", "owner", nil); err != nil {
		t.Fatal(err)
	}
	const others = 24 // source ports spread over the 4 workers
	d := wire.AppendHeartbeat(wire.AppendDatagram(nil, c.Token()), 1)
	for range others {
		if _, err := rawUDP(t, p.UDP).Write(d); err != nil {
			t.Fatal(err)
		}
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="wrong_source"}`, others)
	if got := p.metric(t, `relay_rejected_frames_total{reason="unknown_session"}`); got != 0 {
		t.Errorf("unknown_session = %v, want 0", got)
	}
}

// TestTCPBurstPackedForUDPMember: a burst a TCP member sends in one write
// reaches a UDP member packed, several frames to a datagram.
func TestTCPBurstPackedForUDPMember(t *testing.T) {
	p := startRelay(t)
	sender := join(t, p.TCP, "mixed", "tcp")
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("mixed", "udp", nil); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var burst []byte
	for i := range n {
		burst = wire.AppendSend(burst, wire.Send{Mode: wire.Othercast, Payload: []byte(fmt.Sprintf("pose-%02d", i))})
	}
	if err := sender.WriteRaw(burst); err != nil {
		t.Fatal(err)
	}
	nc := u.NetConn()
	buf := make([]byte, 64<<10)
	delivers, datagrams := 0, 0
	for delivers < n {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("after %d deliveries in %d datagrams: %v", delivers, datagrams, err)
		}
		in := 0
		for d := buf[:k]; len(d) > 0; {
			var f wire.Frame
			m, err := wire.Decode(d, wire.DefaultMaxFrame, &f)
			if err != nil {
				t.Fatalf("datagram %x: %v", buf[:k], err)
			}
			if f.Type == wire.TypeDeliver {
				if want := fmt.Sprintf("pose-%02d", delivers); string(f.Payload) != want {
					t.Fatalf("deliver %q, want %q", f.Payload, want)
				}
				delivers++
				in++
			}
			d = d[m:]
		}
		if in > 0 {
			datagrams++
		}
	}
	if datagrams > n/4 {
		t.Errorf("%d deliveries came in %d datagrams: not packed", n, datagrams)
	}
}

// TestRepeatedUDPJoinListsJoinerLast: a join sent again by a confirmed
// session gets the member list as it is now, the joiner last (so "read
// until your own id" holds), owner as now.
func TestRepeatedUDPJoinListsJoinerLast(t *testing.T) {
	p := startRelay(t)
	uc := rawUDP(t, p.UDP)
	j := cat(make([]byte, 8), wire.AppendJoin(nil, "order", "zed", nil, wire.UDPJoinPad-wire.TokenSize-len(wire.AppendJoin(nil, "order", "zed", nil, 0))))
	f, _ := exchange(t, uc, j)
	if f.Type != wire.TypeJoined {
		t.Fatalf("join: %v %s", f.Type, f.Code)
	}
	token := f.SessionToken
	if f, _ = exchange(t, uc, wire.AppendHeartbeat(wire.AppendDatagram(nil, token), 7)); f.Type != wire.TypeHeartbeatReply {
		t.Fatalf("confirm: %v", f.Type)
	}
	join(t, p.TCP, "order", "amy")
	join(t, p.TCP, "order", "bob")
	for range 2 {
		if f, _ := recvDatagram(t, uc); f.Type != wire.TypeMemberJoined {
			t.Fatalf("notice: %v", f.Type)
		}
	}
	if _, err := uc.Write(j); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 || got[len(got)-1] != "zed" {
		f, n := recvDatagram(t, uc)
		if f.Type != wire.TypeJoined || f.SessionToken != token || string(f.Owner) != "zed" || n > len(j) {
			t.Fatalf("answer to the repeat: %v token %x owner %q, %d bytes", f.Type, f.SessionToken, f.Owner, n)
		}
		f.Members(func(id []byte) { got = append(got, string(id)) })
		if len(got) > 3 {
			break
		}
	}
	if want := []string{"amy", "bob", "zed"}; !slices.Equal(got, want) {
		t.Fatalf("member list %q, want %q", got, want)
	}
	p.waitMetric(t, "relay_udp_join_repeats_total", 1)
}

// TestRateLimitedJoinAnswered: a join over the sender's rate limit is
// answered rate_limited (and the connection closed), not dropped silently.
func TestRateLimitedJoinAnswered(t *testing.T) {
	p := startRelay(t, "--rate-messages", "1", "--rate-messages-burst", "2")
	c := dial(t, p.TCP)
	if _, err := c.Join("rl", "a", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRaw(wire.AppendJoin(wire.AppendLeave(nil), "rl", "a", nil, 0)); err != nil {
		t.Fatal(err)
	}
	expectError(t, c, wire.ErrRateLimited)
	p.waitMetric(t, `relay_rate_limited_frames_total{limit="messages"}`, 1)
}

// TestHeaderCheckOrder: the length is checked before the type, the type
// before the body, the body before the connection's state.
func TestHeaderCheckOrder(t *testing.T) {
	p := startRelay(t, "--max-frame", "2000")
	tests := []struct {
		name string
		raw  []byte
		want wire.ErrorCode
	}{
		{"length over the cap, undefined type", cat([]byte{0, 0, 0x10, 0}, []byte{0x7f}), wire.ErrOversized},
		{"length 0, undefined type", []byte{0, 0, 0, 0, 0x7f}, wire.ErrMalformed},
		{"server type, bad body", frame(0x86, 1), wire.ErrUnknownType},
		{"bad body before join", frame(0x03, 0x41, 'x'), wire.ErrMalformed},
		{"good send before join", frame(0x03, 0x01, 'x'), wire.ErrNotJoined},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, p.TCP)
			if err := c.WriteRaw(tt.raw); err != nil {
				t.Fatal(err)
			}
			expectError(t, c, tt.want)
		})
	}
}

// TestDocTestVectors: the vectors in docs/protocol.md are the codec's
// golden ones, and a relay behaves as they say: the client frames,
// written as they are, get back the server frames of the document byte
// for byte (a relay without a secret ignores join_auth_padded's token).
func TestDocTestVectors(t *testing.T) {
	doc := readFile(t, "../../docs/protocol.md")
	_, rest, _ := strings.Cut(doc, "## Test vectors")
	_, block, _ := strings.Cut(rest, "```\n")
	block, _, _ = strings.Cut(block, "```")
	if golden := readFile(t, "../../internal/wire/testdata/vectors.golden"); block != golden {
		t.Fatalf("docs/protocol.md's vectors differ from internal/wire/testdata/vectors.golden:\n%s", block)
	}
	v := map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		name, hexs, _ := strings.Cut(line, " ")
		v[name] = unhex(t, hexs)
	}
	p := startRelay(t)
	alice := dial(t, p.TCP)
	write := func(c interface{ WriteRaw([]byte) error }, b []byte) {
		t.Helper()
		if err := c.WriteRaw(b); err != nil {
			t.Fatal(err)
		}
	}
	write(alice, v["join"])
	if f, err := alice.Recv(); err != nil || f.Type != wire.TypeJoined || f.NumMembers != 1 {
		t.Fatalf("join vector: %v %v", f, err)
	}
	bob := dial(t, p.TCP)
	if _, err := bob.Join("lobby", "bob", nil); err != nil {
		t.Fatal(err)
	}
	expectRaw(t, alice, v["member_joined"])
	write(alice, v["send_othercast_trace"])
	expectRaw(t, bob, v["deliver"])
	write(alice, v["send_broadcast"])
	expectRaw(t, bob, v["deliver_no_trace"])
	expectRaw(t, alice, v["deliver_no_trace"])
	write(alice, v["send_unicast"])
	expectRaw(t, bob, wire.AppendDeliver(nil, wire.Unicast, "alice", false, 0, []byte{1, 2}))
	write(alice, v["send_manycast"])
	expectRaw(t, bob, wire.AppendDeliver(nil, wire.Manycast, "alice", false, 0, []byte("x")))
	write(bob, v["send_ownercast"])
	expectRaw(t, alice, wire.AppendDeliver(nil, wire.Ownercast, "bob", false, 0, []byte("sync")))
	write(alice, v["heartbeat"])
	if f, err := alice.Recv(); err != nil || f.Type != wire.TypeHeartbeatReply || f.Timestamp != 0x17979cfe362a0000 {
		t.Fatalf("heartbeat vector: %v %v", f, err)
	}
	write(alice, v["leave"])
	expectRaw(t, bob, v["member_left"])

	// A relay without a secret ignores the token of join_auth_padded.
	open := startRelay(t)
	c := dial(t, open.TCP)
	write(c, v["join_auth_padded"])
	if f, err := c.Recv(); err != nil || f.Type != wire.TypeJoined {
		t.Fatalf("join_auth_padded on a relay without a secret: %v %v", f, err)
	}
	// Server→client vectors from a client are refused from the header.
	for _, name := range []string{"joined", "error"} {
		c := dial(t, p.TCP)
		write(c, v[name])
		expectError(t, c, wire.ErrUnknownType)
	}
	// The datagram vector's token is no session: dropped, counted.
	if _, err := rawUDP(t, p.UDP).Write(v["udp_datagram_heartbeat"]); err != nil {
		t.Fatal(err)
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="unknown_session"}`, 1)
}

// expectRaw reads c's next frame and compares its bytes with want.
func expectRaw(t *testing.T, c interface {
	Recv() (*wire.Frame, error)
}, want []byte) {
	t.Helper()
	f, err := c.Recv()
	if err != nil {
		t.Fatalf("waiting for %x: %v", want, err)
	}
	if got := reencode(f); !slices.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

// reencode is the frame's bytes as the relay sent them (the decoder keeps
// only the fields; every server frame here re-encodes to its bytes).
func reencode(f *wire.Frame) []byte {
	switch f.Type {
	case wire.TypeMemberJoined:
		return wire.AppendMemberJoined(nil, string(f.User))
	case wire.TypeMemberLeft:
		return wire.AppendMemberLeft(nil, string(f.User), string(f.Owner))
	case wire.TypeDeliver:
		return wire.AppendDeliver(nil, f.Mode, string(f.User), f.HasTrace, f.Trace, f.Payload)
	}
	return []byte(f.Type.String())
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPartialBudgetCountsBytesReceived: --partial-budget counts the bytes
// a partial frame has brought (its buffer), not the length it declares.
func TestPartialBudgetCountsBytesReceived(t *testing.T) {
	p := startRelay(t)
	c := dial(t, p.TCP)
	join := wire.AppendJoin(nil, "partial", "p", nil, 0)
	head := cat([]byte{0, 0, 0xea, 0x60, 0x03}, make([]byte, 10)) // declares 60,000 bytes, sends 15
	if err := c.WriteRaw(cat(join, head)); err != nil {
		t.Fatal(err)
	}
	p.waitMetric(t, "relay_partial_frame_bytes", 1)
	if got := p.metric(t, "relay_partial_frame_bytes"); got > 1024 {
		t.Fatalf("relay_partial_frame_bytes = %v for a frame declaring 60,000 bytes and bringing 15", got)
	}
}

// TestRemovalLag: a member the relay closes with an error (here
// idle_timeout) and that does not close its end leaves its room within the
// relay's 1 s linger of its error frame, not at once (docs/protocol.md,
// "When things happen").
func TestRemovalLag(t *testing.T) {
	p := startRelay(t, "--idle-timeout", "1s")
	a := join(t, p.TCP, "lag", "a")
	b := join(t, p.TCP, "lag", "b")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a stays alive
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				a.Heartbeat(1)
			}
		}
	}()
	f, err := b.RecvType(wire.TypeError)
	if err != nil || f.Code != wire.ErrIdleTimeout {
		t.Fatalf("b: %v %v, want idle_timeout", f, err)
	}
	errAt := time.Now()
	if _, err := a.RecvType(wire.TypeMemberLeft); err != nil {
		t.Fatal(err)
	}
	lag := time.Since(errAt)
	t.Logf("member_left %v after the error frame", lag.Round(time.Millisecond))
	if lag > 1500*time.Millisecond {
		t.Errorf("member_left %v after b's error frame: over the 1 s linger", lag)
	}
}

// TestLeaveOverRateLimitActedOn: a leave over the sender's rate limit is
// still acted on: the others get member_left, and the client's next join,
// once under its limit again, joins instead of being refused
// already_joined.
func TestLeaveOverRateLimitActedOn(t *testing.T) {
	p := startRelay(t, "--rate-messages", "1", "--rate-messages-burst", "2")
	other := join(t, p.TCP, "rl-leave", "other")
	c := join(t, p.TCP, "rl-leave", "a") // 1 of the burst of 2
	send(t, c, wire.Send{Mode: wire.Othercast, Payload: []byte("x")})
	if err := c.Leave(); err != nil { // over the burst
		t.Fatal(err)
	}
	for {
		f, err := other.Recv()
		if err != nil {
			t.Fatalf("waiting for member_left: %v", err)
		}
		if f.Type == wire.TypeMemberLeft {
			break
		}
	}
	time.Sleep(2500 * time.Millisecond) // under the limit again
	if _, err := c.Join("rl-leave", "a", nil); err != nil {
		t.Fatalf("join after the leave: %v", err)
	}
}

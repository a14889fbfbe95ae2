package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestServerTypesRefusedFromHeader: a client that sends a server→client
// type (0x81–0x86) gets unknown_type from the 5-byte header alone, before
// any of the body it announces; over UDP the datagram is dropped and
// counted as unknown_type.
func TestServerTypesRefusedFromHeader(t *testing.T) {
	p := startRelay(t)
	types := []wire.Type{wire.TypeJoined, wire.TypeMemberJoined, wire.TypeMemberLeft, wire.TypeDeliver, wire.TypeHeartbeatReply, wire.TypeError}
	for i, ty := range types {
		c := dial(t, p.TCP)
		if i%2 == 1 { // joined or not, the same answer
			if _, err := c.Join("hdr", "u"+ty.String(), nil); err != nil {
				t.Fatal(err)
			}
		}
		hdr := make([]byte, wire.HeaderSize)
		binary.BigEndian.PutUint32(hdr, 1000) // a body that never comes
		hdr[wire.LenSize] = byte(ty)
		if err := c.WriteRaw(hdr); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(3 * time.Second))
		expectError(t, c, wire.ErrUnknownType)
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="unknown_type"}`, float64(len(types)))

	// UDP: a whole datagram with a server→client frame is dropped.
	u, err := net.Dial("udp", p.UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	d := binary.BigEndian.AppendUint64(nil, 1)
	d = wire.AppendHeartbeatReply(d, 1, 2)
	if _, err := u.Write(d); err != nil {
		t.Fatal(err)
	}
	p.waitMetric(t, `relay_rejected_frames_total{reason="unknown_type"}`, float64(len(types)+1))
}

// TestMetricsInitialised: a fresh relay exposes every labelled counter
// with each of its known label values at 0, so dashboards show 0 rather
// than no data.
func TestMetricsInitialised(t *testing.T) {
	p := startRelay(t)
	body := scrape(t, p.Metrics)
	var want []string
	for _, code := range wire.ErrorCodes() {
		for _, name := range []string{"relay_rejected_frames_total{reason=", "relay_disconnects_total{reason=", "relay_joins_total{result="} {
			want = append(want, name+`"`+code.String()+`"} 0`)
		}
	}
	want = append(want,
		`relay_joins_total{result="ok"} 0`,
		`relay_rejected_frames_total{reason="garbage"} 0`,
		`relay_rejected_frames_total{reason="unknown_session"} 0`,
		`relay_rejected_frames_total{reason="wrong_source"} 0`,
		`relay_disconnects_total{reason="closed"} 0`,
		`relay_disconnects_total{reason="leave"} 0`,
		`relay_rate_limited_frames_total{limit="messages"} 0`,
		`relay_rate_limited_frames_total{limit="bytes"} 0`,
		`relay_frame_timeouts_total{cause="timeout"} 0`,
		`relay_frame_timeouts_total{cause="budget"} 0`,
		`relay_replaced_sessions_total 0`,
		`relay_queued_messages_total 0`,
		`relay_delivered_messages_total 0`,
		`relay_partial_frame_bytes 0`,
		`relay_udp_send_calls_total 0`,
		`relay_udp_sent_datagrams_total 0`,
		`relay_udp_receive_drops_total 0`,
		`relay_udp_join_repeats_total 0`,
	)
	lines := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		lines[l] = true
	}
	for _, w := range want {
		if !lines[w] {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeliveredCountsWrites: relay_delivered_messages_total counts what
// reached the sockets; a member cut as a slow consumer loses what was
// queued for it, which relay_queued_messages_total still counts.
func TestDeliveredCountsWrites(t *testing.T) {
	p := startRelay(t, "--max-pending", "262144", "--write-timeout", "1s", "--rate-messages", "-1", "--rate-bytes", "-1")
	sender := join(t, p.TCP, "r", "sender")
	healthy := join(t, p.TCP, "r", "healthy")
	nc, err := net.Dial("tcp", p.TCP)
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(4096)
	slow := client.New(nc)
	t.Cleanup(func() { slow.Close() })
	slow.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := slow.Join("r", "slow", nil); err != nil {
		t.Fatal(err)
	}
	healthy.RecvType(wire.TypeMemberJoined)
	const n = 6000
	got := make(chan int, 1)
	var recvErr error         // the healthy member's read error, if it got one; read after got
	var received atomic.Int64 // deliveries the healthy member has read so far
	go func() {
		k := 0
		for k < n {
			if _, err := healthy.RecvType(wire.TypeDeliver); err != nil {
				recvErr = err
				break
			}
			k++
			received.Store(int64(k))
		}
		got <- k
	}()
	// The sender keeps at most 100 frames (100 KB) ahead of the healthy
	// member, well under its 256 KiB --max-pending, so a reader goroutine
	// descheduled for a moment on a loaded host is not cut as a slow
	// consumer (it was, at load 20: "healthy member got 621 of 6000"); the
	// slow member, which never reads, still overflows.
	payload := make([]byte, 1000)
	for i := 0; i < n; i++ {
		for deadline := time.Now().Add(10 * time.Second); int64(i)-received.Load() > 100; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the healthy member read %d of %d sent within 10 s: %v", received.Load(), i, recvErr)
			}
		}
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: payload})
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if k := <-got; k != n {
		t.Fatalf("healthy member got %d of %d: %v", k, n, recvErr)
	}
	p.waitMetric(t, `relay_disconnects_total{reason="slow_consumer"}`, 1)
	queued := p.metric(t, "relay_queued_messages_total")
	delivered := p.metric(t, "relay_delivered_messages_total")
	sent := p.metric(t, "relay_sent_bytes_total")
	t.Logf("queued %v, delivered %v, sent %v bytes", queued, delivered, sent)
	frame := float64(len(wire.AppendDeliver(nil, wire.Othercast, "sender", false, 0, payload)))
	switch {
	case delivered < n:
		t.Errorf("delivered %v, but the healthy member alone received %d", delivered, n)
	case delivered*frame > sent:
		t.Errorf("delivered %v frames of %v bytes, but only %v bytes were written", delivered, frame, sent)
	case queued-delivered < float64(200<<10)/frame:
		// The slow member's queue was over 256 KiB when it was cut.
		t.Errorf("queued %v, delivered %v: the slow member's dropped queue counted as delivered", queued, delivered)
	}
}

// TestReconnectReplacesHalfOpen: a member whose connection went half-open
// (the client stopped reading and writing without closing: no FIN, no RST)
// rejoins at once from a new connection; the old one gets replaced, the
// room sees member_left then member_joined next to each other, and with
// --auth-secret only a token for that user can do it.
func TestReconnectReplacesHalfOpen(t *testing.T) {
	secret := "s3cret"
	p := startRelay(t, "--auth-secret", secret)
	token := func(user string) []byte {
		return auth.Sign([]byte(secret), user, time.Now().Add(time.Hour))
	}
	watcher := dial(t, p.TCP)
	if _, err := watcher.Join("vr", "watcher", token("watcher")); err != nil {
		t.Fatal(err)
	}
	old := dial(t, p.TCP)
	if _, err := old.Join("vr", "ann", token("ann")); err != nil {
		t.Fatal(err)
	}
	if f, err := watcher.RecvType(wire.TypeMemberJoined); err != nil || string(f.User) != "ann" {
		t.Fatalf("member_joined ann: %v", err)
	}
	// old is half-open from here on: never read or written again.

	// Someone else's token cannot take ann's place.
	thief := dial(t, p.TCP)
	if _, err := thief.Join("vr", "ann", token("mallory")); !isCode(err, wire.ErrAuthInvalid) {
		t.Fatalf("join as ann with mallory's token: %v, want auth_invalid", err)
	}
	start := time.Now()
	fresh := dial(t, p.TCP)
	j, err := fresh.Join("vr", "ann", token("ann"))
	if err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("rejoin took %v, want under 1 s", d)
	}
	if j.Owner != "watcher" || len(j.Members) != 2 || j.Members[1] != "ann" {
		t.Errorf("rejoined: owner %q members %v", j.Owner, j.Members)
	}
	// The watcher sees one leave and one join of ann, adjacent.
	var seen []string
	for range 2 {
		f, err := watcher.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, f.Type.String()+" "+string(f.User))
	}
	if seen[0] != "member_left ann" || seen[1] != "member_joined ann" {
		t.Fatalf("watcher saw %q, want member_left ann then member_joined ann", seen)
	}
	// The new connection is ann now: casts reach her and come from her.
	send(t, watcher, wire.Send{Mode: wire.Unicast, Targets: []string{"ann"}, Payload: []byte("hi ann")})
	if from, pl := nextDeliver(t, fresh); from != "watcher" || pl != "hi ann" {
		t.Fatalf("fresh got %q from %s", pl, from)
	}
	// The old connection, read at last, was told and closed.
	expectError(t, old, wire.ErrReplaced)
	p.waitMetric(t, "relay_replaced_sessions_total", 1)
	p.waitMetric(t, `relay_disconnects_total{reason="replaced"}`, 1)
	if got := p.metric(t, `relay_connections{transport="tcp"}`); got < 2 {
		t.Errorf("tcp connections %v", got)
	}
}

// TestLivenessRemovesSilentHeartbeater: a client that heartbeats every
// 200 ms and then goes silent (its connection open) is removed with
// idle_timeout within the documented bound, max(3 × 200 ms, 5 s) plus the
// sweep, long before --idle-timeout; one that keeps heartbeating stays.
func TestLivenessRemovesSilentHeartbeater(t *testing.T) {
	p := startRelay(t, "--idle-timeout", "60s")
	quiet := join(t, p.TCP, "live", "quiet")
	steady := join(t, p.TCP, "live", "steady")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				steady.Heartbeat(1)
			}
		}
	}()
	stopBeats := sync.OnceFunc(func() { close(stop); <-done })
	defer stopBeats()
	for i := 0; i < 4; i++ {
		if err := quiet.Heartbeat(int64(i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	last := time.Now().Add(-200 * time.Millisecond)
	quiet.SetDeadline(time.Now().Add(15 * time.Second))
	expectError(t, quiet, wire.ErrIdleTimeout)
	took := time.Since(last)
	t.Logf("removed %v after its last heartbeat", took)
	// The bound is 5 s; the sweep ticks every second; a busy machine adds
	// a little.
	if took < 4900*time.Millisecond || took > 7500*time.Millisecond {
		t.Errorf("removed %v after its last heartbeat, want 5-6 s", took)
	}
	// steady is still there.
	stopBeats() // a client.Conn has one writer at a time
	send(t, steady, wire.Send{Mode: wire.Broadcast, Payload: []byte("still")})
	steady.SetDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := steady.Recv()
		if err != nil {
			t.Fatalf("steady: %v", err)
		}
		if f.Type == wire.TypeDeliver {
			break
		}
	}
}

var stallRooms atomic.Int64

// stallInFrame opens n connections, joins each (so only the frame timeout
// can end it), and sends each the header and all but one byte of a body
// frame bytes long: n partial frames the relay must hold.
func stallInFrame(t *testing.T, addr string, n, frame int) []net.Conn {
	t.Helper()
	part := make([]byte, frame-1)
	binary.BigEndian.PutUint32(part, uint32(frame-wire.LenSize))
	part[wire.LenSize] = byte(wire.TypeSend)
	part[wire.HeaderSize] = byte(wire.Broadcast)
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c := dial(t, addr)
		if _, err := c.Join(fmt.Sprintf("stall%d", stallRooms.Add(1)), "s", nil); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		if err := c.WriteRaw(part); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		conns = append(conns, c.NetConn())
	}
	return conns
}

// TestStalledFramesClosed: 1,000 joined connections stalled inside a 64 KiB
// frame are closed with frame_timeout within the frame timeout (plus the
// sweep), and the relay's memory returns to within 10% of what it was
// before.
func TestStalledFramesClosed(t *testing.T) {
	const n, frame, timeout = 1000, 64 << 10, 2 * time.Second
	p := startRelay(t, "--frame-timeout", timeout.String(), "--idle-timeout", "60s")
	rss := func() float64 { return p.metric(t, "process_resident_memory_bytes") }
	// The baseline is the same relay after the same load done right: n
	// connections that each send a whole 64 KiB frame, then close. So its
	// buffers, pools, connection tables and heap layout are those of a
	// relay that has served n such connections, and what the test compares
	// is the memory the stalled frames pin, nothing else.
	warm := stallInFrame(t, p.TCP, n, frame)
	for _, c := range warm {
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range warm {
		c.Close()
	}
	p.waitMetricEq(t, `relay_connections{transport="tcp"}`, 0)
	p.waitMetricEq(t, "relay_partial_frame_bytes", 0)
	time.Sleep(2 * time.Second) // the relay's memory settles (it reclaims once a fall stops)
	before := rss()
	start := time.Now()
	conns := stallInFrame(t, p.TCP, n, frame)
	stalled := time.Since(start)
	held := p.metric(t, "relay_partial_frame_bytes")
	during := rss()
	t.Logf("%d connections stalled in %v; partial frames hold %.1f MB; RSS %.1f MB before, %.1f MB during",
		n, stalled.Round(time.Millisecond), held/1e6, before/1e6, during/1e6)
	if held < float64(n*(frame-1))*0.5 {
		t.Errorf("partial frames hold %v bytes, want most of %d", held, n*(frame-1))
	}
	// Each stalled since its own write; the last one within timeout plus a
	// sweep tick (timeout/4) of its stall, and a margin for a busy machine.
	deadline := start.Add(stalled + timeout + timeout/4 + 2*time.Second)
	for p.metric(t, `relay_frame_timeouts_total{cause="timeout"}`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%v frame timeouts %v after the first stall, want %d", p.metric(t, `relay_frame_timeouts_total{cause="timeout"}`), time.Since(start), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("all closed %v after the first stall", time.Since(start).Round(time.Millisecond))
	for _, i := range []int{0, n / 2, n - 1} {
		c := client.New(conns[i])
		c.SetDeadline(time.Now().Add(5 * time.Second))
		expectError(t, c, wire.ErrFrameTimeout)
	}
	p.waitMetricEq(t, `relay_connections{transport="tcp"}`, 0)
	if got := p.metric(t, "relay_partial_frame_bytes"); got != 0 {
		t.Errorf("partial frame bytes %v after all closed", got)
	}
	// The Go runtime returns freed memory in the background, at a pace a
	// loaded host slows (60 MB still held 10 s after, at load 20): wait
	// up to 30 s for the bound; a quiet host gets there in a second or two.
	var after float64
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if after = rss(); after <= before*1.1 || time.Now().After(end) {
			break
		}
	}
	t.Logf("RSS after %.1f MB (%.0f%% of before)", after/1e6, 100*after/before)
	if after > before*1.1 {
		t.Errorf("RSS %.1f MB after, %.1f MB before: over 10%% more", after/1e6, before/1e6)
	}
}

// TestPartialFrameBudget: past --partial-budget the connections with the
// largest partial frames are closed until the rest fit; the others stay.
func TestPartialFrameBudget(t *testing.T) {
	const budget = 1 << 20
	p := startRelay(t, "--partial-budget", fmt.Sprint(budget), "--frame-timeout", "60s")
	small := stallInFrame(t, p.TCP, 10, 1000)
	stallInFrame(t, p.TCP, 30, 64<<10)
	p.waitMetric(t, `relay_frame_timeouts_total{cause="budget"}`, 10)
	deadline := time.Now().Add(5 * time.Second)
	for p.metric(t, "relay_partial_frame_bytes") > budget {
		if time.Now().After(deadline) {
			t.Fatalf("partial frames hold %v bytes, budget %d", p.metric(t, "relay_partial_frame_bytes"), budget)
		}
		time.Sleep(50 * time.Millisecond)
	}
	evicted := p.metric(t, `relay_frame_timeouts_total{cause="budget"}`)
	t.Logf("%v connections closed for the budget; %v bytes held now", evicted, p.metric(t, "relay_partial_frame_bytes"))
	if evicted > 30 {
		t.Errorf("%v closed: more than the 30 large ones", evicted)
	}
	// The small partial frames were not the largest: still open, and
	// completing them works.
	for i, nc := range small {
		if _, err := nc.Write([]byte{'x'}); err != nil {
			t.Fatalf("small %d: %v", i, err)
		}
		c := client.New(nc)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.RecvType(wire.TypeDeliver); err != nil {
			t.Fatalf("small %d: its frame after completing it: %v", i, err)
		}
	}
}

// TestIdleCountsWholeFrames: a joined client that trickles the bytes of a
// frame that never completes is not kept alive by them: idle_timeout.
func TestIdleCountsWholeFrames(t *testing.T) {
	p := startRelay(t, "--idle-timeout", "1s", "--frame-timeout", "60s")
	c := join(t, p.TCP, "trickle", "t")
	frame := wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: make([]byte, 200)})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for _, b := range frame {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if c.WriteRaw([]byte{b}) != nil {
				return
			}
		}
	}()
	start := time.Now()
	expectError(t, c, wire.ErrIdleTimeout)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("idle timeout after %v of trickling, want about 1 s", d)
	}
}

// TestUDPUnknownTypeAnswered: over UDP, a datagram whose frame has a type
// no one defined in the client→server range (0x05-0x7f) is answered
// unknown_type, with a session's token or with none, and a session stays;
// a server→client type is dropped unanswered (TestServerTypesRefusedFromHeader).
// docs/protocol.md says it once, under UDP specifics.
func TestUDPUnknownTypeAnswered(t *testing.T) {
	p := startRelay(t)
	c := dialUDP(t, p.UDP)
	if _, err := c.Join("udp-unknown", "u", nil); err != nil {
		t.Fatal(err)
	}
	for _, token := range []uint64{c.Token(), 0} {
		d := binary.BigEndian.AppendUint64(nil, token)
		d = append(d, 0, 0, 0, 1, 0x07) // length 1, type 0x07
		if err := c.WriteRaw(d); err != nil {
			t.Fatal(err)
		}
		f, err := c.Recv()
		if err != nil {
			t.Fatalf("token %d: %v", token, err)
		}
		if f.Type != wire.TypeError || f.Code != wire.ErrUnknownType {
			t.Fatalf("token %d: got %s %s, want error unknown_type", token, f.Type, f.Code)
		}
	}
	if err := c.Heartbeat(1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RecvType(wire.TypeHeartbeatReply); err != nil {
		t.Fatalf("the session after unknown_type: %v", err)
	}
}

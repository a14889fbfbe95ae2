package relay

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// TestUDPWriterPacksPerClient: frames queued for three clients, interleaved,
// arrive at each client in order, packed into datagrams of at most the
// coalesce size, with one sendmmsg for all of them; with coalescing off,
// one frame per datagram. The writer's socket is IPv4 and dual-stack IPv6
// (where IPv4 destinations go v4-mapped).
func TestUDPWriterPacksPerClient(t *testing.T) {
	for _, tt := range []struct {
		name, listen string
		coalesce     int
	}{
		{"ipv4 packed", "127.0.0.1:0", 300},
		{"ipv4 one frame each", "127.0.0.1:0", -1},
		{"dual-stack packed", "[::]:0", 300},
		{"relay socket ipv4", "127.0.0.1:0", 300},
		{"relay socket dual-stack", "[::]:0", 300},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var conn interface {
				rawConner
				Close() error
			}
			var err error
			if strings.HasPrefix(tt.name, "relay socket") { // a udpSock, as the workers have
				var socks []*udpSock
				if socks, err = listenUDP(mustUDPAddr(t, tt.listen), 1, 0); err == nil {
					conn = socks[0]
				}
			} else {
				conn, err = net.ListenUDP("udp", mustUDPAddr(t, tt.listen))
			}
			if err != nil {
				t.Skipf("listen %s: %v", tt.listen, err)
			}
			defer conn.Close()
			w, err := newUDPWriter(conn, tt.coalesce)
			if err != nil {
				t.Fatal(err)
			}
			var rcv []*net.UDPConn
			var want [3][][]byte
			for range 3 {
				c, err := net.ListenUDP("udp", mustUDPAddr(t, "127.0.0.1:0"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				rcv = append(rcv, c)
			}
			for k := range 10 {
				// One cast to all three (the same bytes), then a frame
				// for one of them: 100 + 30 bytes per round for it.
				cast := wire.AppendDeliver(nil, wire.Othercast, "alice", true, int64(k), bytes.Repeat([]byte{byte(k)}, 80))
				for i, c := range rcv {
					w.add(cast, c.LocalAddr().(*net.UDPAddr).AddrPort(), 0)
					want[i] = append(want[i], cast)
				}
				own := wire.AppendMemberJoined(nil, "user-"+string(rune('a'+k)))
				w.add(own, rcv[k%3].LocalAddr().(*net.UDPAddr).AddrPort(), 0)
				want[k%3] = append(want[k%3], own)
			}
			sent, _, calls, failed, err := w.flush()
			if err != nil || failed != 0 || calls != 1 {
				t.Fatalf("flush: sent %d, calls %d, failed %d, err %v", sent, calls, failed, err)
			}
			total := 0
			for i, c := range rcv {
				got, dgrams := readFrames(t, c, len(want[i]), tt.coalesce)
				total += dgrams
				if len(got) != len(want[i]) {
					t.Fatalf("client %d: %d frames, want %d", i, len(got), len(want[i]))
				}
				for j := range got {
					if !bytes.Equal(got[j], want[i][j]) {
						t.Fatalf("client %d frame %d: %x, want %x", i, j, got[j], want[i][j])
					}
				}
			}
			if total != sent {
				t.Errorf("received %d datagrams, the writer sent %d", total, sent)
			}
			if tt.coalesce < 0 && sent != 40 {
				t.Errorf("%d datagrams for 40 frames with coalescing off", sent)
			}
			if tt.coalesce > 0 && sent > 16 {
				t.Errorf("%d datagrams for 40 frames packed into %d bytes", sent, tt.coalesce)
			}
		})
	}
}

func mustUDPAddr(t *testing.T, s string) *net.UDPAddr {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// readFrames reads datagrams until n frames came, checking each datagram's
// size against limit (a single frame may exceed it).
func readFrames(t *testing.T, c *net.UDPConn, n, limit int) (frames [][]byte, dgrams int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(frames) < n {
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d of %d frames: %v", len(frames), n, err)
		}
		dgrams++
		var f wire.Frame
		k := 0
		for d := buf[:m]; len(d) > 0; k++ {
			l, err := wire.Decode(d, wire.DefaultMaxFrame, &f)
			if err != nil {
				t.Fatalf("datagram of %d bytes: %v", m, err)
			}
			frames = append(frames, append([]byte(nil), d[:l]...))
			d = d[l:]
		}
		if k > 1 && m > limit {
			t.Errorf("datagram of %d bytes packs %d frames, over the %d-byte limit", m, k, limit)
		}
	}
	return frames, dgrams
}

func TestAddrPortRoundTrip(t *testing.T) {
	for _, s := range []string{"127.0.0.1:7400", "10.1.2.3:1", "[::1]:65535", "[2001:db8::5]:443"} {
		ap := netip.MustParseAddrPort(s)
		for _, v6 := range []bool{false, true} {
			if !v6 && ap.Addr().Is6() {
				continue
			}
			var sa sockaddr
			putSockaddr(&sa, ap, v6)
			if got := addrPort(&sa); got != ap {
				t.Errorf("%s (v6 socket %v): back as %s", s, v6, got)
			}
		}
	}
}

// TestUDPDropsCounted: datagrams sent to a socket nobody reads, past its
// small receive buffer, show in udpDrops for that socket's inode only.
func TestUDPDropsCounted(t *testing.T) {
	conns, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	inodes := map[uint64]bool{}
	for _, c := range conns {
		ino, err := socketInode(c)
		if err != nil {
			t.Fatal(err)
		}
		inodes[ino] = true
	}
	before, err := udpDrops(inodes)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := net.DialUDP("udp", nil, conns[0].LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	for range 500 {
		snd.Write(make([]byte, 200))
	}
	after, err := udpDrops(inodes)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100 {
		t.Errorf("drops %d → %d after 500 datagrams into a 4 KiB buffer nobody reads", before, after)
	}
	if got := readBuffer(conns[0]); got > 64<<10 {
		t.Errorf("receive buffer %d bytes, asked for 4096", got)
	}
}

// TestListenUDPRefusesAPortInUse: the workers share their port with each
// other, never with another process's socket already on it.
func TestListenUDPRefusesAPortInUse(t *testing.T) {
	other, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range other {
			c.Close()
		}
	}()
	if len(other) != 2 || other[0].LocalAddr().String() != other[1].LocalAddr().String() {
		t.Fatalf("two workers on %v", other)
	}
	if again, err := listenUDP(other[0].LocalAddr().(*net.UDPAddr), 2, 0); err == nil {
		for _, c := range again {
			c.Close()
		}
		t.Fatal("a second set of workers bound the port of the first")
	}
}

// TestUDPWriterKeepsOpenDatagrams: flushDue keeps a client's last datagram
// open while a frame like its last still fits and its first frame has
// waited less than the writer's wait, and sends it once full or due; the
// frames arrive whole and in order, each delivery counted once, when its
// datagram is sent. flush sends everything.
func TestUDPWriterKeepsOpenDatagrams(t *testing.T) {
	conn, err := net.ListenUDP("udp", mustUDPAddr(t, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := newUDPWriter(conn, 300)
	if err != nil {
		t.Fatal(err)
	}
	w.wait = 1000
	var rcv [2]*net.UDPConn
	var to [2]netip.AddrPort
	for i := range rcv {
		if rcv[i], err = net.ListenUDP("udp", mustUDPAddr(t, "127.0.0.1:0")); err != nil {
			t.Fatal(err)
		}
		defer rcv[i].Close()
		to[i] = rcv[i].LocalAddr().(*net.UDPAddr).AddrPort()
	}
	seq := 0
	var want [2][][]byte
	add := func(c int, at int64) { // a 100-byte deliver for client c, queued at at
		f := wire.AppendDeliver(nil, wire.Othercast, "bob", true, int64(seq), bytes.Repeat([]byte{byte(seq)}, 100-wire.DeliverSize("bob", true, 0)))
		if len(f) != 100 {
			t.Fatalf("frame of %d bytes", len(f))
		}
		seq++
		w.add(f, to[c], at)
		want[c] = append(want[c], f)
	}
	type step struct {
		name            string
		flush           func() (sent, bytes, calls, failed int, err error)
		sent, delivered int
		keeping         bool
		due             int64
	}
	check := func(s step) {
		t.Helper()
		sent, _, _, failed, err := s.flush()
		if err != nil || failed != 0 || sent != s.sent || w.delivered != s.delivered {
			t.Fatalf("%s: sent %d datagrams (%d deliveries), failed %d, err %v; want %d (%d)", s.name, sent, w.delivered, failed, err, s.sent, s.delivered)
		}
		due, keeping := w.keeping()
		if keeping != s.keeping || (keeping && due != s.due) {
			t.Fatalf("%s: keeping %v due %d, want %v %d", s.name, keeping, due, s.keeping, s.due)
		}
	}
	due := func(now int64) func() (int, int, int, int, error) {
		return func() (int, int, int, int, error) { return w.flushDue(now) }
	}

	add(0, 0)
	add(0, 100)
	add(1, 200)
	check(step{name: "young, with room: kept", flush: due(500), keeping: true, due: 1000})
	add(0, 600) // client 0's datagram is full at 300 bytes
	check(step{name: "client 0 full", flush: due(700), sent: 1, delivered: 3, keeping: true, due: 1200})
	add(1, 1100)
	add(0, 1150)
	check(step{name: "client 1 due", flush: due(1200), sent: 1, delivered: 2, keeping: true, due: 2150})
	add(0, 1300)
	add(0, 1400) // 4th frame opens a second datagram: the first is closed
	add(0, 1500)
	check(step{name: "a closed datagram goes, its successor stays", flush: due(1600), sent: 1, delivered: 3, keeping: true, due: 2500})
	check(step{name: "flush sends what is kept", flush: w.flush, sent: 1, delivered: 1})
	if w.pending() != 0 || len(w.arena) != 0 {
		t.Fatalf("after flush: %d frames, %d arena bytes left", w.pending(), len(w.arena))
	}
	for i, c := range rcv {
		got, _ := readFrames(t, c, len(want[i]), 300)
		for j := range want[i] {
			if !bytes.Equal(got[j], want[i][j]) {
				t.Fatalf("client %d frame %d: %x, want %x", i, j, got[j], want[i][j])
			}
		}
	}
}

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
					w.add(cast, c.LocalAddr().(*net.UDPAddr).AddrPort())
					want[i] = append(want[i], cast)
				}
				own := wire.AppendMemberJoined(nil, "user-"+string(rune('a'+k)))
				w.add(own, rcv[k%3].LocalAddr().(*net.UDPAddr).AddrPort())
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

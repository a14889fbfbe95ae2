package capture

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/wire"
)

const (
	cliAddr = "10.1.2.3:40001"
	srvAddr = "10.1.2.4:7400"
	cliV6   = "[fd00::3]:40001"
	srvV6   = "[fd00::4]:7400"
)

// streamFrames returns the frames whose bytes lie wholly outside the lost
// byte range [lo, hi) of the concatenated stream.
func streamFrames(frames [][]byte, lo, hi int) [][]byte {
	var out [][]byte
	off := 0
	for _, f := range frames {
		end := off + len(f)
		if end <= lo || off >= hi {
			out = append(out, f)
		}
		off = end
	}
	return out
}

// tcpSession builds a whole session in chunks of 37 bytes, interleaving
// server replies, and lets edit change the client's segments.
func tcpSession(tb testing.TB, client, server string, isn uint32, edit func(b *tcpBuilder, i int, seg []byte) bool) *tcpBuilder {
	cf, sf := sessionFrames()
	b := newTCP(client, server, isn)
	b.handshake(tb)
	for i, seg := range chunks(bytes.Join(cf, nil), 37) {
		if edit == nil || !edit(b, i, seg) {
			b.send(tb, 0, seg)
		}
		if i < len(sf) {
			b.send(tb, 1, sf[i])
		}
	}
	b.fin(tb)
	return b
}

func TestReadLinkTypes(t *testing.T) {
	cf, sf := sessionFrames()
	lts := []layers.LinkType{layers.LinkTypeEthernet, linkVLAN, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeNull, layers.LinkTypeLoop, layers.LinkTypeRaw}
	for _, lt := range lts {
		for _, v6 := range []bool{false, true} {
			for _, format := range []Format{PCAP, PCAPNG} {
				name := lt.String()
				if lt == linkVLAN {
					name = "Ethernet+VLAN"
				}
				if v6 {
					name += "/v6"
				}
				if format == PCAPNG {
					name += "/pcapng"
				}
				t.Run(name, func(t *testing.T) {
					c, s := cliAddr, srvAddr
					if v6 {
						c, s = cliV6, srvV6
					}
					b := tcpSession(t, c, s, 1000, nil)
					b.raw(t, 0, b.seq[0], tcpFlags{ack: true}, nil) // the last ACK, after both FINs
					capt := readPath(t, writeCapture(t, format, lt, b.pkts))
					if len(capt.Warnings) > 0 {
						t.Fatalf("warnings: %q", capt.Warnings)
					}
					f := onlyFlow(t, capt)
					if f.Client.String() != c || f.Server.String() != s || f.Transport != TCP {
						t.Fatalf("flow %s, want %s -> %s", f, c, s)
					}
					equalFrames(t, "client", f.ClientFrames, cf)
					equalFrames(t, "server", f.ServerFrames, sf)
					if f.Resynced {
						t.Fatalf("resynced a clean capture: %q", f.Notes)
					}
				})
			}
		}
	}
}

func TestReadIPLinkTypes(t *testing.T) {
	cf, _ := sessionFrames()
	for _, tc := range []struct {
		lt     layers.LinkType
		client string
		server string
	}{{layers.LinkTypeIPv4, cliAddr, srvAddr}, {layers.LinkTypeIPv6, cliV6, srvV6}} {
		t.Run(tc.lt.String(), func(t *testing.T) {
			b := tcpSession(t, tc.client, tc.server, 1000, nil)
			f := onlyFlow(t, readPath(t, writeCapture(t, PCAP, tc.lt, b.pkts)))
			equalFrames(t, "client", f.ClientFrames, cf)
		})
	}
}

func TestReadMicrosecondPcap(t *testing.T) {
	cf, _ := sessionFrames()
	b := tcpSession(t, cliAddr, srvAddr, 1000, nil)
	c, err := Read(bytes.NewReader(writeRawPcap(t, layers.LinkTypeEthernet, b.pkts)), rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	f := onlyFlow(t, c)
	equalFrames(t, "client", f.ClientFrames, cf)
	// Frame times come from the packet that completed each frame.
	if f.ClientFrames[0].Packet < 4 || f.ClientFrames[0].Offset <= 0 {
		t.Fatalf("first frame packet %d offset %v", f.ClientFrames[0].Packet, f.ClientFrames[0].Offset)
	}
}

func TestReadTCPEdgeCases(t *testing.T) {
	cf, sf := sessionFrames()
	stream := bytes.Join(cf, nil)
	const seg = 37
	tests := []struct {
		name     string
		isn      uint32
		edit     func(b *tcpBuilder, i int, s []byte) bool
		build    func(t *testing.T) []ipPkt // instead of tcpSession+edit
		want     [][]byte
		resynced bool
		note     string // a substring one flow note must have
	}{
		{name: "retransmission", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 3 {
				b.raw(t, 0, b.seq[0], tcpFlags{ack: true, psh: true}, s)
			}
			return false
		}, want: cf},
		{name: "reordering", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 4 { // send chunk 5 first, then 4
				next := stream[(i+1)*seg : min((i+2)*seg, len(stream))]
				b.raw(t, 0, b.seq[0]+uint32(len(s)), tcpFlags{ack: true, psh: true}, next)
				b.send(t, 0, s)
				b.seq[0] += uint32(len(next))
				return true
			}
			return i == 5
		}, want: cf},
		{name: "overlap", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 6 { // resend the last 10 bytes of chunk 5 with chunk 6
				prev := stream[(i-1)*seg : i*seg]
				b.raw(t, 0, b.seq[0]-10, tcpFlags{ack: true, psh: true}, append(append([]byte(nil), prev[len(prev)-10:]...), s...))
				b.seq[0] += uint32(len(s))
				return true
			}
			return false
		}, want: cf},
		{name: "sequence wrap", isn: 0xFFFFFF00, want: cf},
		{name: "garbage between frames", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 0 {
				b.send(t, 0, cf[0])
				b.send(t, 0, []byte{0xff, 0xff, 0xff, 0xff, 0xee, 0xee, 0xee})
				b.send(t, 0, bytes.Join(cf[1:], nil))
			}
			return true
		}, want: cf, resynced: true, note: "not a frame"},
		{name: "reset mid-stream", build: func(t *testing.T) []ipPkt {
			b := newTCP(cliAddr, srvAddr, 5000)
			b.handshake(t)
			for _, s := range chunks(stream[:300], seg) {
				b.send(t, 0, s)
			}
			b.raw(t, 0, b.seq[0], tcpFlags{rst: true}, nil)
			return b.pkts
		}, want: streamFrames(cf, 300, len(stream)), note: "ends inside a frame"},
		{name: "mid-stream start", build: func(t *testing.T) []ipPkt {
			b := tcpSession(t, cliAddr, srvAddr, 5000, nil)
			// Drop the handshake, the first 7 client segments (a cut in
			// the middle of a frame) and the server's first 3.
			var out []ipPkt
			for i, p := range b.pkts {
				if i >= 3+10 {
					out = append(out, p)
				}
			}
			return out
		}, want: streamFrames(cf, 0, 7*seg), resynced: true, note: "no SYN"},
		{name: "lost segment", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 7 {
				b.seq[0] += uint32(len(s))
				return true
			}
			return false
		}, want: streamFrames(cf, 7*seg, 8*seg), resynced: true, note: "missing"},
		{name: "packet cut by snap length", isn: 5000, edit: func(b *tcpBuilder, i int, s []byte) bool {
			if i == 7 {
				b.send(t, 0, s)
				b.pkts[len(b.pkts)-1].capLen = 14 + 20 + 20 + 5 // 5 of 37 payload bytes
				return true
			}
			return false
		}, want: streamFrames(cf, 7*seg+5, 8*seg), resynced: true, note: "missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pkts []ipPkt
			if tc.build != nil {
				pkts = tc.build(t)
			} else {
				pkts = tcpSession(t, cliAddr, srvAddr, tc.isn, tc.edit).pkts
			}
			c := readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, pkts))
			f := onlyFlow(t, c)
			equalFrames(t, "client", f.ClientFrames, tc.want)
			if tc.name == "sequence wrap" {
				equalFrames(t, "server", f.ServerFrames, sf)
			}
			if f.Resynced != tc.resynced {
				t.Fatalf("Resynced = %v, want %v; notes %q", f.Resynced, tc.resynced, f.Notes)
			}
			if tc.note != "" && !strings.Contains(strings.Join(f.Notes, "\n"), tc.note) {
				t.Fatalf("no note with %q: %q", tc.note, f.Notes)
			}
			if f.Client.String() != cliAddr {
				t.Fatalf("client %s, want %s", f.Client, cliAddr)
			}
		})
	}
}

func TestReadTruncatedFile(t *testing.T) {
	cf, _ := sessionFrames()
	b := tcpSession(t, cliAddr, srvAddr, 1000, nil)
	pkts := b.pkts[:len(b.pkts)-2] // no FINs: the file ends with a data segment
	for _, format := range []Format{PCAP, PCAPNG} {
		path := writeCapture(t, format, layers.LinkTypeEthernet, pkts)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// A recorder killed while writing the last segment.
		cut := data[:len(data)-20]
		c, err := Read(bytes.NewReader(cut), rep(Options{}))
		if err != nil {
			t.Fatalf("format %d: %v", format, err)
		}
		if !strings.Contains(strings.Join(c.Warnings, "\n"), "file ends inside packet") {
			t.Fatalf("format %d: no cut-tail warning: %q", format, c.Warnings)
		}
		f := onlyFlow(t, c)
		if len(f.ClientFrames) == 0 || len(f.ClientFrames) >= len(cf) {
			t.Fatalf("format %d: %d client frames from a cut file", format, len(f.ClientFrames))
		}
		equalFrames(t, "client", f.ClientFrames, cf[:len(f.ClientFrames)])
	}
}

func TestReadUDP(t *testing.T) {
	cf, sf := sessionFrames()
	for _, v6 := range []bool{false, true} {
		c, s := cliAddr, srvAddr
		if v6 {
			c, s = cliV6, srvV6
		}
		var pkts []ipPkt
		tm := t0
		for i, f := range cf {
			tm = tm.Add(14 * time.Millisecond)
			pkts = append(pkts, udpPkt(t, tm, c, s, append(wire.AppendDatagram(nil, uint64(i)), f...)))
			if i < len(sf) {
				pkts = append(pkts, udpPkt(t, tm, s, c, sf[i]))
			}
		}
		pkts = append(pkts, udpPkt(t, tm, c, s, []byte("not a frame")))
		f := onlyFlow(t, readPath(t, writeCapture(t, PCAPNG, layers.LinkTypeLinuxSLL2, pkts)))
		if f.Transport != UDP || f.Client.String() != c {
			t.Fatalf("flow %s", f)
		}
		equalFrames(t, "client", f.ClientFrames, cf)
		equalFrames(t, "server", f.ServerFrames, sf)
		if len(f.Notes) != 1 || !strings.Contains(f.Notes[0], "not a protocol frame") {
			t.Fatalf("notes %q", f.Notes)
		}
	}
}

func TestClientSide(t *testing.T) {
	// No SYN and no join in view: the side talking to the server port is
	// the client, though the server sent the first packet.
	b := newTCP(cliAddr, srvAddr, 1)
	b.send(t, 1, wire.AppendDeliver(nil, wire.Broadcast, "bob", false, 0, []byte("x")))
	b.send(t, 0, wire.AppendHeartbeat(nil, 1))
	b.send(t, 0, wire.AppendHeartbeat(nil, 2))
	f := onlyFlow(t, readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, b.pkts)))
	if f.Client.String() != cliAddr || len(f.ClientFrames) != 2 || kind(f.ClientFrames[0]) != wire.TypeHeartbeat {
		t.Fatalf("flow %s with %d client frames", f, len(f.ClientFrames))
	}
	// On another port, with a SYN, the SYN sender is the client.
	b = newTCP("10.0.0.1:5000", "10.0.0.2:9000", 1)
	b.handshake(t)
	b.send(t, 0, wire.AppendHeartbeat(nil, 1))
	b.send(t, 0, wire.AppendHeartbeat(nil, 2))
	f = onlyFlow(t, readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, b.pkts)))
	if f.Client.String() != "10.0.0.1:5000" {
		t.Fatalf("flow %s", f)
	}
}

func TestLongest(t *testing.T) {
	c := &Capture{Flows: []*Flow{
		{Start: t0, End: t0.Add(time.Second), ClientFrames: make([]Frame, 3), ClientCount: 3},
		{Start: t0, End: t0.Add(5 * time.Second)},
		{Start: t0, End: t0.Add(2 * time.Second), ClientCount: 1}, // found, not kept (Select)
	}}
	if got := c.Longest(); got != c.Flows[2] {
		t.Fatalf("Longest = %v", got)
	}
	if (&Capture{}).Longest() != nil {
		t.Fatal("Longest of nothing is not nil")
	}
}

// TestReadReusedPorts: a client port reused for a new connection is a new
// flow, whether the old one's FINs were captured, or not (a SYN with a new
// ISN 30 s later), or the old one was seen without its SYN; a
// retransmitted SYN (same ISN) is not a new connection.
func TestReadReusedPorts(t *testing.T) {
	cf, _ := sessionFrames()
	for _, tt := range []struct {
		name  string
		edit  func(pkts []ipPkt) []ipPkt // the first connection's packets
		flows int
	}{
		{"after FIN", func(p []ipPkt) []ipPkt { return p }, 2},
		{"no FIN or RST captured", func(p []ipPkt) []ipPkt { return p[:len(p)-2] }, 2},
		{"no SYN nor FIN captured", func(p []ipPkt) []ipPkt { return p[3 : len(p)-2] }, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := tcpSession(t, cliAddr, srvAddr, 1000, nil)
			b := tcpSession(t, cliAddr, srvAddr, 900000, nil)
			for i := range b.pkts {
				b.pkts[i].t = b.pkts[i].t.Add(30 * time.Second)
			}
			// The second connection's SYN, retransmitted.
			pkts := append(tt.edit(a.pkts), b.pkts[0])
			pkts = append(pkts, b.pkts...)
			c := readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, pkts))
			if len(c.Flows) != tt.flows {
				t.Fatalf("%d flows, want %d connections on the same ports", len(c.Flows), tt.flows)
			}
			f := c.Flows[1]
			equalFrames(t, "client", f.ClientFrames, cf)
			if len(f.Notes) > 0 {
				t.Errorf("notes %q", f.Notes)
			}
		})
	}
}

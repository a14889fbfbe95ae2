package capture

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/reprise-harness/reprise/internal/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sessionFrames is a small deterministic session: what a client sends and
// what the relay answers.
func sessionFrames() (client, server [][]byte) {
	client = append(client, wire.AppendJoin(nil, "lobby", "alice", nil, 0))
	for i := 0; i < 8; i++ {
		client = append(client, wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: int64(i), Payload: bytes.Repeat([]byte{byte(i)}, 100+i)}))
	}
	client = append(client,
		wire.AppendSend(nil, wire.Send{Mode: wire.Unicast, Targets: []string{"bob"}, Payload: []byte("hi")}),
		wire.AppendHeartbeat(nil, 42),
		wire.AppendLeave(nil))
	server = append(server,
		wire.AppendJoined(nil, 0, "alice", []string{"alice"}),
		wire.AppendDeliver(nil, wire.Othercast, "bob", false, 0, []byte("pose")),
		wire.AppendHeartbeatReply(nil, 42, 43))
	return client, server
}

// chunks cuts b into pieces of n bytes, ignoring frame boundaries.
func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// ipPkt is one IP packet (no link header) and its capture time.
type ipPkt struct {
	t  time.Time
	ip []byte
	v6 bool
	// capLen, if set, cuts the captured bytes (snap length) after the
	// link header is added.
	capLen int
}

// tcpBuilder makes the packets of one TCP connection with explicit control
// over sequence numbers, for edge cases a real stack rarely shows on lo.
type tcpBuilder struct {
	client, server netip.AddrPort
	seq            [2]uint32
	t              time.Time
	pkts           []ipPkt
}

func newTCP(client, server string, isn uint32) *tcpBuilder {
	return &tcpBuilder{client: netip.MustParseAddrPort(client), server: netip.MustParseAddrPort(server), seq: [2]uint32{isn, isn + 0x10000}, t: t0}
}

func (b *tcpBuilder) tick() time.Time { b.t = b.t.Add(10 * time.Millisecond); return b.t }

// raw adds a segment from side with the given sequence number.
func (b *tcpBuilder) raw(tb testing.TB, side int, seq uint32, fl tcpFlags, payload []byte) {
	tb.Helper()
	src, dst := b.client, b.server
	if side == 1 {
		src, dst = dst, src
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()), Seq: seq, Ack: b.seq[1-side],
		SYN: fl.syn, ACK: fl.ack, PSH: fl.psh, FIN: fl.fin, RST: fl.rst, Window: 65535}
	b.pkts = append(b.pkts, ipPkt{t: b.tick(), ip: serializeIP(tb, src, dst, tcp, payload), v6: src.Addr().Is6()})
}

// send adds an in-order segment and advances side's sequence number.
func (b *tcpBuilder) send(tb testing.TB, side int, payload []byte) {
	tb.Helper()
	b.raw(tb, side, b.seq[side], tcpFlags{ack: true, psh: true}, payload)
	b.seq[side] += uint32(len(payload))
}

func (b *tcpBuilder) handshake(tb testing.TB) {
	b.raw(tb, 0, b.seq[0], tcpFlags{syn: true}, nil)
	b.seq[0]++
	b.raw(tb, 1, b.seq[1], tcpFlags{syn: true, ack: true}, nil)
	b.seq[1]++
	b.raw(tb, 0, b.seq[0], tcpFlags{ack: true}, nil)
}

func (b *tcpBuilder) fin(tb testing.TB) {
	b.raw(tb, 0, b.seq[0], tcpFlags{fin: true, ack: true}, nil)
	b.seq[0]++
	b.raw(tb, 1, b.seq[1], tcpFlags{fin: true, ack: true}, nil)
	b.seq[1]++
}

func serializeIP(tb testing.TB, src, dst netip.AddrPort, transport gopacket.SerializableLayer, payload []byte) []byte {
	tb.Helper()
	proto := layers.IPProtocolTCP
	if _, ok := transport.(*layers.UDP); ok {
		proto = layers.IPProtocolUDP
	}
	var ip gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if src.Addr().Is4() {
		s, d := src.Addr().As4(), dst.Addr().As4()
		v4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: s[:], DstIP: d[:]}
		ip, nl = v4, v4
	} else {
		s, d := src.Addr().As16(), dst.Addr().As16()
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: s[:], DstIP: d[:]}
		ip, nl = v6, v6
	}
	switch tl := transport.(type) {
	case *layers.TCP:
		_ = tl.SetNetworkLayerForChecksum(nl)
	case *layers.UDP:
		_ = tl.SetNetworkLayerForChecksum(nl)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, transport, gopacket.Payload(payload)); err != nil {
		tb.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func udpPkt(tb testing.TB, t time.Time, src, dst string, payload []byte) ipPkt {
	s, d := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst)
	u := &layers.UDP{SrcPort: layers.UDPPort(s.Port()), DstPort: layers.UDPPort(d.Port())}
	return ipPkt{t: t, ip: serializeIP(tb, s, d, u, payload), v6: s.Addr().Is6()}
}

// linkVLAN is Ethernet with an 802.1Q tag (same DLT as Ethernet).
const linkVLAN layers.LinkType = 1000

// encapsulate puts a link-layer header for lt in front of an IP packet.
func encapsulate(tb testing.TB, lt layers.LinkType, p ipPkt) []byte {
	tb.Helper()
	etype := layers.EthernetTypeIPv4
	if p.v6 {
		etype = layers.EthernetTypeIPv6
	}
	var h []byte
	switch lt {
	case layers.LinkTypeEthernet, linkVLAN:
		buf := gopacket.NewSerializeBuffer()
		eth := &layers.Ethernet{SrcMAC: macClient, DstMAC: macServer, EthernetType: etype}
		ls := []gopacket.SerializableLayer{eth}
		if lt == linkVLAN {
			eth.EthernetType = layers.EthernetTypeDot1Q
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: 42, Type: etype})
		}
		ls = append(ls, gopacket.Payload(p.ip))
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, ls...); err != nil {
			tb.Fatal(err)
		}
		return append([]byte(nil), buf.Bytes()...)
	case layers.LinkTypeLinuxSLL:
		h = make([]byte, 16)
		binary.BigEndian.PutUint16(h[2:], 772) // ARPHRD_LOOPBACK
		binary.BigEndian.PutUint16(h[4:], 6)
		binary.BigEndian.PutUint16(h[14:], uint16(etype))
	case layers.LinkTypeLinuxSLL2:
		h = make([]byte, 20)
		binary.BigEndian.PutUint16(h[0:], uint16(etype))
		binary.BigEndian.PutUint32(h[4:], 1)
		binary.BigEndian.PutUint16(h[8:], 772)
		h[11] = 6
	case layers.LinkTypeNull:
		h = make([]byte, 4)
		fam := uint32(layers.ProtocolFamilyIPv4)
		if p.v6 {
			fam = uint32(layers.ProtocolFamilyIPv6Darwin)
		}
		binary.LittleEndian.PutUint32(h, fam)
	case layers.LinkTypeLoop:
		h = make([]byte, 4)
		fam := uint32(layers.ProtocolFamilyIPv4)
		if p.v6 {
			fam = uint32(layers.ProtocolFamilyIPv6FreeBSD)
		}
		binary.BigEndian.PutUint32(h, fam)
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
	default:
		tb.Fatalf("no encapsulation for %v", lt)
	}
	return append(h, p.ip...)
}

// writeCapture writes packets with lt's link header into a pcap or pcapng
// file in a temporary directory and returns its path.
func writeCapture(tb testing.TB, format Format, lt layers.LinkType, pkts []ipPkt) string {
	tb.Helper()
	var buf bytes.Buffer
	fileLT := lt
	if lt == linkVLAN {
		fileLT = layers.LinkTypeEthernet
	}
	w, err := NewWriter(&buf, format, fileLT, DefaultSnaplen)
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range pkts {
		data := encapsulate(tb, lt, p)
		ci := gopacket.CaptureInfo{Timestamp: p.t, CaptureLength: len(data), Length: len(data)}
		if p.capLen > 0 && p.capLen < len(data) {
			data = data[:p.capLen]
			ci.CaptureLength = p.capLen
		}
		if err := w.WritePacket(ci, data); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	name := "c.pcap"
	if format == PCAPNG {
		name = "c.pcapng"
	}
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// writeRawPcap writes a classic pcap with pcapgo directly (microsecond
// resolution), for the reader's other magic.
func writeRawPcap(tb testing.TB, lt layers.LinkType, pkts []ipPkt) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		tb.Fatal(err)
	}
	for _, p := range pkts {
		data := encapsulate(tb, lt, p)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: p.t, CaptureLength: len(data), Length: len(data)}, data); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func frameBytes(fs []Frame) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = f.Bytes
	}
	return out
}

func equalFrames(tb testing.TB, what string, got []Frame, want [][]byte) {
	tb.Helper()
	g := frameBytes(got)
	if len(g) != len(want) {
		tb.Fatalf("%s: %d frames, want %d", what, len(g), len(want))
	}
	for i := range g {
		if !bytes.Equal(g[i], want[i]) {
			tb.Fatalf("%s: frame %d = %x, want %x", what, i, g[i], want[i])
		}
	}
}

func readPath(tb testing.TB, path string) *Capture {
	tb.Helper()
	c, err := ReadFile(path, rep(Options{}))
	if err != nil {
		tb.Fatalf("ReadFile: %v", err)
	}
	return c
}

func onlyFlow(tb testing.TB, c *Capture) *Flow {
	tb.Helper()
	if len(c.Flows) != 1 {
		for _, f := range c.Flows {
			tb.Logf("flow %s", f)
		}
		tb.Fatalf("%d flows, want 1 (warnings %q)", len(c.Flows), c.Warnings)
	}
	return c.Flows[0]
}

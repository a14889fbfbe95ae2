package capturetest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Flows shapes a capture of many recorded clients, as taken on a busy
// server: each flow is a TCP connection of its own that joins, sends and
// leaves in the reprise protocol (docs/protocol.md), the flows one after
// another a few at a time.
type Flows struct {
	// N is the number of flows.
	N int
	// Sends is the number of sends per flow, each of Payload bytes.
	Sends, Payload int
	// Overlap is how many flows are open at once (default 8, at most 9).
	Overlap int
}

// WriteFlows writes the capture (raw IPv4, nanosecond pcap) and returns
// its size in bytes.
func WriteFlows(out io.Writer, f Flows) (int64, error) {
	if f.Overlap <= 0 {
		f.Overlap = 8
	}
	cw := &countingWriter{w: bufio.NewWriterSize(out, 1<<20)}
	w := pcapgo.NewWriterNanos(cw)
	if err := w.WriteFileHeader(65535, layers.LinkTypeRaw); err != nil {
		return 0, fmt.Errorf("flows: %w", err)
	}
	f.Overlap = min(f.Overlap, 9) // 1 ms apart within a 10 ms step
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	payload := make([]byte, f.Payload)
	// Flows start in groups of Overlap, interleaved packet by packet, a
	// group after the one before.
	for g := 0; g < f.N; g += f.Overlap {
		var conns []*conn
		for i := g; i < min(g+f.Overlap, f.N); i++ {
			conns = append(conns, newConn(i, t.Add(time.Duration(i-g)*time.Millisecond)))
		}
		for step := 0; step < f.Sends+5; step++ {
			for _, c := range conns {
				if err := c.step(w, step, f.Sends, payload); err != nil {
					return cw.n, err
				}
			}
		}
		t = conns[len(conns)-1].t.Add(time.Millisecond)
	}
	if err := cw.w.Flush(); err != nil {
		return cw.n, fmt.Errorf("flows: %w", err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// conn is one flow being written: client 10.x.y.z:port to 10.0.0.1:7400.
type conn struct {
	i        int
	cli, srv net.IP
	cport    uint16
	seq      [2]uint32
	t        time.Time
}

func newConn(i int, t time.Time) *conn {
	return &conn{
		i: i, t: t,
		cli:   net.IPv4(10, byte(1+i>>16&127), byte(i>>8), byte(i)),
		srv:   net.IPv4(10, 0, 0, 1),
		cport: uint16(1024 + i%60000),
		seq:   [2]uint32{uint32(i) * 7919, uint32(i)*104729 + 1},
	}
}

// step writes the flow's packets of one step: the handshake, a join and
// its joined reply, the sends, a leave, the FINs.
func (c *conn) step(w *pcapgo.Writer, step, sends int, payload []byte) error {
	c.t = c.t.Add(10 * time.Millisecond)
	switch {
	case step == 0:
		return c.packet(w, 0, &layers.TCP{SYN: true}, nil, 1)
	case step == 1:
		if err := c.packet(w, 1, &layers.TCP{SYN: true, ACK: true}, nil, 1); err != nil {
			return err
		}
		return c.packet(w, 0, &layers.TCP{ACK: true}, nil, 0)
	case step == 2:
		if err := c.packet(w, 0, &layers.TCP{ACK: true, PSH: true}, join(fmt.Sprintf("user%d", c.i)), 0); err != nil {
			return err
		}
		return c.packet(w, 1, &layers.TCP{ACK: true, PSH: true}, joined(fmt.Sprintf("user%d", c.i)), 0)
	case step < sends+3:
		return c.packet(w, 0, &layers.TCP{ACK: true, PSH: true}, send(int64(c.t.UnixNano()), payload), 0)
	case step == sends+3:
		return c.packet(w, 0, &layers.TCP{ACK: true, PSH: true}, frame(0x02, nil), 0)
	default:
		if err := c.packet(w, 0, &layers.TCP{FIN: true, ACK: true}, nil, 1); err != nil {
			return err
		}
		return c.packet(w, 1, &layers.TCP{FIN: true, ACK: true}, nil, 1)
	}
}

func (c *conn) packet(w *pcapgo.Writer, side int, tcp *layers.TCP, payload []byte, seqUse uint32) error {
	src, dst, sport, dport := c.cli, c.srv, c.cport, uint16(wire.DefaultPort)
	if side == 1 {
		src, dst, sport, dport = dst, src, dport, sport
	}
	tcp.SrcPort, tcp.DstPort, tcp.Seq, tcp.Window = layers.TCPPort(sport), layers.TCPPort(dport), c.seq[side], 65535
	if tcp.ACK {
		tcp.Ack = c.seq[1-side]
	}
	c.seq[side] += uint32(len(payload)) + seqUse
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, tcp, gopacket.Payload(payload)); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	b := buf.Bytes()
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: c.t, CaptureLength: len(b), Length: len(b)}, b); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	return nil
}

// The few reprise frames the flows need, encoded here so this package
// stays a plain pcap writer (docs/protocol.md has the layouts).
func frame(typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(body)))
	return append(append(b, typ), body...)
}

func id(b []byte, s string) []byte { return append(append(b, byte(len(s))), s...) }

func join(user string) []byte {
	body := []byte{1}         // version
	body = id(body, "lobby")  // room
	body = id(body, user)     // user
	body = append(body, 0, 0) // no auth
	return frame(0x01, body)
}

func joined(user string) []byte {
	body := binary.BigEndian.AppendUint64(nil, 0) // session token
	body = id(body, user)                         // owner
	body = binary.BigEndian.AppendUint16(body, 1) // members
	body = id(body, user)
	return frame(0x81, body)
}

func send(trace int64, payload []byte) []byte {
	body := []byte{0x80 | 0x01} // broadcast, traced
	body = binary.BigEndian.AppendUint64(body, uint64(trace))
	return frame(0x03, append(body, payload...))
}

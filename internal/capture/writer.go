package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Format is a capture file format.
type Format int

// Formats.
const (
	PCAP Format = iota
	PCAPNG
)

// FormatFor picks the format from a file name: pcapng for ".pcapng", pcap
// otherwise.
func FormatFor(path string) Format {
	if strings.EqualFold(filepath.Ext(path), ".pcapng") {
		return PCAPNG
	}
	return PCAP
}

const (
	// DefaultSnaplen is the snap length written to file headers: whole
	// frames.
	DefaultSnaplen = 262144
	// FlushEvery bounds how long a written packet may sit in the buffer,
	// so a crash loses at most that much of the capture.
	FlushEvery = 200 * time.Millisecond
	// maxSegment is the largest TCP payload one synthesized packet carries.
	maxSegment = 16 << 10
)

// Writer writes packets to a pcap or pcapng file as they come, through a
// buffer it flushes at least every FlushEvery. It is safe for concurrent use.
type Writer struct {
	mu        sync.Mutex
	file      io.Closer // nil when the caller owns the io.Writer
	bw        *bufio.Writer
	pcap      *pcapgo.Writer
	ng        *pcapgo.NgWriter
	linkType  layers.LinkType
	lastFlush time.Time
	packets   int64
	bytes     int64
	err       error
	ser       gopacket.SerializeBuffer
	// comment goes on the next packet written (pcapng only).
	comment string
}

// CreateTemp is Create on a new temporary file in path's directory (for a
// caller that renames it to path once its recording has really started),
// which it returns too.
func CreateTemp(path string, linkType layers.LinkType, snaplen uint32) (*Writer, string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return nil, "", fmt.Errorf("create capture file: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, "", fmt.Errorf("create capture file: %w", err)
	}
	w, err := NewWriter(f, FormatFor(path), linkType, snaplen)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, "", err
	}
	return w, f.Name(), nil
}

// Create creates path (pcapng if it ends in .pcapng, else pcap) and writes
// its header.
func Create(path string, linkType layers.LinkType, snaplen uint32) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create capture file: %w", err)
	}
	w, err := NewWriter(f, FormatFor(path), linkType, snaplen)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.file = f
	return w, nil
}

// NewWriter writes a capture in format to out, starting with its header.
func NewWriter(out io.Writer, format Format, linkType layers.LinkType, snaplen uint32) (*Writer, error) {
	if snaplen == 0 {
		snaplen = DefaultSnaplen
	}
	w := &Writer{bw: bufio.NewWriterSize(out, 64<<10), linkType: linkType, lastFlush: time.Now(), ser: gopacket.NewSerializeBuffer()}
	if format == PCAPNG {
		intf := pcapgo.DefaultNgInterface
		intf.LinkType, intf.SnapLength, intf.Name = linkType, snaplen, "reprise"
		opts := pcapgo.DefaultNgWriterOptions
		opts.SectionInfo.Application = "reprise record"
		ng, err := pcapgo.NewNgWriterInterface(w.bw, intf, opts)
		if err != nil {
			return nil, fmt.Errorf("write pcapng header: %w", err)
		}
		w.ng = ng
	} else {
		w.pcap = pcapgo.NewWriterNanos(w.bw)
		if err := w.pcap.WriteFileHeader(snaplen, linkType); err != nil {
			return nil, fmt.Errorf("write pcap header: %w", err)
		}
	}
	return w, w.flushLocked()
}

// LinkType is the link type in the file header.
func (w *Writer) LinkType() layers.LinkType { return w.linkType }

// WritePacket writes one packet as captured.
func (w *Writer) WritePacket(ci gopacket.CaptureInfo, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(ci, data)
}

func (w *Writer) writeLocked(ci gopacket.CaptureInfo, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if ci.CaptureLength == 0 {
		ci.CaptureLength = len(data)
	}
	if ci.Length == 0 {
		ci.Length = ci.CaptureLength
	}
	var err error
	if w.ng != nil {
		ci.InterfaceIndex = 0 // the file describes one interface, whatever the live one's index
		var opts pcapgo.NgPacketOptions
		if w.comment != "" {
			opts.Comments = []string{w.comment}
			w.comment = ""
		}
		err = w.ng.WritePacketWithOptions(ci, data, opts)
	} else {
		err = w.pcap.WritePacket(ci, data)
	}
	if err != nil {
		w.err = fmt.Errorf("write packet: %w", err)
		return w.err
	}
	w.packets++
	w.bytes += int64(len(data))
	if time.Since(w.lastFlush) >= FlushEvery {
		return w.flushLocked()
	}
	return nil
}

// Flush writes out buffered packets.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	w.lastFlush = time.Now()
	var err error
	if w.ng != nil {
		err = w.ng.Flush()
	}
	if err == nil {
		err = w.bw.Flush()
	}
	if err != nil {
		w.err = fmt.Errorf("flush capture: %w", err)
	}
	return w.err
}

// Stats returns the packets and packet bytes written so far.
func (w *Writer) Stats() (packets, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.packets, w.bytes
}

// Close flushes and closes the file (if Create opened it).
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked()
	if w.file != nil {
		err = errors.Join(err, w.file.Close())
		w.file = nil
	}
	return err
}

// Synthesized packets: the recording proxy sees bytes on sockets, not
// packets, so it makes up the headers a live capture would have shown.

var (
	macClient = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macServer = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// synth serializes an Ethernet/IP/transport packet and writes it.
func (w *Writer) synthLocked(t time.Time, src, dst netip.AddrPort, transport gopacket.SerializableLayer, payload []byte) error {
	eth := &layers.Ethernet{SrcMAC: macClient, DstMAC: macServer}
	if !isClientMAC(src, dst) {
		eth.SrcMAC, eth.DstMAC = macServer, macClient
	}
	var ip gopacket.SerializableLayer
	var netLayer gopacket.NetworkLayer
	proto := layers.IPProtocolTCP
	if _, ok := transport.(*layers.UDP); ok {
		proto = layers.IPProtocolUDP
	}
	if src.Addr().Is4() && dst.Addr().Is4() {
		s, d := src.Addr().As4(), dst.Addr().As4()
		v4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment, SrcIP: s[:], DstIP: d[:]}
		eth.EthernetType = layers.EthernetTypeIPv4
		ip, netLayer = v4, v4
	} else {
		s, d := src.Addr().As16(), dst.Addr().As16()
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: s[:], DstIP: d[:]}
		eth.EthernetType = layers.EthernetTypeIPv6
		ip, netLayer = v6, v6
	}
	switch tl := transport.(type) {
	case *layers.TCP:
		if err := tl.SetNetworkLayerForChecksum(netLayer); err != nil {
			return fmt.Errorf("synthesize packet: %w", err)
		}
	case *layers.UDP:
		if err := tl.SetNetworkLayerForChecksum(netLayer); err != nil {
			return fmt.Errorf("synthesize packet: %w", err)
		}
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(w.ser, opts, eth, ip, transport, gopacket.Payload(payload)); err != nil {
		return fmt.Errorf("synthesize packet: %w", err)
	}
	b := w.ser.Bytes()
	return w.writeLocked(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(b), Length: len(b)}, b)
}

// isClientMAC gives each endpoint a stable MAC: the lower port plays server.
func isClientMAC(src, dst netip.AddrPort) bool { return src.Port() >= dst.Port() }

// UDP writes one synthesized datagram.
func (w *Writer) UDP(t time.Time, src, dst netip.AddrPort, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synthLocked(t, src, dst, &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}, payload)
}

// TCPConn is one synthesized TCP connection, with consistent sequence and
// acknowledgement numbers from its handshake to its FINs.
type TCPConn struct {
	w              *Writer
	client, server netip.AddrPort
	seq            [2]uint32 // next sequence number: [0] client, [1] server
	fin            [2]bool
}

// OpenTCP writes the three-way handshake of a connection from client to
// server at t and returns the connection for its data.
func (w *Writer) OpenTCP(t time.Time, client, server netip.AddrPort) (*TCPConn, error) {
	return w.OpenTCPNote(t, client, server, "")
}

// CanNote says the file keeps packet comments (pcapng).
func (w *Writer) CanNote() bool { return w.ng != nil }

// OpenTCPNote is OpenTCP with a comment on the connection's SYN (pcapng
// only): a TLS-terminating proxy's TLSInfo.Note, which the reader gives
// back as the flow's TLS.
func (w *Writer) OpenTCPNote(t time.Time, client, server netip.AddrPort, note string) (*TCPConn, error) {
	c := &TCPConn{w: w, client: client, server: server}
	// Initial sequence numbers from the ports: deterministic, and not 0
	// so a reader sees real wrap-around arithmetic.
	c.seq[0] = uint32(client.Port())<<16 | 0x1000
	c.seq[1] = uint32(server.Port())<<16 | 0x2000
	w.mu.Lock()
	defer w.mu.Unlock()
	w.comment = note
	if err := c.segment(t, 0, tcpFlags{syn: true}, nil); err != nil {
		return nil, err
	}
	if err := c.segment(t, 1, tcpFlags{syn: true, ack: true}, nil); err != nil {
		return nil, err
	}
	return c, c.segment(t, 0, tcpFlags{ack: true}, nil)
}

type tcpFlags struct{ syn, ack, psh, fin, rst bool }

// segment writes one segment from side (0 client, 1 server) and advances
// that side's sequence number.
func (c *TCPConn) segment(t time.Time, side int, fl tcpFlags, payload []byte) error {
	src, dst := c.client, c.server
	if side == 1 {
		src, dst = dst, src
	}
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()),
		Seq: c.seq[side], Window: 65535,
		SYN: fl.syn, ACK: fl.ack, PSH: fl.psh, FIN: fl.fin, RST: fl.rst,
	}
	if fl.ack {
		tcp.Ack = c.seq[1-side]
	}
	if err := c.w.synthLocked(t, src, dst, tcp, payload); err != nil {
		return err
	}
	c.seq[side] += uint32(len(payload))
	if fl.syn || fl.fin {
		c.seq[side]++
	}
	return nil
}

// Data writes bytes that passed from the client (fromClient) or the server,
// as segments of at most 16 KiB.
func (c *TCPConn) Data(t time.Time, fromClient bool, data []byte) error {
	side := 1
	if fromClient {
		side = 0
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	for len(data) > 0 {
		n := min(len(data), maxSegment)
		if err := c.segment(t, side, tcpFlags{ack: true, psh: true}, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Close writes a FIN from the side that closed, acknowledged by the other.
// Calling it for both sides closes the connection fully; repeats are no-ops.
func (c *TCPConn) Close(t time.Time, fromClient bool) error {
	side := 1
	if fromClient {
		side = 0
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.fin[side] {
		return nil
	}
	c.fin[side] = true
	if err := c.segment(t, side, tcpFlags{fin: true, ack: true}, nil); err != nil {
		return err
	}
	return c.segment(t, 1-side, tcpFlags{ack: true}, nil)
}

// InjectSecrets rewrites the pcapng file at path with a Decryption
// Secrets Block holding keyLog (SSLKEYLOGFILE lines) right after its
// section header, where Wireshark and this package's reader find it before
// any packet, so the file opens decrypted with no key log beside it.
func InjectSecrets(path string, keyLog []byte) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("add TLS secrets: %w", err)
	}
	defer in.Close()
	br := bufio.NewReader(in)
	head := make([]byte, 12)
	if _, err := io.ReadFull(br, head); err != nil || binary.LittleEndian.Uint32(head) != ngBlockSHB {
		return fmt.Errorf("add TLS secrets to %s: not a pcapng file", path)
	}
	order, ok := ngOrder(head[8:12])
	if !ok {
		return fmt.Errorf("add TLS secrets to %s: bad byte-order magic", path)
	}
	shbLen := order.Uint32(head[4:8])
	if shbLen < 28 || shbLen > 1<<20 {
		return fmt.Errorf("add TLS secrets to %s: section header of %d bytes", path, shbLen)
	}
	shb := append(head, make([]byte, shbLen-12)...)
	if _, err := io.ReadFull(br, shb[12:]); err != nil {
		return fmt.Errorf("add TLS secrets to %s: %w", path, err)
	}
	out, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".secrets-*")
	if err != nil {
		return fmt.Errorf("add TLS secrets: %w", err)
	}
	defer os.Remove(out.Name()) // after the rename, a no-op
	bw := bufio.NewWriter(out)
	bw.Write(shb)
	pad := (4 - len(keyLog)%4) % 4
	blockLen := uint32(20 + len(keyLog) + pad)
	u32 := func(b []byte, v uint32) []byte { return order.(binary.AppendByteOrder).AppendUint32(b, v) }
	dsb := u32(nil, ngBlockDSB)
	dsb = u32(dsb, blockLen)
	dsb = u32(dsb, dsbTLSKeyLog)
	dsb = u32(dsb, uint32(len(keyLog)))
	dsb = append(append(dsb, keyLog...), make([]byte, pad)...)
	dsb = u32(dsb, blockLen)
	bw.Write(dsb)
	if _, err := io.Copy(bw, br); err != nil {
		out.Close()
		return fmt.Errorf("add TLS secrets to %s: %w", path, err)
	}
	err = bw.Flush()
	if err == nil {
		err = out.Chmod(0o644)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(out.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("add TLS secrets to %s: %w", path, err)
	}
	return nil
}

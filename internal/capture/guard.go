package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// FormatError is a capture file whose structure breaks our bounds or the
// format: a header snap length, a record or block length, an interface id.
// Packet is the number of the packet record at fault (1-based), or of the
// last good one when the fault is in a block that is not a packet.
type FormatError struct {
	Packet int
	Offset int64 // byte offset of the record or block in the file
	Reason string
}

func (e *FormatError) Error() string {
	if e.Packet == 0 && e.Offset == 0 {
		return "capture file header: " + e.Reason
	}
	return fmt.Sprintf("capture packet %d (file offset %d): %s", e.Packet, e.Offset, e.Reason)
}

// File magics.
const (
	magicMicros   = 0xa1b2c3d4
	magicNanos    = 0xa1b23c4d
	ngBlockSHB    = 0x0a0d0d0a
	ngByteOrder   = 0x1a2b3c4d
	ngBlockIDB    = 0x00000001
	ngBlockPB     = 0x00000002 // obsolete packet block
	ngBlockSPB    = 0x00000003
	ngBlockEPB    = 0x00000006
	ngBlockDSB    = 0x0000000A // decryption secrets
	dsbTLSKeyLog  = 0x544c534b // "TLSK": the secrets are a TLS key log
	pcapHeaderLen = 24
	pcapRecordLen = 16
	ngMinBlock    = 12
	// ngOptionsRoom is what a packet block may hold beyond its packet bytes
	// (fixed fields, comments and other options).
	ngOptionsRoom = 64 << 10
)

// guard sits between the file and pcapgo. It reads the file one record
// (pcap) or block (pcapng) at a time, checks each length against our limits
// before allocating for it, and hands pcapgo only whole records that passed.
// A file that ends inside a record ends cleanly at the record before, with
// the cut tail described in tail.
type guard struct {
	r         *bufio.Reader
	ng        bool
	order     binary.ByteOrder
	maxPacket int
	buf       []byte // the record being served to pcapgo
	pos       int
	offset    int64 // file offset of the next record
	packets   int   // packet records handed out so far
	ifaces    int   // interfaces described in the current pcapng section
	err       error // sticky *FormatError
	tail      string
	// keys receives the TLS key logs of decryption secrets blocks;
	// warnings say which blocks could not be used.
	keys     *KeyLog
	warnings []string
}

func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.pos == len(g.buf) {
		if err := g.nextRecord(); err != nil {
			if err != io.EOF {
				g.err = err
			}
			return 0, err
		}
	}
	n := copy(p, g.buf[g.pos:])
	g.pos += n
	return n, nil
}

func (g *guard) fail(packet int, format string, args ...any) error {
	return &FormatError{Packet: packet, Offset: g.offset, Reason: fmt.Sprintf(format, args...)}
}

// readRecord reads n more bytes of the current record into g.buf, or notes
// a cut tail and returns io.EOF if the file ends first.
func (g *guard) readRecord(n int, what string) error {
	start := len(g.buf)
	g.buf = append(g.buf, make([]byte, n)...)
	got, err := io.ReadFull(g.r, g.buf[start:])
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if start+got > 0 {
			g.tail = fmt.Sprintf("file ends inside %s at offset %d (%d of %d bytes): the cut tail was skipped",
				what, g.offset, start+got, len(g.buf))
		}
		g.buf, g.pos = g.buf[:0], 0
		return io.EOF
	}
	return fmt.Errorf("read capture at offset %d: %w", g.offset, err)
}

func (g *guard) nextRecord() error {
	if g.pos > 0 {
		g.offset += int64(len(g.buf))
	}
	g.buf, g.pos = g.buf[:0], 0
	if g.ng {
		return g.nextBlock()
	}
	next := g.packets + 1
	if err := g.readRecord(pcapRecordLen, fmt.Sprintf("the header of packet %d", next)); err != nil {
		return err
	}
	capLen := g.order.Uint32(g.buf[8:12])
	wireLen := g.order.Uint32(g.buf[12:16])
	if capLen > uint32(g.maxPacket) {
		return g.fail(next, "captured length %d over the %d-byte limit", capLen, g.maxPacket)
	}
	if capLen > wireLen {
		return g.fail(next, "captured length %d over the wire length %d", capLen, wireLen)
	}
	if err := g.readRecord(int(capLen), fmt.Sprintf("packet %d", next)); err != nil {
		return err
	}
	g.packets = next
	return nil
}

func (g *guard) nextBlock() error {
	next := g.packets + 1
	if err := g.readRecord(8, "a block header"); err != nil {
		return err
	}
	typ := g.order.Uint32(g.buf[0:4])
	if typ == ngBlockSHB {
		// A new section may switch byte order: the order is in its body.
		if err := g.readRecord(4, "a section header"); err != nil {
			return err
		}
		order, ok := ngOrder(g.buf[8:12])
		if !ok {
			return g.fail(g.packets, "section header with a bad byte-order magic % x", g.buf[8:12])
		}
		g.order, g.ifaces = order, 0
	}
	length := g.order.Uint32(g.buf[4:8])
	isPacket := typ == ngBlockEPB || typ == ngBlockSPB || typ == ngBlockPB
	at := g.packets
	if isPacket {
		at = next
	}
	if length < ngMinBlock {
		return g.fail(at, "pcapng block type 0x%x with length %d, under the minimum of %d", typ, length, ngMinBlock)
	}
	if length%4 != 0 {
		return g.fail(at, "pcapng block type 0x%x with length %d, not a multiple of 4", typ, length)
	}
	if limit := uint32(g.maxPacket + ngOptionsRoom); length > limit {
		return g.fail(at, "pcapng block type 0x%x claims %d bytes, over the %d-byte limit", typ, length, limit)
	}
	what := fmt.Sprintf("a pcapng block of type 0x%x", typ)
	if isPacket {
		what = fmt.Sprintf("packet %d", next)
	}
	if err := g.readRecord(int(length)-len(g.buf), what); err != nil {
		return err
	}
	if trailer := g.order.Uint32(g.buf[len(g.buf)-4:]); trailer != length {
		return g.fail(at, "pcapng block type 0x%x: trailing length %d differs from leading %d", typ, trailer, length)
	}
	switch typ {
	case ngBlockIDB:
		g.ifaces++
	case ngBlockEPB, ngBlockPB:
		if err := g.checkPacketBlock(typ, next); err != nil {
			return err
		}
	case ngBlockSPB:
		if g.ifaces == 0 {
			return g.fail(next, "simple packet block before any interface description")
		}
	case ngBlockDSB:
		g.secrets()
	}
	if isPacket {
		g.packets = next
	}
	return nil
}

// checkPacketBlock checks an enhanced (or obsolete) packet block's interface
// id and lengths against the block and our limits.
func (g *guard) checkPacketBlock(typ uint32, n int) error {
	b := g.buf
	if len(b) < 32 {
		return g.fail(n, "packet block of %d bytes is too short for its fields", len(b))
	}
	var iface uint32
	if typ == ngBlockEPB {
		iface = g.order.Uint32(b[8:12])
	} else {
		iface = uint32(g.order.Uint16(b[8:10]))
	}
	capLen, wireLen := g.order.Uint32(b[20:24]), g.order.Uint32(b[24:28])
	if iface >= uint32(g.ifaces) {
		return g.fail(n, "interface id %d, but the section describes %d interfaces", iface, g.ifaces)
	}
	if capLen > uint32(g.maxPacket) {
		return g.fail(n, "captured length %d over the %d-byte limit", capLen, g.maxPacket)
	}
	if capLen > wireLen {
		return g.fail(n, "captured length %d over the wire length %d", capLen, wireLen)
	}
	if uint64(capLen) > uint64(len(b)-32) {
		return g.fail(n, "captured length %d does not fit its %d-byte block", capLen, len(b))
	}
	return nil
}

// secrets reads a decryption secrets block (g.buf) holding a TLS key
// log into g.keys; one it cannot use is a warning, not an error.
func (g *guard) secrets() {
	b := g.buf
	if len(b) < 20 || g.keys == nil {
		return
	}
	typ, n := g.order.Uint32(b[8:12]), g.order.Uint32(b[12:16])
	if typ != dsbTLSKeyLog {
		return // SSH, WireGuard, ...: not ours
	}
	if uint64(n) > uint64(len(b)-20) {
		g.warnings = append(g.warnings, fmt.Sprintf("decryption secrets block at offset %d: length %d does not fit its block: skipped", g.offset, n))
		return
	}
	k, err := ParseKeyLog(bytes.NewReader(b[16 : 16+n]))
	if err != nil {
		g.warnings = append(g.warnings, fmt.Sprintf("decryption secrets block at offset %d: TLS key log %v: skipped", g.offset, err))
		return
	}
	g.keys.Merge(k)
}

func ngOrder(b []byte) (binary.ByteOrder, bool) {
	switch {
	case binary.LittleEndian.Uint32(b) == ngByteOrder:
		return binary.LittleEndian, true
	case binary.BigEndian.Uint32(b) == ngByteOrder:
		return binary.BigEndian, true
	}
	return nil, false
}

// source yields packets from a pcap or pcapng file through a guard.
type source struct {
	g    *guard
	pcap *pcapgo.Reader
	ng   *pcapgo.NgReader
}

// openSource checks the file header itself, then opens the matching pcapgo
// reader on the guarded stream.
func openSource(r io.Reader, maxPacket int) (*source, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(pcapHeaderLen)
	if err != nil && len(head) < 12 {
		return nil, &FormatError{Reason: fmt.Sprintf("file of %d bytes is too short for a pcap or pcapng header", len(head))}
	}
	g := &guard{r: br, maxPacket: maxPacket}
	s := &source{g: g}
	if binary.LittleEndian.Uint32(head) == ngBlockSHB {
		order, ok := ngOrder(head[8:12])
		if !ok {
			return nil, &FormatError{Reason: fmt.Sprintf("pcapng section header with a bad byte-order magic % x", head[8:12])}
		}
		g.ng, g.order = true, order
		g.offset = 0
		// pcapgo reads the section header and first interface through the
		// guard, which checks those blocks like any other.
		ng, err := pcapgo.NewNgReader(g, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, s.wrap(err, "pcapng header")
		}
		s.ng = ng
		return s, nil
	}
	if len(head) < pcapHeaderLen {
		return nil, &FormatError{Reason: fmt.Sprintf("file of %d bytes is too short for a pcap header", len(head))}
	}
	if err := g.checkPcapHeader(head); err != nil {
		return nil, err
	}
	// pcapgo reads the 24-byte header straight from br; the guard serves
	// the records after it.
	hdr := make([]byte, pcapHeaderLen)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, &FormatError{Reason: "short pcap header"}
	}
	g.buf, g.pos = hdr, 0
	pr, err := pcapgo.NewReader(g)
	if err != nil {
		return nil, s.wrap(err, "pcap header")
	}
	s.pcap = pr
	return s, nil
}

func (g *guard) checkPcapHeader(h []byte) error {
	var order binary.ByteOrder
	switch m := binary.LittleEndian.Uint32(h); m {
	case magicMicros, magicNanos:
		order = binary.LittleEndian
	default:
		switch binary.BigEndian.Uint32(h) {
		case magicMicros, magicNanos:
			order = binary.BigEndian
		default:
			if h[0] == 0x1f && h[1] == 0x8b {
				return &FormatError{Reason: "gzip-compressed file: decompress it first"}
			}
			return &FormatError{Reason: fmt.Sprintf("not a pcap or pcapng file (magic % x)", h[:4])}
		}
	}
	if major := order.Uint16(h[4:6]); major != 2 {
		return &FormatError{Reason: fmt.Sprintf("pcap version %d.%d is not 2.4", major, order.Uint16(h[6:8]))}
	}
	// The header's snap length is advisory (tcpdump and tshark read past
	// it): each record is bounded by its own captured length and maxPacket.
	g.order = order
	return nil
}

// wrap turns a pcapgo error into ours, preferring the guard's own.
func (s *source) wrap(err error, what string) error {
	if s.g.err != nil {
		return s.g.err
	}
	return &FormatError{Packet: s.g.packets, Offset: s.g.offset, Reason: fmt.Sprintf("%s: %v", what, err)}
}

// next returns the next packet and its link type, io.EOF at the end (a cut
// tail included), or a *FormatError.
func (s *source) next() ([]byte, gopacket.CaptureInfo, layers.LinkType, string, error) {
	if s.pcap != nil {
		data, ci, err := s.pcap.ReadPacketData()
		if err != nil {
			return nil, ci, 0, "", s.end(err)
		}
		return data, ci, s.pcap.LinkType(), "", nil
	}
	data, ci, opts, err := s.ng.ReadPacketDataWithOptions()
	if err != nil {
		return nil, ci, 0, "", s.end(err)
	}
	var note string
	for _, c := range opts.Comments {
		if strings.HasPrefix(c, tlsNotePrefix) {
			note = c
		}
	}
	lt := s.ng.LinkType()
	if len(ci.AncillaryData) > 0 {
		if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			lt = l
		}
	}
	return data, ci, lt, note, nil
}

func (s *source) end(err error) error {
	if s.g.err != nil {
		return s.g.err
	}
	if err == io.EOF || errors.Is(err, io.EOF) {
		return io.EOF
	}
	return s.wrap(err, "read")
}

package capture

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/reassembly"
)

const (
	// flushAfter is how long (capture time) out-of-order TCP data waits for
	// the bytes before it; after that the gap is taken as lost.
	flushAfter = 5 * time.Second
	// pageCost is what one reassembly page costs in memory, roughly.
	pageCost = 2048
	// minPages is the least the reassembly buffers may hold in all.
	minPages = 128
	// dupWindow is how close in time two identical datagrams (same
	// addresses, IP id and bytes) must be to be one packet seen twice.
	dupWindow = 50 * time.Millisecond
	// dupRing is how many recent datagrams per flow direction are compared.
	dupRing = 16
	// maxNotes caps the notes kept per flow and the warnings per capture.
	maxNotes = 32
)

// decoder turns packets into flows of frames.
type decoder struct {
	opts    Options
	packets int
	asm     *reassembly.Assembler
	// tcp holds the TCP connections in the order they began: a live one's
	// stream until it ends, then only its Flow (nil if it carried no
	// frames), so what a connection holds is released when it ends.
	tcp   []tcpSlot
	conns map[[2]netip.AddrPort]*tcpLife
	// dead are the 4-tuples of ended connections, by end time: their
	// tcpLife is kept for deadAfter, so the ACKs after the FINs count for
	// the flow that ended instead of opening a new one, then dropped.
	dead []deadConn
	// life is the tcpLife of the packet being decoded, for New.
	life      *tcpLife
	live      int // connections not yet ended
	empty     int // flows that carried no protocol frames, left out
	udp       map[[2]netip.AddrPort]*udpFlow
	udpOrder  []*udpFlow
	mem       int64
	memErr    *MemoryError // the budget was reached: reading stops
	lastFlush time.Time
	current   int // the number of the packet being decoded
	warnings  []string
	dropped   int // warnings past maxNotes

	truncated, fragments, unsupported, undecodable, nonProto int
	firstTruncated                                           int
	dups, firstDup, firstDupOf                               int
	nonProtoCut, firstNonProtoCut                            int
	linkTypes                                                map[layers.LinkType]int
	// keys are the TLS secrets: Options.KeyLog and the capture's own
	// decryption secrets blocks.
	keys *KeyLog
	// note is the pcapng comment of the packet being decoded.
	note string
}

func newDecoder(opts Options) *decoder {
	d := &decoder{opts: opts, udp: map[[2]netip.AddrPort]*udpFlow{}, conns: map[[2]netip.AddrPort]*tcpLife{}, linkTypes: map[layers.LinkType]int{},
		keys: &KeyLog{secrets: map[[32]byte]*tlsSecrets{}}}
	d.keys.Merge(opts.KeyLog)
	pool := reassembly.NewStreamPool(d)
	d.asm = reassembly.NewAssembler(pool)
	// Out-of-order data waits by time (flushAfter), not by count: no cap
	// per connection, only the memory budget for all of them.
	d.asm.MaxBufferedPagesPerConnection = 0
	d.asm.MaxBufferedPagesTotal = int(max(opts.MaxMemory/2/pageCost, minPages))
	return d
}

func (d *decoder) warn(format string, args ...any) {
	if len(d.warnings) >= maxNotes {
		d.dropped++
		return
	}
	d.warnings = append(d.warnings, fmt.Sprintf(format, args...))
}

// frameOverhead is what keeping a frame costs beyond its bytes: the Frame
// value and the rounding of its allocation.
const frameOverhead = 96

// Per-flow state charged to the memory budget: the stream and reassembly
// state of a live TCP connection (both directions, gopacket's connection,
// the maps that find it), released when it ends; the Flow kept for it
// after (with FlowStats when summarising); a UDP flow's duplicate rings
// and Flow; a frame's mark while its flow is live (Options.Summarize).
const (
	tcpFlowCost = 4 << 10
	flowCost    = 512
	udpFlowCost = 2 << 10
	markCost    = 16
	deadAfter   = flushAfter
	idleAfter   = 10 * time.Minute
)

// tcpSlot is a TCP connection in the order connections began: its
// stream while live, its Flow once ended.
type tcpSlot struct {
	s *tcpStream
	f *Flow
}

// deadConn is an ended connection's 4-tuple, kept deadAfter.
type deadConn struct {
	key [2]netip.AddrPort
	l   *tcpLife
	at  time.Time
}

// charge adds n bytes to what reading holds; past the budget (half of
// MaxMemory: the reassembly pages have the other half) reading stops with
// a *MemoryError naming the packet.
func (d *decoder) charge(n int64) bool {
	if d.memErr != nil {
		return false
	}
	if d.mem+n > d.opts.MaxMemory/2 {
		d.memErr = &MemoryError{Packet: d.current, Limit: d.opts.MaxMemory, Flows: len(d.tcp) + len(d.udpOrder), Live: d.live}
		return false
	}
	d.mem += n
	return true
}

// keep charges a kept frame of n bytes to the memory budget.
func (d *decoder) keep(n int) bool { return d.charge(int64(n + frameOverhead)) }

// MemoryError says reading a capture would hold more than
// Options.MaxMemory: the flows and frames it holds by Packet.
type MemoryError struct {
	Packet int
	Limit  int64
	Flows  int
	// Live is how many of the flows were open connections by then.
	Live int
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("capture packet %d: reading the capture would hold more than its memory budget of %d MiB (%d flows by then, %d of them open): raise --max-memory",
		e.Packet, e.Limit>>20, e.Flows, e.Live)
}

// pktCtx carries a packet's capture info and number through reassembly,
// which keeps it with any bytes it buffers.
type pktCtx struct{ ci gopacket.CaptureInfo }

func (c *pktCtx) GetCaptureInfo() gopacket.CaptureInfo { return c.ci }

func packetOf(ci gopacket.CaptureInfo) int {
	if len(ci.AncillaryData) > 0 {
		if n, ok := ci.AncillaryData[0].(int); ok {
			return n
		}
	}
	return 0
}

func linkDecoder(lt layers.LinkType) (gopacket.Decoder, bool) {
	switch lt {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeNull, layers.LinkTypeLoop, layers.LinkTypeRaw:
		return lt, true
	case 12, 14: // DLT_RAW as some BSDs number it
		return layers.LinkTypeRaw, true
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4, true
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6, true
	}
	return nil, false
}

func (d *decoder) packet(p rawPacket) {
	data, ci, lt, n := p.data, p.ci, p.lt, p.n
	d.packets++
	d.current = n
	dec, ok := linkDecoder(lt)
	if !ok {
		d.linkTypes[lt]++
		d.unsupported++
		return
	}
	if ci.CaptureLength < ci.Length {
		d.truncated++
		if d.firstTruncated == 0 {
			d.firstTruncated = n
		}
	}
	pkt := gopacket.NewPacket(data, dec, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
	src, dst, netFlow, ipID, ok := d.addresses(pkt, n)
	if !ok {
		return
	}
	switch t := pkt.TransportLayer().(type) {
	case *layers.TCP:
		ci.AncillaryData = []any{n}
		var ok bool
		netFlow, ok = d.lifetime(netip.AddrPortFrom(src, uint16(t.SrcPort)), netip.AddrPortFrom(dst, uint16(t.DstPort)), t, netFlow, ci.Timestamp)
		if ok {
			d.note = p.note
			d.asm.AssembleWithContext(netFlow, t, &pktCtx{ci: ci})
			d.note = ""
		}
		d.maybeFlush(ci.Timestamp)
	case *layers.UDP:
		d.udpPacket(datagram{
			src: netip.AddrPortFrom(src, uint16(t.SrcPort)), dst: netip.AddrPortFrom(dst, uint16(t.DstPort)),
			payload: t.Payload, t: ci.Timestamp, n: n, ipID: ipID, cut: ci.CaptureLength < ci.Length,
		})
	default:
		if el := pkt.ErrorLayer(); el != nil {
			d.undecodable++
			d.warn("packet %d: cannot decode: %v", n, el.Error())
		}
	}
}

// addresses returns the IP addresses of a packet and its IPv4 id (-1 for
// IPv6), or false for packets that are not IP or are fragments (our
// frames fit one datagram).
func (d *decoder) addresses(pkt gopacket.Packet, n int) (src, dst netip.Addr, flow gopacket.Flow, id int, ok bool) {
	switch ip := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
			d.fragments++
			return src, dst, flow, 0, false
		}
		src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		return src, dst, ip.NetworkFlow(), int(ip.Id), true
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		return src.Unmap(), dst.Unmap(), ip.NetworkFlow(), -1, true
	}
	if el := pkt.ErrorLayer(); el != nil {
		d.undecodable++
		d.warn("packet %d: cannot decode: %v", n, el.Error())
	}
	return src, dst, flow, 0, false
}

// tcpLife is what the decoder knows of a 4-tuple's connections: how many
// came before the current one, whether the current one ended (an RST or a
// FIN was seen), and the ISN of its opening SYN.
type tcpLife struct {
	gen     int
	ended   bool
	haveISN bool
	isn     uint32
	data    bool // a segment with payload was seen
	// done says the current connection's reassembly ended (FINs or RST
	// both ways, or idle past idleAfter) and was released; flow is what
	// it left (nil: no frames), which later packets are counted for.
	done bool
	flow *Flow
}

// lifetime keys a TCP packet by connection lifetime: a SYN after an RST or
// FIN on the same 4-tuple, or a SYN with another ISN than the current
// connection's (its end was not captured), or a SYN on a connection that
// had none (the capture began inside it), starts a new connection (a
// client port reused), which the reassembler must not take for more data
// of the old one. A retransmitted SYN has the same ISN. Each lifetime
// after the first gets its own network flow key (same addresses, another
// endpoint type), so the reassembler keeps them apart.
//
// A packet after the current connection ended and was released (ok
// false) is counted for its flow and goes no further, unless it opens a
// new one: a SYN as above, or data after an idle end (no FIN or RST).
func (d *decoder) lifetime(src, dst netip.AddrPort, t *layers.TCP, netFlow gopacket.Flow, ts time.Time) (_ gopacket.Flow, ok bool) {
	key := [2]netip.AddrPort{src, dst}
	if src.Compare(dst) > 0 {
		key = [2]netip.AddrPort{dst, src}
	}
	l := d.conns[key]
	syn := t.SYN && !t.ACK
	if l == nil {
		l = &tcpLife{}
		d.conns[key] = l
	} else if syn && (l.ended || (!l.haveISN && l.data) || (l.haveISN && l.isn != t.Seq)) ||
		l.done && !l.ended && len(t.Payload) > 0 {
		l.gen++
		l.ended, l.done, l.flow, l.haveISN = false, false, nil, false
	} else if l.done {
		if f := l.flow; f != nil {
			f.Packets++
			if ts.After(f.End) {
				f.End = ts
			}
		}
		return netFlow, false
	}
	d.life = l
	if t.SYN && !t.ACK {
		l.haveISN, l.isn = true, t.Seq
	}
	if t.RST || t.FIN {
		l.ended = true
	}
	l.data = l.data || len(t.Payload) > 0
	if l.gen == 0 {
		return netFlow, true
	}
	s, r := netFlow.Endpoints()
	return gopacket.NewFlow(netFlow.EndpointType()+gopacket.EndpointType(l.gen)<<20, s.Raw(), r.Raw()), true
}

// maybeFlush hands on out-of-order TCP data that has waited too long for
// the bytes before it, about once a second of capture time.
func (d *decoder) maybeFlush(now time.Time) {
	if now.Sub(d.lastFlush) < time.Second {
		return
	}
	d.lastFlush = now
	d.asm.FlushWithOptions(reassembly.FlushOptions{T: now.Add(-flushAfter), TC: now.Add(-idleAfter)})
	for len(d.dead) > 0 && now.Sub(d.dead[0].at) > deadAfter {
		dc := d.dead[0]
		d.dead[0] = deadConn{}
		d.dead = d.dead[1:]
		if d.conns[dc.key] == dc.l && dc.l.done {
			delete(d.conns, dc.key)
		}
	}
	if len(d.dead) == 0 {
		d.dead = nil // let the backing array go
	}
}

// New implements reassembly.StreamFactory.
func (d *decoder) New(netFlow, tcpFlow gopacket.Flow, tcp *layers.TCP, ac reassembly.AssemblerContext) reassembly.Stream {
	srcIP, _ := netip.AddrFromSlice(netFlow.Src().Raw())
	dstIP, _ := netip.AddrFromSlice(netFlow.Dst().Raw())
	s := &tcpStream{
		d:       d,
		life:    d.life,
		slot:    len(d.tcp),
		a:       netip.AddrPortFrom(srcIP.Unmap(), uint16(tcp.SrcPort)),
		b:       netip.AddrPortFrom(dstIP.Unmap(), uint16(tcp.DstPort)),
		synFrom: -1,
		start:   ac.GetCaptureInfo().Timestamp,
	}
	s.half[0] = newHalfStream(fmt.Sprintf("%s -> %s", s.a, s.b), d.opts.Framer, d.keep, s.note)
	s.half[1] = newHalfStream(fmt.Sprintf("%s -> %s", s.b, s.a), d.opts.Framer, d.keep, s.note)
	if d.opts.Select != nil && !d.opts.Select(s.a, s.b) {
		s.half[0].discard, s.half[1].discard = true, true
	}
	if d.summarize() {
		s.half[0].marks, s.half[1].marks = d.mark, d.mark
		s.half[0].tally, s.half[1].tally = d.opts.Summarize.Tally(), d.opts.Summarize.Tally()
		s.half[0].discard, s.half[1].discard = true, true
	}
	d.tcp = append(d.tcp, tcpSlot{s: s})
	d.live++
	d.charge(tcpFlowCost)
	return s
}

// summarize says TCP halves tally their frames (Options.Summarize)
// instead of keeping them.
func (d *decoder) summarize() bool { return d.opts.Summarize != nil && d.opts.Framer != nil }

// mark charges a frame's mark to the memory budget.
func (d *decoder) mark() bool { return d.charge(markCost) }

// ended releases a connection whose reassembly is over: its stream and
// halves give way to its Flow (with its FlowStats when summarising), or
// to nothing if it carried no frames.
func (d *decoder) ended(s *tcpStream) {
	if d.tcp[s.slot].s != s {
		return // ended already
	}
	s.finish()
	f := s.flow(d.opts.ServerPort)
	d.live--
	d.mem -= tcpFlowCost
	if s.tls != nil {
		d.mem -= tlsConnCost
	}
	if d.summarize() {
		d.mem -= int64(s.half[0].tallied+s.half[1].tallied) * markCost
	}
	d.tcp[s.slot] = tcpSlot{}
	if f.ClientCount == 0 && f.ServerCount == 0 && f.TLS == nil {
		d.empty++
		f = nil
	} else {
		d.settle(f)
		if d.summarize() {
			f.Summary = d.opts.Summarize.Summarize(f, s.half[s.clientIdx].tally, s.half[1-s.clientIdx].tally)
		}
		d.tcp[s.slot].f = f
		d.charge(flowCost)
	}
	if l := s.life; l != nil {
		l.done, l.flow = true, f
		d.dead = append(d.dead, deadConn{key: lifeKey(s.a, s.b), l: l, at: s.end})
	}
}

func lifeKey(a, b netip.AddrPort) [2]netip.AddrPort {
	if a.Compare(b) > 0 {
		return [2]netip.AddrPort{b, a}
	}
	return [2]netip.AddrPort{a, b}
}

// settle sets the offsets of a flow's frames from its start.
func (d *decoder) settle(f *Flow) {
	for i := range f.ClientFrames {
		f.ClientFrames[i].Offset = f.ClientFrames[i].Time.Sub(f.Start)
	}
	for i := range f.ServerFrames {
		f.ServerFrames[i].Offset = f.ServerFrames[i].Time.Sub(f.Start)
	}
}

// tcpStream is one TCP connection: a is the sender of its first packet.
type tcpStream struct {
	d         *decoder
	life      *tcpLife
	slot      int // index in decoder.tcp
	a, b      netip.AddrPort
	clientIdx int // the client's half, set by flow
	synFrom   int // index of the side that sent a bare SYN, or -1
	start     time.Time
	end       time.Time
	packets   int
	half      [2]*halfStream
	started   [2]bool // the half has seen its first packet
	midway    [2]bool // the half started without a SYN
	notes     []string
	dropped   int
	complete  bool
	// tls reads the connection as TLS once its first bytes said so
	// (decided); proxyTLS is what a TLS-terminating proxy noted of it.
	tls      *tlsConn
	decided  bool
	proxyTLS *TLSInfo
}

func (s *tcpStream) note(msg string) {
	if len(s.notes) >= maxNotes {
		s.dropped++
		return
	}
	s.notes = append(s.notes, msg)
}

func dirIndex(dir reassembly.TCPFlowDirection) int {
	if dir == reassembly.TCPDirClientToServer {
		return 0
	}
	return 1
}

// Accept implements reassembly.Stream: every packet is taken; a half whose
// first packet is not a SYN is started anyway (capture began mid-connection)
// and realigns on a frame boundary.
func (s *tcpStream) Accept(tcp *layers.TCP, ci gopacket.CaptureInfo, dir reassembly.TCPFlowDirection, nextSeq reassembly.Sequence, start *bool, ac reassembly.AssemblerContext) bool {
	i := dirIndex(dir)
	s.packets++
	if ci.Timestamp.After(s.end) {
		s.end = ci.Timestamp
	}
	if ci.Timestamp.Before(s.start) {
		s.start = ci.Timestamp
	}
	if tcp.SYN && !tcp.ACK && s.synFrom < 0 {
		s.synFrom = i
	}
	if s.d.note != "" && s.proxyTLS == nil {
		if info, ok := ParseTLSNote(s.d.note); ok {
			s.proxyTLS = info
		}
	}
	h := s.half[i]
	if len(tcp.Payload) > 0 && len(h.gaps) > 0 {
		h.late(uint32(tcp.Seq), len(tcp.Payload), packetOf(ci))
	}
	if !s.started[i] {
		s.started[i] = true
		if tcp.SYN {
			if h.cut != nil {
				h.cut.FromStart()
			}
			h.base = uint32(tcp.Seq) + 1
		} else {
			h.base = uint32(tcp.Seq)
			*start = true
			s.midway[i] = true
			s.note(fmt.Sprintf("packet %d: %s: no SYN seen (capture started mid-connection): looking for a frame boundary",
				packetOf(ci), s.half[i].name))
		}
	}
	return true
}

// ReassembledSG implements reassembly.Stream: it hands each packet's share
// of the in-order bytes to its half, with that packet's time and number.
func (s *tcpStream) ReassembledSG(sg reassembly.ScatterGather, ac reassembly.AssemblerContext) {
	dir, _, _, skip := sg.Info()
	h := s.half[dirIndex(dir)]
	avail, _ := sg.Lengths()
	if avail == 0 {
		return
	}
	data := sg.Fetch(avail)
	if skip > 0 {
		h.gap(skip, packetOf(sg.CaptureInfo(0)))
		if s.tls != nil {
			s.tls.fail(dirIndex(dir), packetOf(sg.CaptureInfo(0)), "%d bytes missing from the capture: the records after them cannot be read", skip)
		}
	}
	if skip < 0 {
		// Bytes before the first we hold (a stream started midway on a
		// later packet): nothing was given up that we could have had.
		skip = 0
	}
	for off := 0; off < avail; {
		ci := sg.CaptureInfo(off)
		end := pieceEnd(sg, off, avail, packetOf(ci))
		s.feed(dirIndex(dir), data[off:end], ci.Timestamp, packetOf(ci))
		off = end
	}
}

// pieceEnd finds where the run of bytes from packet pkt that starts at off
// ends: a packet's bytes are contiguous, so a binary search does.
func pieceEnd(sg reassembly.ScatterGather, off, avail, pkt int) int {
	lo, hi := off+1, avail // the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi) / 2
		if packetOf(sg.CaptureInfo(mid)) == pkt {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// ReassemblyComplete implements reassembly.Stream: the connection ended
// (FINs or RST both ways, idle past idleAfter, or the end of the file)
// and leaves the pool; its 4-tuple's tcpLife counts the ACKs after its
// FINs for it instead of opening a new, empty stream.
func (s *tcpStream) ReassemblyComplete(ac reassembly.AssemblerContext) bool {
	s.d.ended(s)
	return true
}

// feed hands half i's bytes on: to the half, or through TLS when the
// connection's first bytes were a ClientHello (or, caught midway, a TLS
// record).
func (s *tcpStream) feed(i int, data []byte, t time.Time, pkt int) {
	if !s.decided && len(data) > 0 {
		s.decided = true
		hello := looksLikeClientHello(data)
		if s.proxyTLS == nil && (hello || s.midway[i] && looksLikeTLSRecord(data)) {
			names := [2]string{s.half[0].name, s.half[1].name}
			out := func(j int, b []byte, t time.Time, pkt int) { s.half[j].feed(b, t, pkt) }
			s.tls = newTLSConn(i, s.d.keys, names, out, s.note)
			s.tls.midway = !hello
			s.d.charge(tlsConnCost)
		}
	}
	if s.tls != nil {
		s.tls.feed(i, data, t, pkt)
		return
	}
	s.half[i].feed(data, t, pkt)
}

func (s *tcpStream) finish() {
	if s.complete {
		return
	}
	s.complete = true
	if s.tls != nil {
		s.tls.end()
	}
	s.half[0].end()
	s.half[1].end()
}

// flow decides which side is the client and builds the Flow: the side
// that sent the SYN, else the one that sent a join, else the one whose
// frames are of client kinds, else the one talking to the server port,
// else the first sender.
func (s *tcpStream) flow(serverPort uint16) *Flow {
	h0, h1 := &s.half[0].hints, &s.half[1].hints
	c, by := clientSide(s.synFrom, h0[Opens] > 0, h1[Opens] > 0,
		[2]int{h0[FromClient] + h0[Opens], h1[FromClient] + h1[Opens]}, [2]int{h0[FromServer], h1[FromServer]},
		s.a.Port(), s.b.Port(), serverPort)
	ends := [2]netip.AddrPort{s.a, s.b}
	s.clientIdx = c
	f := &Flow{
		Client: ends[c], Server: ends[1-c], Transport: TCP,
		Start: s.start, End: s.end, Packets: s.packets,
		ClientFrames: s.half[c].frames, ServerFrames: s.half[1-c].frames,
		ClientCount: s.half[c].count, ServerCount: s.half[1-c].count,
		Resynced: s.half[0].resynced() || s.half[1].resynced(),
		Notes:    s.notes, ClientBy: by,
		TLS: s.proxyTLS,
	}
	if s.tls != nil {
		f.TLS = s.tls.result()
		if s.tls.client != c && s.synFrom < 0 {
			// The ClientHello's sender is the client, whatever else said.
			c = s.tls.client
			f.Client, f.Server = ends[c], ends[1-c]
			f.ClientFrames, f.ServerFrames = s.half[c].frames, s.half[1-c].frames
			f.ClientCount, f.ServerCount = s.half[c].count, s.half[1-c].count
			f.ClientBy = ClientByHello
			s.clientIdx = c
		}
	}
	if s.dropped > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("... and %d more notes", s.dropped))
	}
	return f
}

// udpFlow is the datagrams between two endpoints, a being the first sender.
type udpFlow struct {
	a, b       netip.AddrPort
	start, end time.Time
	packets    int
	frames     [2][]Frame // by sender: a, b
	count      [2]int     // frames found by sender, kept or not
	discard    bool       // not selected (Options.Select): keep no frames
	framer     Framer     // Options.Framer
	join       int        // index of the side that sent a join, or -1
	recent     [2][dupRing]seen
	next       [2]int
	client     [2]int // client→server frames sent by each side
	server     [2]int // server→client frames sent by each side
	notes      []string
	dropped    int
}

// datagram is one UDP packet as the decoder sees it.
type datagram struct {
	src, dst netip.AddrPort
	payload  []byte
	t        time.Time
	n        int  // packet number
	ipID     int  // IPv4 id, -1 for IPv6
	cut      bool // the snap length cut the packet
}

// seen is a recent datagram of a flow direction, to find copies.
type seen struct {
	t    time.Time
	n    int
	ipID int
	sum  uint64
	size int
}

func (d *decoder) udpPacket(g datagram) {
	src, dst, t, n := g.src, g.dst, g.t, g.n
	key := [2]netip.AddrPort{src, dst}
	if src.Compare(dst) > 0 {
		key = [2]netip.AddrPort{dst, src}
	}
	u := d.udp[key]
	frames, ok := [][]byte{g.payload}, len(g.payload) > 0
	if fr := d.opts.Framer; fr != nil {
		frames, ok = fr.Datagram(g.payload)
	}
	if u == nil {
		if !ok {
			d.nonProto++
			if g.cut {
				d.nonProtoCut++
				if d.firstNonProtoCut == 0 {
					d.firstNonProtoCut = n
				}
			}
			return
		}
		if !d.charge(udpFlowCost) {
			return
		}
		u = &udpFlow{a: src, b: dst, start: t, end: t, join: -1, discard: d.opts.Select != nil && !d.opts.Select(src, dst), framer: d.opts.Framer}
		d.udp[key] = u
		d.udpOrder = append(d.udpOrder, u)
	}
	i := 0
	if src != u.a {
		i = 1
	}
	if of := u.duplicate(i, g); of > 0 {
		d.dups++
		if d.firstDup == 0 {
			d.firstDup, d.firstDupOf = n, of
		}
		return
	}
	u.packets++
	if t.After(u.end) {
		u.end = t
	}
	if t.Before(u.start) {
		u.start = t
	}
	if !ok {
		what := "is not a protocol frame"
		if g.cut {
			what = "was cut by the snap length"
		}
		u.note(fmt.Sprintf("packet %d: %s -> %s: datagram of %d bytes %s: skipped", n, src, dst, len(g.payload), what))
		return
	}
	for _, frame := range frames {
		// A raw payload says nothing of its sender: it counts as a
		// client's, so the busier sender is taken for the client.
		hint := FromClient
		if fr := d.opts.Framer; fr != nil {
			hint = fr.Hint(frame)
		}
		if hint == Opens && u.join < 0 {
			u.join = i
		}
		switch hint {
		case FromClient, Opens:
			u.client[i]++
		default:
			u.server[i]++
		}
		u.count[i]++
		if !u.discard && d.keep(len(frame)) {
			u.frames[i] = append(u.frames[i], Frame{Time: t, Packet: n, Bytes: append([]byte(nil), frame...)})
		}
	}
}

func (u *udpFlow) note(msg string) {
	if len(u.notes) < maxNotes {
		u.notes = append(u.notes, msg)
	} else {
		u.dropped++
	}
}

// duplicate reports the packet number of which g, sent by side i, is a
// copy (0 if none): same IP id and bytes within dupWindow, as when a
// capture merges two interfaces that both saw the packet (lo and any).
// It remembers g otherwise.
func (u *udpFlow) duplicate(i int, g datagram) int {
	h := fnv.New64a()
	h.Write(g.payload)
	cur := seen{t: g.t, n: g.n, ipID: g.ipID, sum: h.Sum64(), size: len(g.payload)}
	ring := &u.recent[i]
	for _, r := range ring {
		if r.n != 0 && r.ipID == cur.ipID && r.sum == cur.sum && r.size == cur.size &&
			cur.t.Sub(r.t) <= dupWindow && r.t.Sub(cur.t) <= dupWindow {
			return r.n
		}
	}
	ring[u.next[i]%dupRing] = cur
	u.next[i]++
	return 0
}

func (u *udpFlow) flow(serverPort uint16) *Flow {
	// A datagram carries its direction (a client's has a session token),
	// so frame kinds come before ports; there is no SYN.
	c, by := clientSide(-1, u.join == 0, u.join == 1, u.client, u.server, u.a.Port(), u.b.Port(), serverPort)
	ends := [2]netip.AddrPort{u.a, u.b}
	for i := range u.frames {
		if u.framer == nil {
			break
		}
		if n := u.framer.Reorder(u.frames[i]); n > 0 {
			u.note(fmt.Sprintf("%s -> %s: %d datagrams came out of their sender's order (by the trace stamp) and were put back in it", ends[i], ends[1-i], n))
		}
	}
	f := &Flow{
		Client: ends[c], Server: ends[1-c], Transport: UDP,
		Start: u.start, End: u.end, Packets: u.packets,
		ClientFrames: u.frames[c], ServerFrames: u.frames[1-c],
		ClientCount: u.count[c], ServerCount: u.count[1-c],
		Notes: u.notes, ClientBy: by,
	}
	if u.dropped > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("... and %d more notes", u.dropped))
	}
	return f
}

// clientSide returns the index (0: a, the first sender; 1: b) of a flow's
// client and how it was told.
func clientSide(synFrom int, join0, join1 bool, clientKinds, serverKinds [2]int, portA, portB, serverPort uint16) (int, string) {
	// Frames of client kinds count for a side, of server kinds against.
	score := func(i int) int { return clientKinds[i] - serverKinds[i] }
	switch {
	case synFrom >= 0:
		return synFrom, ClientBySYN
	case join0 != join1:
		if join1 {
			return 1, ClientByJoin
		}
		return 0, ClientByJoin
	case score(0) != score(1):
		if score(1) > score(0) {
			return 1, ClientByKinds
		}
		return 0, ClientByKinds
	case portB == serverPort && portA != serverPort:
		return 0, ClientByPort
	case portA == serverPort && portB != serverPort:
		return 1, ClientByPort
	}
	return 0, ClientByFirst
}

// finish flushes reassembly and builds the Capture.
func (d *decoder) finish() *Capture {
	d.asm.FlushAll()
	c := &Capture{Packets: d.packets}
	for _, sl := range d.tcp {
		if sl.s != nil {
			// Still live: FlushAll ends every connection, this is a
			// stream gopacket never completed.
			d.ended(sl.s)
			sl = d.tcp[sl.s.slot]
		}
		if sl.f != nil {
			c.Flows = append(c.Flows, sl.f)
		}
	}
	d.tcp = nil
	for _, u := range d.udpOrder {
		f := u.flow(d.opts.ServerPort)
		if f.ClientCount == 0 && f.ServerCount == 0 {
			d.empty++
			continue
		}
		d.settle(f)
		if sum := d.opts.Summarize; sum != nil {
			f.Summary = SummarizeFrames(sum, f)
			f.ClientFrames, f.ServerFrames = nil, nil
		}
		c.Flows = append(c.Flows, f)
	}
	sort.SliceStable(c.Flows, func(i, j int) bool { return c.Flows[i].Start.Before(c.Flows[j].Start) })
	c.Warnings = d.summaryWarnings(d.empty)
	return c
}

func (d *decoder) summaryWarnings(empty int) []string {
	w := d.warnings
	if d.dropped > 0 {
		w = append(w, fmt.Sprintf("... and %d more packet warnings", d.dropped))
	}
	if d.truncated > 0 {
		w = append(w, fmt.Sprintf("%d packets were cut by the snap length (first: packet %d): bytes missing from their streams were skipped", d.truncated, d.firstTruncated))
	}
	lts := make([]layers.LinkType, 0, len(d.linkTypes))
	for lt := range d.linkTypes {
		lts = append(lts, lt)
	}
	sort.Slice(lts, func(i, j int) bool { return lts[i] < lts[j] })
	for _, lt := range lts {
		w = append(w, fmt.Sprintf("%d packets of unsupported link type %s (%d) were skipped", d.linkTypes[lt], lt, int(lt)))
	}
	if d.fragments > 0 {
		w = append(w, fmt.Sprintf("%d IP fragments were skipped (frames fit one datagram)", d.fragments))
	}
	if d.dups > 0 {
		w = append(w, fmt.Sprintf("%d UDP datagrams were copies of one seen just before (same addresses, IP id and bytes; first: packet %d, a copy of packet %d) and were dropped: the capture holds some packets twice (merged from two interfaces such as lo and any, or a duplicating network)", d.dups, d.firstDup, d.firstDupOf))
	}
	if d.nonProto > 0 {
		msg := fmt.Sprintf("%d UDP datagrams outside any protocol flow were not protocol frames and were skipped", d.nonProto)
		if d.nonProtoCut > 0 {
			msg = fmt.Sprintf("%d UDP datagrams outside any protocol flow were skipped: %d of them cut by the snap length (first: packet %d), the rest not protocol frames", d.nonProto, d.nonProtoCut, d.firstNonProtoCut)
		}
		w = append(w, msg)
	}
	if empty > 0 {
		w = append(w, fmt.Sprintf("%d flows carried no protocol frames and were left out", empty))
	}
	return w
}

// SummarizeFrames is the Summary sum makes of a flow's frames (a flow
// read without Options.Summarize).
func SummarizeFrames(sum Summarizer, f *Flow) any {
	c, sv := sum.Tally(), sum.Tally()
	for _, fr := range f.ClientFrames {
		c.Add(fr.Time, fr.Bytes)
	}
	for _, fr := range f.ServerFrames {
		sv.Add(fr.Time, fr.Bytes)
	}
	return sum.Summarize(f, c, sv)
}

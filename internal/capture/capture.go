package capture

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"
)

// Transport is the transport a flow used: "tcp" or "udp".
type Transport string

// Transports.
const (
	TCP Transport = "tcp"
	UDP Transport = "udp"
)

// Frame is one protocol frame found in a capture, as Options.Framer cut
// it (without one: one packet's payload).
type Frame struct {
	// Time is the capture timestamp of the packet that completed the frame.
	Time time.Time
	// Offset is Time minus the flow's Start.
	Offset time.Duration
	// Packet is the 1-based number of that packet in the file.
	Packet int
	// Bytes is the whole frame as the Framer cut it. It is a copy the
	// caller owns.
	Bytes []byte
}

// Flow is one client's conversation with the server: a TCP connection, or
// the datagrams between one client address and the server.
type Flow struct {
	Client, Server netip.AddrPort
	Transport      Transport
	// Start and End are the timestamps of the flow's first and last packet.
	Start, End   time.Time
	ClientFrames []Frame
	ServerFrames []Frame
	// ClientCount and ServerCount are the frames found each way, kept or
	// not (a flow Options.Select left out keeps none).
	ClientCount, ServerCount int
	// Packets counts the flow's packets, empty ones (ACKs) included.
	Packets int
	// Resynced says a byte stream had to be realigned on a frame boundary
	// (capture started mid-connection, bytes missing or garbage); Notes say
	// where and what was skipped.
	Resynced bool
	Notes    []string
	// Summary is what Options.Summarize made of the flow's frames (the
	// frames themselves are not kept).
	Summary any
	// ClientBy says how the client side was told apart from the server:
	// ClientBySYN, ClientByJoin, ClientByKinds, ClientByPort or
	// ClientByFirst.
	ClientBy string
	// TLS, when set, says the connection was TLS: whether its frames are
	// the plaintext (decrypted with a key log, or recorded by a
	// TLS-terminating proxy) or it holds none (no key: Undecrypted).
	TLS *TLSInfo
}

// How a flow's client side was decided, most certain first.
const (
	ClientBySYN   = "syn"         // it sent the connection's SYN
	ClientByJoin  = "join"        // it sent a login frame (Hint Opens; reprise: a join)
	ClientByKinds = "frame kinds" // more of its frames are of client→server kinds (Hints)
	ClientByPort  = "server port" // the other side used --server-port
	ClientByFirst = "first sender (a guess: nothing else told)"
	ClientByHello = "TLS ClientHello" // it sent the ClientHello
)

// Duration is End minus Start.
func (f *Flow) Duration() time.Duration { return f.End.Sub(f.Start) }

// String names the flow as "tcp 10.0.0.1:5000 -> 10.0.0.2:7400".
func (f *Flow) String() string {
	return fmt.Sprintf("%s %s -> %s", f.Transport, f.Client, f.Server)
}

// Capture is what a capture file held.
type Capture struct {
	Path string
	// Packets counts the packet records read from the file.
	Packets int
	// Flows are the flows that carried protocol frames, by start time.
	Flows []*Flow
	// Warnings say what was skipped or could not be read.
	Warnings []string
}

// Longest returns the flow with the longest duration among those with at
// least one client frame (ties: more client frames, then the earlier one),
// or nil if there is none. It is the default script for a replay.
func (c *Capture) Longest() *Flow {
	var best *Flow
	for _, f := range c.Flows {
		if f.ClientCount == 0 {
			continue
		}
		if best == nil || f.Duration() > best.Duration() ||
			(f.Duration() == best.Duration() && f.ClientCount > best.ClientCount) {
			best = f
		}
	}
	return best
}

// Defaults for Options.
const (
	// DefaultMaxPacket caps a record's captured length: libpcap's largest
	// snap length.
	DefaultMaxPacket = 256 << 10
	// DefaultMaxMemory caps what reading one file holds: frames kept,
	// per-flow state and TCP reassembly buffers (--max-memory).
	DefaultMaxMemory = 512 << 20
)

// Options tune ReadFile. The zero value uses the defaults.
type Options struct {
	// ServerPort is the server's well-known port, used to tell the client
	// side of a flow when neither a SYN nor its frames say it (0: none).
	ServerPort uint16
	// Framer cuts the protocol's frames out of the flows' payloads and
	// tells their senders apart (internal/profile has each protocol's).
	// Without one, every flow's payloads are kept as they came, one Frame
	// per packet (TCP payloads in stream order, datagrams), for a
	// profile to cut later.
	Framer Framer
	// MaxMemory caps what reading holds: half for frames kept and
	// per-flow state, past which reading stops with a *MemoryError naming
	// the packet, half for TCP reassembly buffers, past which out-of-order
	// data is given up sooner (default DefaultMaxMemory, 512 MiB).
	MaxMemory int64
	// MaxPacket caps a record's captured length (default 256 KiB).
	MaxPacket int
	// Select, if set, says which flows keep their frames (by their two
	// endpoints, either order); the others are found and counted
	// (ClientCount, ServerCount) but hold none, so a replay of one flow
	// holds that flow, not the file.
	Select func(a, b netip.AddrPort) bool
	// KeyLog holds TLS secrets (SSLKEYLOGFILE lines): the TLS flows it
	// has secrets for are decrypted and read as their plaintext. Secrets
	// in the capture's own decryption secrets blocks (pcapng) are used
	// too.
	KeyLog *KeyLog
	// Summarize, when set, keeps no frames: each flow gets a Summary,
	// gathered as it is read and settled when its connection ends, so
	// reading holds what the Summarizer keeps per flow ended (only with
	// a Framer).
	Summarize Summarizer
}

func (o Options) withDefaults() Options {
	if o.MaxMemory <= 0 {
		o.MaxMemory = DefaultMaxMemory
	}
	if o.MaxPacket <= 0 {
		o.MaxPacket = DefaultMaxPacket
	}
	return o
}

// ReadFile reads a pcap or pcapng file (told apart by its first bytes).
//
// A file that cannot be read from the start returns (nil, err). A file whose
// structure breaks further in (a record over the limits, a bad block) returns
// what was read before the break together with a *FormatError naming the
// packet, so a caller may use a partial capture on purpose. A file cut in the
// middle of its last record (a killed recorder) is not an error: the cut tail
// is reported in Warnings.
func ReadFile(path string, opts Options) (*Capture, error) {
	return ReadFileContext(context.Background(), path, opts)
}

// ReadFileContext is ReadFile that stops when ctx ends (see ReadContext).
func ReadFileContext(ctx context.Context, path string, opts Options) (*Capture, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	defer f.Close()
	// A read blocked on a pipe or FIFO with nothing arriving ends when
	// the file closes.
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	c, err := ReadContext(ctx, f, opts)
	if err != nil && ctx.Err() != nil && c == nil {
		return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx))
	}
	if c != nil {
		c.Path = path
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Read is ReadFile on an io.Reader.
func Read(r io.Reader, opts Options) (*Capture, error) {
	return ReadContext(context.Background(), r, opts)
}

// ReadContext is Read that stops when ctx ends, returning what was read
// so far with an error saying where it stopped.
func ReadContext(ctx context.Context, r io.Reader, opts Options) (*Capture, error) {
	opts = opts.withDefaults()
	src, err := openSource(r, opts.MaxPacket)
	if err != nil {
		return nil, err
	}
	d := newDecoder(opts)
	// Secrets blocks found in the file join the key log as they come:
	// they precede the packets they decrypt.
	src.g.keys = d.keys
	// Packets go through the clock (timestamps wrong by far), then the
	// time-order window (reordered packets), then to the decoder.
	order := &timeOrder{warn: d.warn}
	decode := func(p rawPacket) { d.packet(p) }
	clk := newClock(d.warn)
	out := func(p rawPacket) { order.push(p, decode) }
	flush := func() {
		clk.flush(out)
		order.flush(decode)
	}
	for n := 1; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			flush()
			return d.finish(), fmt.Errorf("stopped after packet %d: %w", n-1, context.Cause(ctx))
		}
		data, ci, lt, note, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			flush()
			c := d.finish()
			if ctx.Err() != nil {
				err = fmt.Errorf("stopped after packet %d: %w", n-1, context.Cause(ctx))
			}
			return c, err
		}
		clk.push(rawPacket{data, ci, lt, n, note}, out)
		if d.memErr != nil {
			// No partial capture: what was read is not what the file holds.
			return nil, d.memErr
		}
	}
	flush()
	if d.memErr != nil {
		return nil, d.memErr
	}
	c := d.finish()
	if d.memErr != nil {
		// The final flush hands on the frames reassembly still held
		// (out-of-order data waiting for a gap): the budget can run out
		// there too, and the frames it refused are not in c.
		return nil, d.memErr
	}
	c.Warnings = append(c.Warnings, src.g.warnings...)
	if t := src.g.tail; t != "" {
		c.Warnings = append(c.Warnings, t)
	}
	return c, nil
}

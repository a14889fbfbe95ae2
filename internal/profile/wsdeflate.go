package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/klauspost/compress/flate"
)

// permessage-deflate (RFC 7692): what a server accepted in its 101, and
// the per-message compression both sides then apply to data messages
// whose first frame has RSV1 set.
//
// Memory is what decides the design, since a fleet holds thousands of
// idle clients: the replayed client compresses every message on its own
// (a stateless deflate, no context kept: always allowed, RFC 7692 §7.1.1
// lets a client drop its context at will), so sending costs no state per
// client; decompressing needs the last 2^server_max_window_bits bytes the
// server sent only when the server keeps its context (no
// server_no_context_takeover), and the decompressor itself is pooled.

// Deflate is the permessage-deflate a server accepted: On false when it
// accepted none.
type Deflate struct {
	On bool
	// ServerNoContext: the server compresses each message on its own
	// (server_no_context_takeover); ClientNoContext likewise for the
	// client's messages.
	ServerNoContext, ClientNoContext bool
	// ServerBits and ClientBits are the LZ77 window sizes (8 to 15;
	// 15 when the answer does not say).
	ServerBits, ClientBits int
}

// String is how inspect and the logs say it: "permessage-deflate
// (server_no_context_takeover, client_max_window_bits=10)", or "none".
func (d Deflate) String() string {
	if !d.On {
		return "none"
	}
	var p []string
	if d.ServerNoContext {
		p = append(p, "server_no_context_takeover")
	}
	if d.ClientNoContext {
		p = append(p, "client_no_context_takeover")
	}
	if d.ServerBits != 15 {
		p = append(p, "server_max_window_bits="+strconv.Itoa(d.ServerBits))
	}
	if d.ClientBits != 15 {
		p = append(p, "client_max_window_bits="+strconv.Itoa(d.ClientBits))
	}
	if len(p) == 0 {
		return "permessage-deflate"
	}
	return "permessage-deflate (" + joinComma(p) + ")"
}

func joinComma(s []string) string {
	var b []byte
	for i, x := range s {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, x...)
	}
	return string(b)
}

// ErrExtension is an extension in a 101 the client cannot speak.
var ErrExtension = errors.New("websocket: the server accepted an extension")

// AcceptedDeflate reads the Sec-WebSocket-Extensions of a server's 101
// head: the permessage-deflate it accepted. Another extension, or
// parameters RFC 7692 does not define, are an error: a client that went
// on would misread every frame.
func AcceptedDeflate(head []byte) (Deflate, error) {
	lines := bytes.Split(bytes.TrimRight(head, "\r\n"), []byte("\r\n"))
	var d Deflate
	for _, l := range lines[1:] {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("Sec-WebSocket-Extensions")) {
			continue
		}
		for ext := range bytes.SplitSeq(v, []byte(",")) {
			ext = bytes.TrimSpace(ext)
			if len(ext) == 0 {
				continue
			}
			params := bytes.Split(ext, []byte(";"))
			name := string(bytes.TrimSpace(params[0]))
			if name != "permessage-deflate" || d.On {
				return Deflate{}, fmt.Errorf("%w %q it was not offered or cannot speak", ErrExtension, ext)
			}
			nd, err := deflateParams(params[1:])
			if err != nil {
				return Deflate{}, err
			}
			d = nd
		}
	}
	return d, nil
}

func deflateParams(params [][]byte) (Deflate, error) {
	d := Deflate{On: true, ServerBits: 15, ClientBits: 15}
	for _, p := range params {
		k, v, hasV := bytes.Cut(bytes.TrimSpace(p), []byte("="))
		k, v = bytes.TrimSpace(k), bytes.Trim(bytes.TrimSpace(v), `"`)
		bits := func() (int, error) {
			if !hasV {
				return 15, nil
			}
			n, err := strconv.Atoi(string(v))
			if err != nil || n < 8 || n > 15 {
				return 0, fmt.Errorf("%w with %s=%q (8 to 15)", ErrExtension, k, v)
			}
			return n, nil
		}
		var err error
		switch string(k) {
		case "server_no_context_takeover":
			d.ServerNoContext = true
		case "client_no_context_takeover":
			d.ClientNoContext = true
		case "server_max_window_bits":
			d.ServerBits, err = bits()
		case "client_max_window_bits":
			d.ClientBits, err = bits()
		default:
			err = fmt.Errorf("%w permessage-deflate with an unknown parameter %q", ErrExtension, k)
		}
		if err != nil {
			return Deflate{}, err
		}
	}
	return d, nil
}

// OffersDeflate reports whether an upgrade request offers
// permessage-deflate.
func OffersDeflate(req []byte) bool {
	for _, l := range bytes.Split(req, []byte("\r\n")) {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Sec-WebSocket-Extensions")) && bytes.Contains(v, []byte("permessage-deflate")) {
			return true
		}
	}
	return false
}

// WithoutExtensions returns the upgrade request with its
// Sec-WebSocket-Extensions offers removed (--ws-deflate off).
func WithoutExtensions(req []byte) []byte {
	lines := bytes.Split(req, []byte("\r\n"))
	out := lines[:0]
	for _, l := range lines {
		k, _, ok := bytes.Cut(l, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Sec-WebSocket-Extensions")) {
			continue
		}
		out = append(out, l)
	}
	return bytes.Join(out, []byte("\r\n"))
}

// deflateTail ends a message's deflate data (RFC 7692 §7.2.2: the sender
// removed it), followed by an empty final block so that the reader ends.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// AppendDeflated appends msg compressed as one permessage-deflate
// message with no context (the data minus its final 00 00 ff ff). With a
// client window under 15 bits it is Huffman-coded only (no back
// references that could reach past the window).
func (d Deflate) AppendDeflated(dst, msg []byte) []byte {
	w := appendWriter{b: dst}
	start := len(dst)
	if d.ClientBits < 15 {
		hw := huffPool.Get().(*flate.Writer)
		hw.Reset(&w)
		hw.Write(msg)
		hw.Flush()
		hw.Reset(nil)
		huffPool.Put(hw)
	} else {
		flate.StatelessDeflate(&w, msg, false, nil) // appends: never fails
	}
	if n := len(w.b); n-start >= 4 && bytes.Equal(w.b[n-4:], deflateTail[:4]) {
		w.b = w.b[:n-4]
	}
	return w.b
}

var huffPool = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.HuffmanOnly)
	return w
}}

// appendWriter is an io.Writer that appends to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Inflater decompresses one direction's compressed messages. It keeps
// the last window of plaintext only when that side keeps its context;
// the decompressor is pooled, so an idle client holds at most the window.
type Inflater struct {
	noContext bool
	size      int
	window    []byte
}

// NewInflater is the inflater of the server's messages (server true) or
// of the client's (inspect reads both).
func (d Deflate) NewInflater(server bool) *Inflater {
	if server {
		return &Inflater{noContext: d.ServerNoContext, size: 1 << d.ServerBits}
	}
	return &Inflater{noContext: d.ClientNoContext, size: 1 << d.ClientBits}
}

var readerPool = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}

// inflateSrc is the compressed message and the tail the sender removed.
type inflateSrc struct {
	bytes.Reader
	tail bytes.Reader
}

func (s *inflateSrc) Read(p []byte) (int, error) {
	if s.Reader.Len() > 0 {
		return s.Reader.Read(p)
	}
	return s.tail.Read(p)
}

func (s *inflateSrc) ReadByte() (byte, error) {
	if s.Reader.Len() > 0 {
		return s.Reader.ReadByte()
	}
	return s.tail.ReadByte()
}

// Inflate appends the plaintext of one compressed message to dst; a
// message that inflates past max bytes is an error (a bomb), as is
// corrupt data.
func (f *Inflater) Inflate(dst, msg []byte, max int) ([]byte, error) {
	max = maxOr(max, DefaultMaxMessage)
	src := &inflateSrc{}
	src.Reader.Reset(msg)
	src.tail.Reset(deflateTail)
	r := readerPool.Get().(io.ReadCloser)
	defer readerPool.Put(r)
	var dict []byte
	if !f.noContext {
		dict = f.window
	}
	if err := r.(flate.Resetter).Reset(src, dict); err != nil {
		return dst, framingErr("permessage-deflate: %v", err)
	}
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst)-start > max {
			return dst[:start], framingErr("permessage-deflate: a message inflates past the maximum %d", max)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return dst[:start], framingErr("permessage-deflate: %v", err)
		}
	}
	if !f.noContext {
		f.keep(dst[start:])
	}
	return dst, nil
}

// keep slides the window over the message's plaintext.
func (f *Inflater) keep(p []byte) {
	if f.window == nil {
		// Its size exactly: a window grown by append would hold twice
		// what it needs (64 KiB a client for a 32 KiB window).
		f.window = make([]byte, 0, min(f.size, max(len(p), 1024)))
	}
	if len(f.window)+len(p) > cap(f.window) && cap(f.window) < f.size {
		w := make([]byte, len(f.window), min(f.size, max(2*cap(f.window), len(f.window)+len(p))))
		copy(w, f.window)
		f.window = w
	}
	if len(p) >= f.size {
		f.window = append(f.window[:0], p[len(p)-f.size:]...)
		return
	}
	if over := len(f.window) + len(p) - f.size; over > 0 {
		n := copy(f.window, f.window[over:])
		f.window = f.window[:n]
	}
	f.window = append(f.window, p...)
}

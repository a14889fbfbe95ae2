package profile

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAcceptedDeflate(t *testing.T) {
	head := func(ext string) []byte {
		h := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		if ext != "" {
			h += "Sec-WebSocket-Extensions: " + ext + "\r\n"
		}
		return []byte(h + "\r\n")
	}
	for _, tc := range []struct {
		ext  string
		want Deflate
		str  string
		err  bool
	}{
		{ext: "", str: "none"},
		{ext: "permessage-deflate", want: Deflate{On: true, ServerBits: 15, ClientBits: 15}, str: "permessage-deflate"},
		// node ws's answer to its own client's default offer
		{ext: "permessage-deflate; client_max_window_bits=15", want: Deflate{On: true, ServerBits: 15, ClientBits: 15}, str: "permessage-deflate"},
		{ext: "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10",
			want: Deflate{On: true, ServerNoContext: true, ClientNoContext: true, ServerBits: 10, ClientBits: 15},
			str:  "permessage-deflate (server_no_context_takeover, client_no_context_takeover, server_max_window_bits=10)"},
		{ext: `permessage-deflate; client_max_window_bits="9"`, want: Deflate{On: true, ServerBits: 15, ClientBits: 9}, str: "permessage-deflate (client_max_window_bits=9)"},
		{ext: "permessage-deflate; server_max_window_bits=16", err: true},
		{ext: "permessage-deflate; mystery", err: true},
		{ext: "x-webkit-deflate-frame", err: true},
		{ext: "permessage-deflate, permessage-deflate", err: true},
	} {
		got, err := AcceptedDeflate(head(tc.ext))
		if (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrExtension)) {
			t.Errorf("%q: error %v, want error %v", tc.ext, err, tc.err)
			continue
		}
		if err == nil && (got != tc.want || got.String() != tc.str) {
			t.Errorf("%q: %+v %q, want %+v %q", tc.ext, got, got, tc.want, tc.str)
		}
	}
}

func TestWithoutExtensions(t *testing.T) {
	req := []byte("GET /x HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nSec-WebSocket-Key: k\r\n\r\n")
	if !OffersDeflate(req) {
		t.Fatal("the offer is not seen")
	}
	got := WithoutExtensions(req)
	if OffersDeflate(got) || string(got) != "GET /x HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: k\r\n\r\n" {
		t.Fatalf("%q", got)
	}
}

// serverDeflater compresses as a server keeping its context would (zlib
// and node ws do): one writer for the connection, a sync flush per
// message, its 00 00 ff ff removed. The standard library's writer, which
// refers back across flushes as zlib does.
type serverDeflater struct {
	w   *stdflate.Writer
	out bytes.Buffer
}

func (s *serverDeflater) msg(t *testing.T, p []byte) []byte {
	t.Helper()
	s.out.Reset()
	if s.w == nil {
		s.w, _ = stdflate.NewWriter(&s.out, 6)
	}
	s.w.Write(p)
	if err := s.w.Flush(); err != nil {
		t.Fatal(err)
	}
	b := s.out.Bytes()
	return append([]byte(nil), b[:len(b)-4]...)
}

func TestInflate(t *testing.T) {
	msgs := [][]byte{
		[]byte(`{"op":"chat","text":"hello there","ts":"1764000000123456789"}`),
		[]byte(`{"op":"chat","text":"hello there","ts":"1764000000123456790"}`), // refers back to the first
		bytes.Repeat([]byte("abcdefgh"), 5000),
		{},
		[]byte(`{"op":"chat","text":"hello there","ts":"1764000000123456791"}`),
	}
	t.Run("context takeover", func(t *testing.T) {
		var s serverDeflater
		in := Deflate{On: true, ServerBits: 15, ClientBits: 15}.NewInflater(true)
		for i, m := range msgs {
			z := s.msg(t, m)
			if i == 1 && len(z) > len(m)/2 {
				t.Errorf("the second message took %d bytes of %d: no back reference to the first", len(z), len(m))
			}
			got, err := in.Inflate(nil, z, 1<<20)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("message %d: %v %q", i, err, trunc(got))
			}
		}
		if len(in.window) != 1<<15 || cap(in.window) != 1<<15 {
			t.Errorf("window %d bytes (capacity %d), want 32 KiB", len(in.window), cap(in.window))
		}
	})
	t.Run("no context", func(t *testing.T) {
		d := Deflate{On: true, ServerNoContext: true, ClientNoContext: true, ServerBits: 15, ClientBits: 15}
		in := d.NewInflater(false)
		for i, m := range msgs {
			z := d.AppendDeflated([]byte("head"), m)
			got, err := in.Inflate([]byte("x"), z[4:], 1<<20)
			if err != nil || !bytes.Equal(got[1:], m) || string(z[:4]) != "head" {
				t.Fatalf("message %d: %v %q", i, err, trunc(got))
			}
			if i == 2 && len(z) > 1000 {
				t.Errorf("40000 repeated bytes compressed to %d", len(z))
			}
		}
		if in.window != nil {
			t.Errorf("a no-context inflater kept %d bytes", len(in.window))
		}
	})
	t.Run("small client window", func(t *testing.T) {
		d := Deflate{On: true, ServerBits: 15, ClientBits: 9}
		z := d.AppendDeflated(nil, msgs[2])
		// A reader whose window is 512 bytes: inflating through a
		// dictionary-less reader proves no reference reaches back past
		// what the message itself holds; the Huffman-only writer makes
		// none at all.
		got, err := d.NewInflater(false).Inflate(nil, z, 1<<20)
		if err != nil || !bytes.Equal(got, msgs[2]) {
			t.Fatalf("%v %d bytes", err, len(got))
		}
	})
	t.Run("bounds", func(t *testing.T) {
		d := Deflate{On: true, ServerBits: 15, ClientBits: 15}
		z := d.AppendDeflated(nil, make([]byte, 100000))
		if _, err := d.NewInflater(true).Inflate(nil, z, 65536); !errors.Is(err, ErrFraming) {
			t.Errorf("a 100000-byte message under a 65536 bound: %v", err)
		}
		if _, err := d.NewInflater(true).Inflate(nil, []byte{0xff, 0xff, 0xff}, 65536); !errors.Is(err, ErrFraming) {
			t.Errorf("corrupt data: %v", err)
		}
	})
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// TestMessagesDeflate: a recorded flow where the 101 accepted
// permessage-deflate is cut into its plaintext messages, both ways, the
// server's with context takeover; RSV1 without it is refused.
func TestMessagesDeflate(t *testing.T) {
	p, err := Lookup("socketio")
	if err != nil {
		t.Fatal(err)
	}
	key := []byte{9, 8, 7, 6}
	req := "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: k\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
	d := Deflate{On: true, ServerBits: 15, ClientBits: 15}
	client := []byte(req)
	client = AppendWSDeflated(client, WSText, d.AppendDeflated(nil, []byte(`40{"user":"rec-user-01"}`)), key)
	client = AppendWSFrame(client, WSText, []byte(`42["join","lobby"]`), key) // a client may leave one uncompressed
	var s serverDeflater
	server := []byte(resp)
	server = AppendWSDeflated(server, WSText, s.msg(t, []byte(`0{"sid":"abc","pingInterval":25000}`)), nil)
	server = AppendWSDeflated(server, WSText, s.msg(t, []byte(`40{"sid":"def"}`)), nil)
	server = AppendWSDeflated(server, WSText, s.msg(t, []byte(`40{"sid":"deg"}`)), nil)
	rec := Recording{Client: split(client, 7), Server: split(server, 5)}
	m := p.Messages(rec)
	if len(m.Dropped) > 0 || !m.Deflate.On {
		t.Fatalf("dropped %v, deflate %v", m.Dropped, m.Deflate)
	}
	var got []string
	for _, x := range append(m.Client, m.Server...) {
		got = append(got, string(x.Bytes))
	}
	want := `40{"user":"rec-user-01"}|42["join","lobby"]|0{"sid":"abc","pingInterval":25000}|40{"sid":"def"}|40{"sid":"deg"}`
	if strings.Join(got, "|") != want {
		t.Fatalf("messages\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	r := p.Inspect("f", m, ScriptOptions{})
	var b strings.Builder
	r.WriteText(&b)
	if !strings.Contains(b.String(), "compression: permessage-deflate negotiated") || strings.Contains(b.String(), "no extension") {
		t.Errorf("inspect:\n%s", b.String())
	}

	rec.Server = split([]byte(strings.Replace(string(server), "Sec-WebSocket-Extensions: permessage-deflate\r\n", "", 1)), 5)
	if m := p.Messages(rec); len(m.Dropped) == 0 || !strings.Contains(fmt.Sprint(m.Dropped), "reserved bits 0x40") {
		t.Errorf("RSV1 with no extension: dropped %v", m.Dropped)
	}
}

// split cuts b into segments of n bytes, as packets would.
func split(b []byte, n int) []Segment {
	var out []Segment
	for i := 0; i < len(b); i += n {
		out = append(out, Segment{Offset: time.Duration(i) * time.Millisecond, Bytes: b[i:min(i+n, len(b))]})
	}
	return out
}

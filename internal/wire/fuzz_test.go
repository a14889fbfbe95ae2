package wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// FuzzParser feeds each input whole, split in two, and one byte at a time:
// all three must give the same frames and the same error, and nothing may
// panic; the same again as a client's stream (FromClient), which must
// never emit a server→client frame. Seeds are in testdata/fuzz/FuzzParser
// and the golden vectors.
func FuzzParser(f *testing.F) {
	for _, v := range vectors() {
		f.Add(v.frame, uint16(len(v.frame)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		for _, fromClient := range []bool{false, true} {
			whole := feedAll(t, [][]byte{data}, fromClient)
			c := int(cut) % (len(data) + 1)
			if got := feedAll(t, [][]byte{data[:c], data[c:]}, fromClient); got != whole {
				t.Fatalf("split at %d: %q, whole: %q", c, got, whole)
			}
			chunks := make([][]byte, len(data))
			for i := range data {
				chunks[i] = data[i : i+1]
			}
			if got := feedAll(t, chunks, fromClient); got != whole {
				t.Fatalf("byte at a time: %q, whole: %q", got, whole)
			}
		}
		// FeedDeliveries reads the same frames, fields and errors as Feed.
		for _, chunks := range [][][]byte{{data}, {data[:int(cut)%(len(data)+1)], data[int(cut)%(len(data)+1):]}} {
			slow, _ := feedFields(chunks, false)
			if fast, _ := feedFields(chunks, true); fast != slow {
				t.Fatalf("FeedDeliveries: %q, Feed: %q", fast, slow)
			}
			if loop, _ := feedVia(chunks, viaNextDeliver); loop != slow {
				t.Fatalf("NextDeliver: %q, Feed: %q", loop, slow)
			}
		}
	})
}

// The ways a caller feeds a stream: Feed; FeedDeliveries; and a loop of
// NextDeliver after Resume, the rest of each chunk through FeedDeliveries
// (the reprise profile's).
const (
	viaFeed = iota
	viaFeedDeliveries
	viaNextDeliver
)

// feedFields parses chunks with Feed or FeedDeliveries (fast) and
// summarises every frame (a deliver's fields in full) and the error, with
// how many deliver frames took the shortcut.
func feedFields(chunks [][]byte, fast bool) (string, int) {
	if fast {
		return feedVia(chunks, viaFeedDeliveries)
	}
	return feedVia(chunks, viaFeed)
}

// feedVia is feedFields fed one of the three ways.
func feedVia(chunks [][]byte, via int) (string, int) {
	p := Parser{MaxFrame: 4096}
	var out strings.Builder
	shortcut := 0
	deliver := func(d *Deliver) {
		shortcut++
		fmt.Fprintf(&out, "deliver %d %v %d %q %q;", d.Mode, d.HasTrace, d.Trace, d.User, d.Payload)
	}
	fn := func(f *Frame) error {
		if f.Type == TypeDeliver {
			fmt.Fprintf(&out, "deliver %d %v %d %q %q;", f.Mode, f.HasTrace, f.Trace, f.User, f.Payload)
		} else {
			fmt.Fprintf(&out, "%s %d;", f.Type, f.Size)
		}
		return nil
	}
	for _, c := range chunks {
		var err error
		switch via {
		case viaFeed:
			err = p.Feed(c, fn)
		case viaFeedDeliveries:
			err = p.FeedDeliveries(c, deliver, fn)
		default:
			if c, err = p.Resume(c, fn); err == nil {
				var d Deliver
				for n := p.NextDeliver(c, &d); n > 0; n = p.NextDeliver(c, &d) {
					deliver(&d)
					c = c[n:]
				}
				if len(c) > 0 {
					err = p.FeedDeliveries(c, deliver, fn)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(&out, "|%v", err)
			break
		}
	}
	fmt.Fprintf(&out, "|offset %d", p.Offset())
	return out.String(), shortcut
}

// feedAll parses chunks with a small max frame and summarises the outcome
// as a string: each frame's type and re-encoded size, then the error.
func feedAll(t *testing.T, chunks [][]byte, fromClient bool) string {
	p := Parser{MaxFrame: 4096, FromClient: fromClient}
	var out []byte
	for _, c := range chunks {
		err := p.Feed(c, func(f *Frame) error {
			out = append(out, byte(f.Type), byte(len(f.Payload)))
			if fromClient && !f.Type.FromClient() {
				t.Fatalf("a client's stream gave a %s frame", f.Type)
			}
			if f.Size < HeaderSize || f.Size > 4096+LenSize {
				t.Fatalf("frame size %d", f.Size)
			}
			if f.Type == TypeSend {
				f.Targets(func(id []byte) {
					if len(id) == 0 || len(id) > MaxIDLen {
						t.Fatalf("bad target length %d", len(id))
					}
				})
			}
			return nil
		})
		if err != nil {
			var werr *Error
			if !errors.As(err, &werr) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return string(out) + "|" + werr.Code.String() + "@" + string(rune(werr.Offset))
		}
	}
	if p.Buffered() > 4096+HeaderSize {
		t.Fatalf("buffered %d bytes", p.Buffered())
	}
	return string(out)
}

// FuzzDatagram: any datagram is either split into a frame that decodes or
// refused, without panicking.
func FuzzDatagram(f *testing.F) {
	f.Add(AppendHeartbeat(AppendDatagram(nil, 1), 2))
	f.Add(AppendJoin(AppendDatagram(nil, 0), "room", "user", nil, 20))
	f.Fuzz(func(t *testing.T, d []byte) {
		_, fr, err := SplitDatagram(d, 4096)
		if err != nil {
			return
		}
		var frame Frame
		if n, err := Decode(fr, 4096, &frame); err == nil && n != len(fr) {
			t.Fatalf("decoded %d of %d", n, len(fr))
		}
	})
}

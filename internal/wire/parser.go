package wire

import (
	"encoding/binary"
	"errors"
)

// keepPending is the largest partial-frame buffer a Parser keeps between
// frames; a larger one is dropped once its frame is done, so one big frame
// does not pin memory on an otherwise idle connection.
const keepPending = 4 << 10

// Parser cuts a byte stream into frames, however reads split it: whole
// frames in a read are decoded in place without copying, and only a frame
// cut by the end of a read is buffered, never more than its length field
// (checked against MaxFrame before anything is buffered).
type Parser struct {
	MaxFrame int // cap on a frame's length field; 0 means DefaultMaxFrame
	// FromClient says the stream comes from a client: a server→client type
	// (0x81–0x86) is refused as unknown_type from its header, as an
	// undefined type is, before any of its body is read.
	FromClient bool
	offset     int64 // stream offset of data[0] in the current Feed
	pending    []byte
	frame      Frame
	deliver    Deliver
}

// Offset is how many bytes of the stream the parser has consumed.
func (p *Parser) Offset() int64 { return p.offset + int64(len(p.pending)) }

// Buffered is how many bytes of a partial frame the parser holds.
func (p *Parser) Buffered() int { return len(p.pending) }

// Held is the memory the parser holds for a partial frame (the capacity of
// its buffer), which may exceed Buffered.
func (p *Parser) Held() int { return cap(p.pending) }

// PartialStart is the stream offset of the partial frame's first byte (of
// the frame Buffered counts); it changes when a new partial frame begins.
func (p *Parser) PartialStart() int64 { return p.offset }

func (p *Parser) maxFrame() int {
	if p.MaxFrame <= 0 {
		return DefaultMaxFrame
	}
	return p.MaxFrame
}

// Feed parses data and calls fn with each whole frame, in order. The Frame
// and its slices are valid only during the call. Feed stops at the first
// protocol error (an *Error, with the frame's stream offset) or the first
// error fn returns; the stream cannot be resumed after a protocol error.
func (p *Parser) Feed(data []byte, fn func(*Frame) error) error {
	return p.FeedDeliveries(data, nil, fn)
}

// FeedDeliveries is Feed with a shortcut for the frame a fleet client
// reads most: a whole, well-formed deliver frame within MaxFrame goes to
// deliver, decoded in one pass, and no Frame is built for it. Every other
// frame goes to fn as with Feed, and so does a deliver frame the shortcut
// does not read (a partial one once whole; a malformed one fails as with
// Feed). A nil deliver is Feed. The Deliver is valid only during the call.
func (p *Parser) FeedDeliveries(data []byte, deliver func(*Deliver), fn func(*Frame) error) error {
	if len(p.pending) > 0 {
		var err error
		if data, err = p.completePending(data, fn); err != nil || len(p.pending) > 0 {
			return err
		}
	}
	for len(data) > 0 {
		if deliver != nil {
			if data = p.deliveries(data, deliver); len(data) == 0 {
				break
			}
		}
		n, err := p.peek(data)
		if err != nil {
			return err
		}
		if n == 0 || n > len(data) {
			p.pending = append(p.pending, data...)
			return nil
		}
		if err := p.emit(data[:n], fn); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Resume completes a partial frame held from an earlier call with the
// first bytes of data, handing it to fn once whole, and returns the rest
// of data (nothing while the frame is still partial). With nothing held
// it returns data.
func (p *Parser) Resume(data []byte, fn func(*Frame) error) ([]byte, error) {
	if len(p.pending) == 0 {
		return data, nil
	}
	rest, err := p.completePending(data, fn)
	if err != nil || len(p.pending) > 0 {
		return nil, err
	}
	return rest, nil
}

// NextDeliver is the shortcut of FeedDeliveries one frame at a time, for
// a caller that loops itself: when no partial frame is held and data
// starts with a whole, well-formed deliver frame within MaxFrame, it
// decodes it into d (its slices point into data), counts it as consumed
// and returns its size; otherwise it returns 0, and data is for
// FeedDeliveries.
func (p *Parser) NextDeliver(data []byte, d *Deliver) int {
	n, h := p.NextDeliverHead(data)
	if n == 0 {
		return 0
	}
	user := DeliverUserAt + int(h.UserLen)
	d.Mode, d.HasTrace, d.Trace = h.Mode, h.HasTrace, h.Trace
	d.User = data[DeliverUserAt:user:user]
	if h.HasTrace {
		user += 8
	}
	d.Payload = data[user:n]
	return n
}

// DeliverUserAt is where the sender's id starts in a deliver frame:
// frame[DeliverUserAt : DeliverUserAt+DeliverHead.UserLen].
const DeliverUserAt = HeaderSize + 2

// DeliverHead is what a receiver counts a delivery by: its mode and
// stamp, and the length of the sender's id (at DeliverUserAt). The
// payload is not sliced: the fleet never reads it.
type DeliverHead struct {
	Mode     Mode
	HasTrace bool
	UserLen  uint8
	Trace    int64 // sender's clock, Unix nanoseconds; 0 unless HasTrace
}

// NextDeliverHead is NextDeliver without the slices, returned by value
// (in registers: no stores through a pointer, no write barriers): the
// fleet's hottest decode. Every bound is checked once, against the
// frame's length; on 0, data is for FeedDeliveries.
func (p *Parser) NextDeliverHead(data []byte) (int, DeliverHead) {
	if len(data) < DeliverUserAt || Type(data[LenSize]) != TypeDeliver || len(p.pending) > 0 {
		return 0, DeliverHead{}
	}
	n := LenSize + int(binary.BigEndian.Uint32(data))
	flags, idLen := data[HeaderSize], int(data[HeaderSize+1])
	mode, hasTrace := Mode(flags&modeMask), flags&flagTrace != 0
	body := DeliverUserAt + idLen
	if hasTrace {
		body += 8
	}
	if body > n || n > len(data) || n > p.maxFrame()+LenSize || !mode.Valid() || flags&^(modeMask|flagTrace) != 0 || idLen == 0 || idLen > MaxIDLen {
		return 0, DeliverHead{}
	}
	h := DeliverHead{Mode: mode, HasTrace: hasTrace, UserLen: uint8(idLen)}
	if hasTrace {
		h.Trace = int64(binary.BigEndian.Uint64(data[body-8 : body]))
	}
	p.offset += int64(n)
	return n, h
}

// deliveries hands deliver the whole, well-formed deliver frames within
// MaxFrame at the start of data, and returns the rest: the shortcut's
// loop, with the limit and the offset in registers.
func (p *Parser) deliveries(data []byte, deliver func(*Deliver)) []byte {
	d := &p.deliver // in the Parser: deliver may keep the pointer, so a local would escape
	limit, off := p.maxFrame()+LenSize, p.offset
	for len(data) > HeaderSize && Type(data[LenSize]) == TypeDeliver {
		n := LenSize + int(binary.BigEndian.Uint32(data))
		if n <= HeaderSize || n > len(data) || n > limit || !d.read(data[HeaderSize:n]) {
			break
		}
		off += int64(n)
		deliver(d)
		data = data[n:]
	}
	p.offset = off
	return data
}

// completePending moves bytes from data into the partial frame until it is
// whole, emits it, and returns what is left of data.
func (p *Parser) completePending(data []byte, fn func(*Frame) error) ([]byte, error) {
	if len(p.pending) < HeaderSize {
		k := min(HeaderSize-len(p.pending), len(data))
		p.pending = append(p.pending, data[:k]...)
		data = data[k:]
	}
	n, err := p.peek(p.pending)
	if err != nil || n == 0 {
		return nil, err
	}
	k := min(n-len(p.pending), len(data))
	p.pending = append(p.pending, data[:k]...)
	data = data[k:]
	if len(p.pending) < n {
		return nil, nil
	}
	err = p.emit(p.pending, fn)
	if cap(p.pending) > keepPending {
		p.pending = nil
	} else {
		p.pending = p.pending[:0]
	}
	return data, err
}

// peek checks the header at the start of b and returns the frame's total
// size, or 0 if b is too short to know the type yet. Size and type are
// checked before a single body byte is buffered.
func (p *Parser) peek(b []byte) (int, error) {
	if len(b) < HeaderSize {
		if len(b) >= LenSize {
			if err := checkLen(binary.BigEndian.Uint32(b), p.maxFrame()); err != nil {
				return 0, p.located(err, b)
			}
		}
		return 0, nil
	}
	if err := checkLen(binary.BigEndian.Uint32(b), p.maxFrame()); err != nil {
		err.Type = Type(b[LenSize])
		return 0, p.located(err, b)
	}
	if t := Type(b[LenSize]); !t.Known() {
		return 0, p.located(&Error{Code: ErrUnknownType, Type: t, Detail: "type byte 0x" + hex2(byte(t)) + " is not defined"}, b)
	} else if p.FromClient && !t.FromClient() {
		return 0, p.located(&Error{Code: ErrUnknownType, Type: t, Detail: t.String() + " frames travel server to client only"}, b)
	}
	return FrameLen(b), nil
}

func (p *Parser) emit(whole []byte, fn func(*Frame) error) error {
	if err := DecodeBody(Type(whole[LenSize]), whole[HeaderSize:], &p.frame); err != nil {
		var werr *Error
		if errors.As(err, &werr) {
			return p.located(werr, whole)
		}
		return err
	}
	p.offset += int64(len(whole))
	return fn(&p.frame)
}

func (p *Parser) located(err *Error, b []byte) *Error {
	err.Offset = p.offset
	err.Snippet = snippet(b)
	return err
}

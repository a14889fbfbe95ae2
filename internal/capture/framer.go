package capture

import (
	"errors"
	"time"
)

// ErrUnusable marks a capture, or a chosen flow, that a replay cannot
// play: every command that reads one exits with the same code for it.
var ErrUnusable = errors.New("unusable capture")

// A Framer cuts one protocol's frames out of the payloads the reader
// hands it (Options.Framer): each direction of a TCP connection as its
// bytes come, in stream order, with gaps marked; each datagram whole. It
// is the protocol's (internal/profile): this package knows no protocol.
// Without one a flow's frames are its payloads as they came, one per
// packet.
type Framer interface {
	// Stream starts cutting one direction of a TCP connection.
	Stream() StreamCutter
	// Datagram cuts a datagram into its frames (copies are not needed:
	// they are made of what is kept); ok false says it is not one of the
	// protocol's.
	Datagram(b []byte) (frames [][]byte, ok bool)
	// Hint says what a frame tells of its sender's side.
	Hint(frame []byte) Hint
	// Reorder puts one direction's frames of a UDP flow back in the
	// order their sender sent them, when the frames say it (datagrams may
	// be reordered on the way or in the capture; a stream's bytes cannot
	// be). A frame keeps the time of the slot it moves to. It returns how
	// many frames moved.
	Reorder(frames []Frame) int
}

// A StreamCutter cuts one direction of a TCP connection into frames. It
// is told the stream's bytes as they come (Feed), that bytes the capture
// does not hold came before the next ones (Gap: whatever frame was in
// progress is gone, and it must realign), and that no more will come
// (End). It cuts through the Stream it is given.
type StreamCutter interface {
	// FromStart says the stream is read from its first byte (its SYN was
	// seen), before any Feed: frames start at once.
	FromStart()
	// Feed takes the bytes that just joined s.Pending().
	Feed(s Stream, data []byte)
	Gap()
	// End cuts what it can of what is pending; what it leaves is
	// dropped.
	End(s Stream)
	// Resynced says the stream had to be realigned on a frame boundary
	// (Flow.Resynced).
	Resynced() bool
}

// Stream is one direction of a TCP connection as its StreamCutter sees
// it: the bytes fed and not yet cut, from stream offset Offset.
type Stream interface {
	Pending() []byte
	Offset() int64
	// Emit says the first n pending bytes are a frame.
	Emit(n int)
	// Skip drops the first n pending bytes as not frames, with a note;
	// Drop drops them without one (the cutter noted why).
	Skip(n int)
	Drop(n int)
	// Packet is the number of the packet that brought the byte at
	// Offset; Name names the direction ("10.0.0.1:5000 -> 10.0.0.2:7400").
	Packet() int
	Name() string
	// Note adds a note to the flow.
	Note(msg string)
}

// Hint is what a frame tells of its sender, to tell a flow's client side
// when no SYN does (Flow.ClientBy).
type Hint uint8

// Hints.
const (
	HintNone   Hint = iota
	FromClient      // a client→server kind
	FromServer      // a server→client kind
	Opens           // a client's login (a join): the surest
)

// A Summarizer gathers what a summary of a capture needs of its frames
// while it is read, in place of the frames (Options.Summarize): the
// protocol's inspection (internal/profile) knows what that is; the reader
// only hands each frame over. A flow's two directions get a Tally each;
// when the flow ends they become its Summary.
type Summarizer interface {
	// Tally starts one direction of a flow.
	Tally() Tally
	// Summarize makes the flow's Summary of its directions' tallies.
	Summarize(f *Flow, client, server Tally) any
}

// A Tally takes one direction's frames in order, each as it is cut: its
// time (never before the one before) and bytes (valid only during the
// call). While its flow lives, each frame given is charged against the
// read's memory budget (markCost: a time, a size and a kind).
type Tally interface {
	Add(t time.Time, b []byte)
}

package capture

import (
	"errors"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// ErrUnusable marks a capture, or a chosen flow, that a replay cannot
// play: every command that reads one exits with the same code for it.
var ErrUnusable = errors.New("unusable capture")

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
// time (never before the one before), kind and bytes (valid only during
// the call). While its flow lives, each frame given is charged against
// the read's memory budget (markCost: a time, a size and a kind).
type Tally interface {
	Add(t time.Time, typ wire.Type, b []byte)
}

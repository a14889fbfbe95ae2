package capture

import (
	"io"

	"github.com/reprise-harness/reprise/internal/wire"
)

// A capture's inspection is internal/profile's, which imports this
// package: the tests here reach it through Inspection, which
// inspection_test.go (package capture_test) sets.
var Inspection struct {
	// Summary is profile.SummaryOf; Write is profile.WriteCaptureSummary.
	Summary func(c *Capture) interface {
		WriteText(io.Writer) error
		WriteJSON(io.Writer) error
	}
	Write      func(w io.Writer, c *Capture, only int, warnings []string, asJSON bool) error
	Summarizer func() Summarizer
	// Usable is profile.FlowUsable.
	Usable func(f *Flow) (bool, string)
	// Printed is what inspect prints of a flow's Summary (users, rooms
	// and rates), in bytes held.
	Printed func(summary any) int64
	// Framer is profile.RepriseFramer: the captures here are of reprise
	// frames, which the profile cuts.
	Framer func(maxFrame int) Framer
}

// rep are read options as the reprise profile reads: its framer, and its
// port unless o names one.
func rep(o Options) Options {
	if o.Framer == nil {
		o.Framer = Inspection.Framer(0)
	}
	if o.ServerPort == 0 {
		o.ServerPort = wire.DefaultPort
	}
	return o
}

func inspect(c *Capture) interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
} {
	return Inspection.Summary(c)
}

// summarizing are read options as inspect reads: no frames kept.
func summarizing(o Options) Options {
	o = rep(o)
	o.Summarize = Inspection.Summarizer()
	return o
}

// kind is a reprise frame's type.
func kind(f Frame) wire.Type { return wire.Type(f.Bytes[wire.LenSize]) }

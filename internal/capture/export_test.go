package capture

import "io"

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
}

func inspect(c *Capture) interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
} {
	return Inspection.Summary(c)
}

// summarizing are read options as inspect reads: no frames kept.
func summarizing(o Options) Options {
	o.Summarize = Inspection.Summarizer()
	return o
}

package capture_test

import (
	"io"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
)

func init() {
	capture.Inspection.Summary = func(c *capture.Capture) interface {
		WriteText(io.Writer) error
		WriteJSON(io.Writer) error
	} {
		return profile.SummaryOf(c)
	}
	capture.Inspection.Write = profile.WriteCaptureSummary
	capture.Inspection.Summarizer = func() capture.Summarizer { return &profile.Summarizer{} }
	capture.Inspection.Usable = profile.FlowUsable
	capture.Inspection.Printed = profile.SummaryPrinted
	capture.Inspection.Framer = profile.RepriseFramer
}

package fleet

import (
	"fmt"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/session"
)

// readCapture reads the capture and returns the chosen flow's client
// frames as script input, its transport and notes on what was skipped.
// flow < 0 picks the longest flow.
func readCapture(path string, flow int) ([]session.Frame, string, []string, error) {
	c, err := capture.ReadFile(path, capture.Options{})
	if err != nil {
		if c == nil || len(c.Flows) == 0 {
			return nil, "", nil, fmt.Errorf("read capture: %w", err)
		}
		// A structure break late in the file: use what was read, say so.
		c.Warnings = append(c.Warnings, "capture cut short: "+err.Error())
	}
	var fl *capture.Flow
	switch {
	case flow < 0:
		fl = c.Longest()
		if fl == nil {
			return nil, "", nil, fmt.Errorf("read capture %s: no flow with client frames", path)
		}
	case flow >= len(c.Flows):
		return nil, "", nil, fmt.Errorf("%w: --flow %d: the capture has %d flows (see replay inspect)", ErrBadConfig, flow, len(c.Flows))
	default:
		fl = c.Flows[flow]
	}
	notes := append([]string(nil), c.Warnings...)
	notes = append(notes, fl.Notes...)
	return FromFlow(fl), string(fl.Transport), notes, nil
}

// FromFlow is a capture flow's client frames as script input.
func FromFlow(fl *capture.Flow) []session.Frame {
	out := make([]session.Frame, len(fl.ClientFrames))
	for i, fr := range fl.ClientFrames {
		out[i] = session.Frame{Offset: fr.Offset, Bytes: fr.Bytes}
	}
	return out
}

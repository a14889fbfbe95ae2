package fleet

import (
	"fmt"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/session"
)

// recorded is what the fleet takes from a capture: the chosen flow's client
// frames as script input, its transport, its length and notes on what was
// skipped.
type recorded struct {
	frames    []session.Frame
	transport string
	end       time.Duration
	notes     []string
}

// readCapture reads the capture's flow (flow < 0 picks the longest).
func readCapture(path string, flow int) (recorded, error) {
	c, err := capture.ReadFile(path, capture.Options{})
	if err != nil {
		if c == nil || len(c.Flows) == 0 {
			return recorded{}, fmt.Errorf("read capture: %w", err)
		}
		// A structure break late in the file: use what was read, say so.
		c.Warnings = append(c.Warnings, "capture cut short: "+err.Error())
	}
	var fl *capture.Flow
	switch {
	case flow < 0:
		fl = c.Longest()
		if fl == nil {
			return recorded{}, fmt.Errorf("read capture %s: no flow with client frames", path)
		}
	case flow >= len(c.Flows):
		return recorded{}, fmt.Errorf("%w: --flow %d: the capture has %d flows (see replay inspect)", ErrBadConfig, flow, len(c.Flows))
	default:
		fl = c.Flows[flow]
	}
	notes := append([]string(nil), c.Warnings...)
	notes = append(notes, fl.Notes...)
	return recorded{FromFlow(fl), string(fl.Transport), fl.Duration(), notes}, nil
}

// FromFlow is a capture flow's client frames as script input.
func FromFlow(fl *capture.Flow) []session.Frame {
	out := make([]session.Frame, len(fl.ClientFrames))
	for i, fr := range fl.ClientFrames {
		out[i] = session.Frame{Offset: fr.Offset, Bytes: fr.Bytes}
	}
	return out
}

package fleet

import (
	"fmt"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
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
func readCapture(path string, flow int, opts capture.Options) (recorded, error) {
	c, err := capture.ReadFile(path, opts)
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
			_, err := c.Usable()
			return recorded{}, fmt.Errorf("read capture %s: %w", path, err)
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

// readRecording reads the capture raw (no reprise framing) and returns the
// chosen flow's payloads, both ways, for a profile to cut into messages.
// opts.ServerPort tells the client side of a flow without a SYN.
func readRecording(path string, flow int, opts capture.Options) (profile.Recording, []string, error) {
	c, err := capture.ReadFile(path, opts)
	if err != nil {
		if c == nil || len(c.Flows) == 0 {
			return profile.Recording{}, nil, fmt.Errorf("read capture: %w", err)
		}
		c.Warnings = append(c.Warnings, "capture cut short: "+err.Error())
	}
	fl, err := pickFlow(c, path, flow)
	if err != nil {
		return profile.Recording{}, nil, err
	}
	notes := append(append([]string(nil), c.Warnings...), fl.Notes...)
	return RecordingOf(fl), notes, nil
}

// pickFlow is flow number flow of c, or its longest with flow < 0.
func pickFlow(c *capture.Capture, path string, flow int) (*capture.Flow, error) {
	switch {
	case flow < 0:
		if fl := c.Longest(); fl != nil {
			return fl, nil
		}
		return nil, fmt.Errorf("read capture %s: no flow with client data", path)
	case flow >= len(c.Flows):
		return nil, fmt.Errorf("%w: --flow %d: the capture has %d flows (see replay inspect)", ErrBadConfig, flow, len(c.Flows))
	}
	return c.Flows[flow], nil
}

// RecordingOf is a raw capture flow as a profile's recording.
func RecordingOf(fl *capture.Flow) profile.Recording {
	seg := func(frames []capture.Frame) []profile.Segment {
		out := make([]profile.Segment, len(frames))
		for i, fr := range frames {
			out[i] = profile.Segment{Offset: fr.Offset, Bytes: fr.Bytes}
		}
		return out
	}
	return profile.Recording{Client: seg(fl.ClientFrames), Server: seg(fl.ServerFrames)}
}

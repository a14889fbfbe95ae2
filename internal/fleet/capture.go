package fleet

import (
	"fmt"
	"net/netip"
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

// choice is the flow to replay: by index (< 0: the longest), or by its
// recorded client's address when client is valid.
type choice struct {
	index  int
	client netip.AddrPort
}

// readCapture reads the chosen flow of the capture.
func readCapture(path string, flow choice, opts capture.Options) (recorded, error) {
	c, fl, err := readFlow(path, flow, opts, func(c *capture.Capture) error {
		_, err := c.Usable()
		return fmt.Errorf("read capture %s: %w", path, err)
	})
	if err != nil {
		return recorded{}, err
	}
	notes := append([]string(nil), c.Warnings...)
	notes = append(notes, fl.Notes...)
	return recorded{FromFlow(fl), string(fl.Transport), fl.Duration(), notes}, nil
}

// readFlow reads the capture in two passes: an index pass that keeps no
// frames finds the flows and picks one (flow < 0: the longest; none
// gives noFlow's error), then a pass keeps that flow's frames only, so a
// replay holds its script, not the file.
func readFlow(path string, flow choice, opts capture.Options, noFlow func(*capture.Capture) error) (*capture.Capture, *capture.Flow, error) {
	index := opts
	index.Select = func(a, b netip.AddrPort) bool { return false }
	c, err := readPartial(path, index)
	if err != nil {
		return nil, nil, err
	}
	if flow.client.IsValid() {
		var of []*capture.Flow
		for _, f := range c.Flows {
			if f.Client == flow.client {
				of = append(of, f)
			}
		}
		c.Flows = of
		if len(of) == 0 {
			return nil, nil, fmt.Errorf("%w: --client %s: no flow of the capture has this client (see replay inspect)", ErrBadConfig, flow.client)
		}
		flow.index = -1
	}
	if flow.index < 0 && c.Longest() == nil {
		return nil, nil, noFlow(c)
	}
	pick, err := pickFlow(c, path, flow.index)
	if err != nil {
		return nil, nil, err
	}
	same := func(a, b netip.AddrPort) bool {
		return (a == pick.Client && b == pick.Server) || (a == pick.Server && b == pick.Client)
	}
	opts.Select = same
	c, err = readPartial(path, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range c.Flows {
		// A port reused gives flows with the same endpoints: the start
		// tells them apart.
		if same(f.Client, f.Server) && f.Start.Equal(pick.Start) {
			return c, f, nil
		}
	}
	return nil, nil, fmt.Errorf("read capture %s: flow %s not found again on the second pass", path, pick)
}

// readPartial reads a capture; a structure break late in the file gives
// what was read before it, with a warning saying so.
func readPartial(path string, opts capture.Options) (*capture.Capture, error) {
	c, err := capture.ReadFile(path, opts)
	if err != nil {
		if c == nil || len(c.Flows) == 0 {
			return nil, fmt.Errorf("read capture: %w", err)
		}
		c.Warnings = append(c.Warnings, "capture cut short: "+err.Error())
	}
	return c, nil
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
func readRecording(path string, flow choice, opts capture.Options) (profile.Recording, []string, error) {
	c, fl, err := readFlow(path, flow, opts, func(*capture.Capture) error {
		return fmt.Errorf("read capture %s: no flow with client data", path)
	})
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

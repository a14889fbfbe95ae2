package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/reprise-harness/reprise/internal/capture"
)

// What `replay inspect` and `replay profile check` show of a capture read
// through a profile: the commands ask the profile, whatever its protocol.

// FlowAll is InspectOptions.Flow for every flow (with Frames: the
// longest, the one a replay plays).
const FlowAll = -2

// InspectOptions are what inspect asks of a capture.
type InspectOptions struct {
	// Source's MaxFrame, ServerPort, CaptureMemory and KeyLog read it;
	// Flow is one flow's index or FlowAll.
	Source
	// Frames lists one flow's client frames or messages: what a replay
	// sends. JSON writes JSON rather than text.
	Frames, JSON bool
	// User and Room are the recorded ids when the profile cannot place
	// them (--recorded-user, --recorded-room).
	User, Room string
}

// usage is a bad-configuration error (errors.Is ErrBadConfig: a
// command's usage error) worded as it is, without badf's prefix.
type usage string

func (u usage) Error() string        { return string(u) }
func (u usage) Is(target error) bool { return target == ErrBadConfig }

func usagef(format string, args ...any) error { return usage(fmt.Sprintf(format, args...)) }

// checkFlow refuses a flow the capture of n flows does not have, rather
// than showing another flow.
func checkFlow(flow, n int) error {
	if flow == FlowAll || (flow >= 0 && flow < n) {
		return nil
	}
	if n == 0 {
		return usagef("--flow %d: the capture has no flows", flow)
	}
	return usagef("--flow %d: the capture has %d flow%s (0 to %d)", flow, n, plural(n), n-1)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// WriteInspection writes what inspect shows of the capture at path read
// through p: its flows (or, with Frames, one flow's client frames). The
// reprise profile's capture reader cuts its frames, so its summary
// (kinds, joins, users, rooms, rates) is gathered in one streaming pass
// that keeps no frames; another profile cuts the payloads into its
// messages and reports on each flow. A capture read only in part (ctx
// ended, a break late in the file) shows what was read, then fails.
func (p *Profile) WriteInspection(ctx context.Context, w io.Writer, path string, o InspectOptions) error {
	if !p.reprise {
		if o.Frames {
			return p.writeMessageRows(w, path, o)
		}
		reports, err := p.Reports(path, o)
		if err != nil {
			return err
		}
		return WriteReports(w, reports, o.JSON)
	}
	opts := p.captureOptions(o.Source)
	if !o.Frames {
		opts.Summarize = &Summarizer{}
	}
	c, err := capture.ReadFileContext(ctx, path, opts)
	if c == nil {
		return err
	}
	if ferr := checkFlow(o.Flow, len(c.Flows)); ferr != nil {
		return ferr
	}
	interrupted := err != nil && ctx.Err() != nil
	if o.Frames {
		if werr := writeScript(w, c, o.Flow, o.JSON); werr != nil {
			return werr
		}
	} else {
		var more []string
		if err != nil {
			// Partial capture: show what was read, the break as a warning.
			more = append(more, err.Error())
		}
		only := o.Flow
		if only == FlowAll {
			only = -1
		}
		if werr := WriteCaptureSummary(w, c, only, more, o.JSON); werr != nil {
			return werr
		}
	}
	if interrupted {
		return fmt.Errorf("interrupted: the output covers the packets read before (%w)", err)
	}
	if terr := c.Undecrypted(max(o.Flow, -1)); terr != nil {
		return fmt.Errorf("%s: %w", path, terr)
	}
	if _, uerr := Usable(c); uerr != nil {
		return fmt.Errorf("%s: %w", path, uerr)
	}
	return nil
}

// writeScript lists the reprise frames a replay of one flow sends (flow
// < 0: the longest).
func writeScript(w io.Writer, c *capture.Capture, flow int, asJSON bool) error {
	var fl *capture.Flow
	switch {
	case flow < 0:
		fl = c.Longest()
		if fl == nil {
			_, err := Usable(c)
			return err
		}
		for i, f := range c.Flows {
			if f == fl {
				flow = i
			}
		}
	default:
		fl = c.Flows[flow]
	}
	list := frameListing(fl)
	var err error
	if asJSON {
		err = writeScriptJSON(w, list)
	} else {
		err = writeScriptText(w, fl, flow, list)
	}
	if err != nil {
		return err
	}
	if ok, why := FlowUsable(fl); !ok {
		return fmt.Errorf("%w: flow %d: %s", capture.ErrUnusable, flow, why)
	}
	return nil
}

// Reports reads the capture at path through p and reports on its flows
// with client data (o.Flow: only that one), with what links them: the
// values an HTTP flow's answers hand out that another flow of the same
// client sends, the flows that are one client's, the recorded request
// each of the profile's http steps makes.
func (p *Profile) Reports(path string, o InspectOptions) ([]*Report, error) {
	c, err := p.readChecked(path, o)
	if err != nil {
		return nil, err
	}
	longest := p.Longest(c)
	var out []*Report
	var data []FlowData
	byFlow := map[int]*Report{}
	for i, fl := range c.Flows {
		if len(fl.ClientFrames) == 0 {
			continue
		}
		rec := RecordingOf(fl)
		m := p.Messages(rec)
		d := FlowData{Index: i, Client: fl.Client.String(), Server: fl.Server.String(), Start: fl.Start, HTTP: m.HTTP, Upgrade: m.Upgrade, Msgs: m.Client, Answers: m.Server}
		if m.Upgrade != nil {
			d.Upgraded = UpgradeAnswer(rec)
		}
		data = append(data, d)
		if o.Flow >= 0 && i != o.Flow {
			continue
		}
		r := p.Inspect(flowName(i, fl), m, ScriptOptions{User: o.User, Room: o.Room})
		r.Default = o.Flow < 0 && fl == longest
		byFlow[i] = r
		out = append(out, r)
	}
	links := Links(data)
	for _, l := range links {
		if r := byFlow[l.From]; r != nil {
			r.Links = append(r.Links, l.String()+"; take: "+l.Take())
		}
	}
	for _, g := range ClientGroups(data, links) {
		if r := byFlow[g.Flows[0]]; r != nil {
			r.Notes = append(r.Notes, g.String())
		}
	}
	// Which recorded request each of the profile's http steps makes,
	// on the flows replay would play.
	for _, r := range out {
		if len(r.HTTP) == 0 {
			r.Steps = r.StepMap(data)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no flow with client data", path)
	}
	return out, nil
}

// flowName names flow i of a capture in a profile's report: its number,
// endpoints and, for a TLS flow, what its handshake was.
func flowName(i int, fl *capture.Flow) string {
	name := fmt.Sprintf("#%d %s", i, fl)
	if t := fl.TLS; t != nil {
		name += fmt.Sprintf(" (%s, %s)", t, t.Plaintext)
	}
	return name
}

// readChecked reads the capture for p, as it reads captures, and checks
// o.Flow against it and that what is shown was decrypted.
func (p *Profile) readChecked(path string, o InspectOptions) (*capture.Capture, error) {
	c, err := p.ReadCapture(path, o.KeyLog)
	if c == nil {
		return nil, err
	}
	if err := checkFlow(o.Flow, len(c.Flows)); err != nil {
		return nil, err
	}
	if err := c.Undecrypted(max(o.Flow, -1)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// writeMessageRows lists one flow's client messages as p cuts them
// (o.Flow, default the longest: the one replay plays).
func (p *Profile) writeMessageRows(w io.Writer, path string, o InspectOptions) error {
	c, err := p.readChecked(path, o)
	if err != nil {
		return err
	}
	fl, i := p.Longest(c), -1
	if o.Flow >= 0 {
		fl = c.Flows[o.Flow]
	}
	for j, f := range c.Flows {
		if f == fl {
			i = j
		}
	}
	if fl == nil {
		return fmt.Errorf("%s: no flow with client data", path)
	}
	rows := p.FrameRows(p.Messages(RecordingOf(fl)))
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return WriteFrameRows(w, p.Name, flowName(i, fl), rows)
}

// WriteReports writes reports as text or JSON.
func WriteReports(w io.Writer, reports []*Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for _, r := range reports {
		if err := r.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
)

func init() { subcommands = append(subcommands, newInspectCmd, newProfileCmd) }

// newInspectCmd is `replay inspect FILE [--json] [--profile P] [--frames]`:
// what a capture holds, to choose a flow and loop points, or the frames a
// replay of one flow sends.
func newInspectCmd(st *state) *cobra.Command {
	var (
		asJSON, frames bool
		po             profileOpts
		read           capture.Options
	)
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "show a capture's flows, frames by kind, rates, users, rooms and where the login ends",
		Long: `Show what a capture holds: its flows, frames by kind, rates, users, rooms and
where the login ends, with notes on whatever was mended or skipped. With
--frames, list the client frames of one flow (--flow, default the longest):
the script a replay sends, with offset, kind, size, a short decode and hex.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			prof, err := po.profile()
			if err != nil {
				return err
			}
			if prof.CaptureView() == profile.ViewReports {
				if frames {
					return po.writeFrames(st.stdout, args[0], asJSON)
				}
				reports, err := po.inspect(args[0])
				if err != nil {
					return err
				}
				return writeReports(st.stdout, reports, asJSON)
			}
			// The summary needs no frames: each flow's figures are
			// gathered as it is read and its state released when it ends.
			opts := prof.CaptureOptions(profile.Source{MaxFrame: read.MaxFrame, ServerPort: read.ServerPort, CaptureMemory: read.MaxMemory, KeyLog: po.keyLog})
			opts.Summarize = !frames
			if !frames {
				softHeapLimit(opts.MaxMemory / 2)
			}
			c, err := capture.ReadFileContext(cmd.Context(), args[0], opts)
			if c == nil {
				return err
			}
			if ferr := po.checkFlow(len(c.Flows)); ferr != nil {
				return ferr
			}
			interrupted := err != nil && cmd.Context().Err() != nil
			if frames {
				if werr := writeFrames(st, c, po.flow, asJSON); werr != nil {
					return werr
				}
			} else {
				var more []string
				if err != nil {
					// Partial capture: show what was read, the break as a warning.
					more = append(more, err.Error())
				}
				only := po.flow
				if only == flowAll {
					only = -1
				}
				if werr := capture.WriteSummary(st.stdout, c, only, more, asJSON); werr != nil {
					return werr
				}
			}
			if interrupted {
				return fmt.Errorf("interrupted: the output covers the packets read before (%w)", err)
			}
			if terr := c.Undecrypted(max(po.flow, -1)); terr != nil {
				return fmt.Errorf("%s: %w", args[0], terr)
			}
			if _, uerr := c.Usable(); uerr != nil {
				return fmt.Errorf("%s: %w", args[0], uerr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON instead of text")
	cmd.Flags().BoolVar(&frames, "frames", false, "list the client frames of one flow (--flow, default the longest): what a replay sends")
	po.flags(cmd, false)
	addReadFlags(cmd, &read)
	return cmd
}

// softHeapLimit asks the Go runtime to keep the heap under limit bytes
// (unless GOMEMLIMIT says otherwise): inspect holds a few hundred bytes
// per flow and makes short-lived garbage per packet, and at the default
// GC target the heap doubles what it holds before collecting (300,000
// flows: 368 MB peak RSS, 277 MB with this). A soft limit: past it the
// GC works harder (at most about half the CPU), reading never fails on
// it; --max-memory's budget is what stops a read.
func softHeapLimit(limit int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
	}
}

// addReadFlags registers the capture reading flags.
func addReadFlags(cmd *cobra.Command, opts *capture.Options) {
	cmd.Flags().IntVar(&opts.MaxFrame, "max-frame", 0, "largest frame to read from the capture, in bytes (0: 65536, the relay's default --max-frame)")
	cmd.Flags().Uint16Var(&opts.ServerPort, "server-port", capture.DefaultServerPort, "the server's port, to tell a flow's client side when neither a SYN, a join nor the frame kinds do")
	opts.MaxMemory = capture.DefaultMaxMemory
	cmd.Flags().Var(mibValue{&opts.MaxMemory}, "max-memory", memoryUsage)
}

// memoryUsage is --max-memory's help, for inspect and replay alike.
const memoryUsage = "most memory reading the capture may hold, in MiB: frames, per-flow state and TCP reassembly buffers; past it the read stops with an error naming the packet"

// mibValue is a byte count given in MiB on the command line.
type mibValue struct{ b *int64 }

func (v mibValue) String() string {
	if v.b == nil {
		return "0"
	}
	return strconv.FormatInt(*v.b>>20, 10)
}

func (v mibValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > 1<<30 {
		return fmt.Errorf("%q is not a size in MiB (1 to %d)", s, 1<<30)
	}
	*v.b = n << 20
	return nil
}

func (mibValue) Type() string { return "MiB" }

// addrPortValue is an ADDR:PORT flag, parsed when set.
type addrPortValue struct{ a *netip.AddrPort }

func (v addrPortValue) String() string {
	if v.a == nil || !v.a.IsValid() {
		return ""
	}
	return v.a.String()
}

func (v addrPortValue) Set(s string) error {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		return fmt.Errorf("%q is not ADDR:PORT (like 10.0.0.1:50000 or [fd00::1]:50000)", s)
	}
	*v.a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	return nil
}

func (addrPortValue) Type() string { return "ADDR:PORT" }

func writeFrames(st *state, c *capture.Capture, flow int, asJSON bool) error {
	var fl *capture.Flow
	switch {
	case flow < 0:
		fl = c.Longest()
		if fl == nil {
			_, err := c.Usable()
			return err
		}
		for i, f := range c.Flows {
			if f == fl {
				flow = i
			}
		}
	case flow >= len(c.Flows):
		return usageError(fmt.Errorf("--flow %d: the capture has %d flows", flow, len(c.Flows)))
	default:
		fl = c.Flows[flow]
	}
	list := capture.Script(fl)
	var err error
	if asJSON {
		err = capture.WriteScriptJSON(st.stdout, list)
	} else {
		err = capture.WriteScriptText(st.stdout, fl, flow, list)
	}
	if err != nil {
		return err
	}
	if ok, why := fl.Usable(); !ok {
		return fmt.Errorf("%w: flow %d: %s", capture.ErrUnusable, flow, why)
	}
	return nil
}

// profileOpts are the flags that read a capture through a profile.
type profileOpts struct {
	name, user, room string
	flow             int
	keyLog           *capture.KeyLog
	prof             *profile.Profile // name's, once looked up
}

func (po *profileOpts) flags(cmd *cobra.Command, check bool) {
	f := cmd.Flags()
	if !check {
		f.StringVar(&po.name, "profile", profile.Default, "read the capture through this protocol profile (a built-in name or a file)")
	}
	f.StringVar(&po.user, "recorded-user", "", "the recorded user id, when the profile cannot place it")
	f.StringVar(&po.room, "recorded-room", "", "the recorded room, when the profile cannot place it")
	f.IntVar(&po.flow, "flow", flowAll, "only this flow (index, as listed by replay inspect); default: every flow with client data")
	f.Var(keyLogValue{k: &po.keyLog, path: new(string)}, "tls-keylog", keyLogUsage)
}

// keyLogUsage is --tls-keylog's help, for inspect, profile check and replay.
const keyLogUsage = "decrypt the capture's TLS flows with this key log (SSLKEYLOGFILE, as browsers, curl, node, Python and Go write it)"

// keyLogValue is a --tls-keylog FILE, read when set; String is the path
// (shard processes are given it).
type keyLogValue struct {
	k    **capture.KeyLog
	path *string
}

func (v keyLogValue) String() string {
	if v.path == nil {
		return ""
	}
	return *v.path
}

func (v keyLogValue) Set(path string) error {
	k, err := capture.ReadKeyLog(path)
	if err != nil {
		return err
	}
	*v.k = k
	if v.path != nil {
		*v.path = path
	}
	return nil
}

func (keyLogValue) Type() string { return "FILE" }

// flowAll is --flow's default in inspect and profile check: every flow
// (--frames: the longest).
const flowAll = -2

// checkFlow refuses a --flow the capture of n flows does not have, rather
// than showing another flow.
func (po *profileOpts) checkFlow(n int) error {
	if po.flow == flowAll || (po.flow >= 0 && po.flow < n) {
		return nil
	}
	if n == 0 {
		return usageError(fmt.Errorf("--flow %d: the capture has no flows", po.flow))
	}
	return usageError(fmt.Errorf("--flow %d: the capture has %d flow%s (0 to %d)", po.flow, n, plural(n), n-1))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// inspect reads a capture through the profile and reports on its flows.
func (po *profileOpts) inspect(path string) ([]*profile.Report, error) {
	prof, c, err := po.read(path)
	if err != nil {
		return nil, err
	}
	longest := prof.Longest(c)
	var out []*profile.Report
	var data []profile.FlowData
	byFlow := map[int]*profile.Report{}
	for i, fl := range c.Flows {
		if len(fl.ClientFrames) == 0 {
			continue
		}
		m := prof.Messages(profile.RecordingOf(fl))
		data = append(data, profile.FlowData{Index: i, Client: fl.Client.String(), HTTP: m.HTTP, Upgrade: m.Upgrade, Msgs: m.Client})
		if po.flow >= 0 && i != po.flow {
			continue
		}
		r := prof.Inspect(flowName(i, fl), m, profile.ScriptOptions{User: po.user, Room: po.room})
		r.Default = po.flow < 0 && fl == longest
		byFlow[i] = r
		out = append(out, r)
	}
	// Values an HTTP flow's answers handed out that another flow of the
	// same client host sends: what a profile's http step takes.
	links := profile.Links(data)
	for _, l := range links {
		if r := byFlow[l.From]; r != nil {
			r.Links = append(r.Links, l.String()+"; take: "+l.Take())
		}
	}
	for _, g := range profile.ClientGroups(data, links) {
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

// profile is --profile's (or profile check's argument's) profile, looked
// up once.
func (po *profileOpts) profile() (*profile.Profile, error) {
	if po.prof == nil {
		prof, err := profile.Lookup(po.name)
		if err != nil {
			return nil, usageError(err)
		}
		po.prof = prof
	}
	return po.prof, nil
}

// read reads the capture for the profile, as it reads captures.
func (po *profileOpts) read(path string) (*profile.Profile, *capture.Capture, error) {
	prof, err := po.profile()
	if err != nil {
		return nil, nil, err
	}
	c, err := prof.ReadCapture(path, po.keyLog)
	if errors.Is(err, profile.ErrBadConfig) {
		return nil, nil, usageError(err)
	}
	if c == nil {
		return nil, nil, err
	}
	if err := po.checkFlow(len(c.Flows)); err != nil {
		return nil, nil, err
	}
	if err := c.Undecrypted(max(po.flow, -1)); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return prof, c, nil
}

// writeFrames lists one flow's client messages as the profile cuts them
// (--flow, default the longest: the one replay plays).
func (po *profileOpts) writeFrames(w io.Writer, path string, asJSON bool) error {
	prof, c, err := po.read(path)
	if err != nil {
		return err
	}
	fl, i := prof.Longest(c), -1
	if po.flow >= 0 {
		fl = c.Flows[po.flow]
	}
	for j, f := range c.Flows {
		if f == fl {
			i = j
		}
	}
	if fl == nil {
		return fmt.Errorf("%s: no flow with client data", path)
	}
	rows := prof.FrameRows(prof.Messages(profile.RecordingOf(fl)))
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return profile.WriteFrameRows(w, prof.Name, flowName(i, fl), rows)
}

func writeReports(w io.Writer, reports []*profile.Report, asJSON bool) error {
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

// newProfileCmd is `replay profile check FILE --capture F`.
func newProfileCmd(st *state) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "work with protocol profiles",
	}
	var po profileOpts
	var capturePath string
	check := &cobra.Command{
		Use:           "check FILE --capture CAPTURE",
		Short:         "validate a profile (file or built-in name) against a capture and say what it matched",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			po.name = args[0]
			if capturePath == "" {
				return usageError(fmt.Errorf("--capture is required"))
			}
			reports, err := po.inspect(capturePath)
			if err != nil {
				return err
			}
			if err := writeReports(st.stdout, reports, false); err != nil {
				return err
			}
			return checkVerdict(st.stdout, args[0], capturePath, reports)
		},
	}
	check.Flags().StringVar(&capturePath, "capture", "", "capture file to check the profile against (required)")
	po.flags(check, true)
	show := &cobra.Command{
		Use:           "show NAME",
		Short:         "print a built-in profile's file, a starting point for your own (mqtt, mqtt-ws, redis, socketio, nats)",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			data, ok := profile.BuiltinFile(args[0])
			if !ok {
				return usageError(fmt.Errorf("profile %q: no built-in profile file (the files are %s; reprise is Go code)", args[0], strings.Join(profile.BuiltinFiles(), ", ")))
			}
			_, err := st.stdout.Write(data)
			return err
		},
	}
	cmd.AddCommand(check, show)
	return cmd
}

// checkVerdict judges the flow replay would play: --flow's, else the
// default one (the longest). Another flow that fits is named, not taken.
func checkVerdict(w io.Writer, name, path string, reports []*profile.Report) error {
	judged := reports[0]
	for _, r := range reports {
		if r.Default {
			judged = r
		}
	}
	if len(judged.Problems) == 0 {
		fmt.Fprintf(w, "profile %s: ok for flow %s\n", judged.Profile, judged.Flow)
		return nil
	}
	for _, r := range reports {
		if len(r.Problems) == 0 {
			return fmt.Errorf("profile %s does not fit flow %s, the one replay plays by default (see PROBLEM lines); it fits flow %s: give --flow", name, judged.Flow, r.Flow)
		}
	}
	return fmt.Errorf("profile %s fits no flow of %s (see PROBLEM lines)", name, path)
}

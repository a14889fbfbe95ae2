package main

import (
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
	"github.com/reprise-harness/reprise/internal/wire"
)

func init() { subcommands = append(subcommands, newInspectCmd, newProfileCmd) }

// newInspectCmd is `replay inspect FILE [--json] [--profile P] [--frames]`:
// what a capture holds, to choose a flow and loop points, or the frames a
// replay of one flow sends.
func newInspectCmd(st *state) *cobra.Command {
	var (
		asJSON, frames bool
		po             profileOpts
		read           profile.Source
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
			if !frames {
				softHeapLimit(read.CaptureMemory / 2)
			}
			err = prof.WriteInspection(cmd.Context(), st.stdout, args[0], po.options(read, frames, asJSON))
			if errors.Is(err, profile.ErrBadConfig) {
				return usageError(err)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON instead of text")
	cmd.Flags().BoolVar(&frames, "frames", false, "list the client frames of one flow (--flow, default the longest): what a replay sends")
	po.flags(cmd, false)
	addReadFlags(cmd, &read)
	return cmd
}

// softHeapLimit asks the Go runtime to keep the heap under limit bytes
// (unless GOMEMLIMIT says otherwise): inspect's summary of a reprise
// capture holds a few hundred bytes per flow and makes short-lived
// garbage per packet (another profile's reports hold the frames, within
// --max-memory, the limit a soft one either way), and at the default
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
func addReadFlags(cmd *cobra.Command, opts *profile.Source) {
	cmd.Flags().IntVar(&opts.MaxFrame, "max-frame", 0, "largest frame to read from the capture, in bytes (0: 65536, the relay's default --max-frame)")
	cmd.Flags().Uint16Var(&opts.ServerPort, "server-port", wire.DefaultPort, "the server's port, to tell a flow's client side when neither a SYN, a join nor the frame kinds do")
	opts.CaptureMemory = profile.DefaultCaptureMemory
	cmd.Flags().Var(mibValue{&opts.CaptureMemory}, "max-memory", memoryUsage)
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
	f.IntVar(&po.flow, "flow", profile.FlowAll, "only this flow (index, as listed by replay inspect); default: every flow with client data")
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

// options are what inspect asks of the profile, from the flags.
func (po *profileOpts) options(read profile.Source, frames, asJSON bool) profile.InspectOptions {
	return profile.InspectOptions{
		Source: profile.Source{Flow: po.flow, MaxFrame: read.MaxFrame, ServerPort: read.ServerPort, CaptureMemory: read.CaptureMemory, KeyLog: po.keyLog},
		Frames: frames, JSON: asJSON, User: po.user, Room: po.room,
	}
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
			prof, err := po.profile()
			if err != nil {
				return err
			}
			reports, err := prof.Reports(capturePath, po.options(profile.Source{}, false, false))
			if errors.Is(err, profile.ErrBadConfig) {
				return usageError(err)
			}
			if err != nil {
				return err
			}
			if err := profile.WriteReports(st.stdout, reports, false); err != nil {
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

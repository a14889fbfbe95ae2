package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/wire"
)

// compare and capacity drive fleets alike (newDriveCmd); each gives its
// own flags, check and run (compare.go, capacity.go).
func init() {
	for _, spec := range []driveSpec{{
		use:   "compare --capture FILE --clients N --senders K --loop=A,B --duration D [flags]",
		short: "run N:N (all send) and 1:N (K send) with the same ramp and write a side-by-side report",
		example: `  replay compare --capture captures/vr-session.pcap --clients 200 --senders 20 --loop=1s,39s \
    --login-interval 250ms --pause-every 100 --pause 10s --duration 80s --repeat 3`,
		setHere: []string{"metrics"}, // each fleet's metrics are the runner's
		flags:   compareFlags, check: checkCompare, run: runCompare,
	}, {
		use:   "capacity --capture FILE --loop=A,B --start N --step N --max N --hold D [flags]",
		short: "find how many users the target holds: step up the clients until a level breaks the objectives",
		example: `  replay capacity --capture captures/vr-session.pcap --loop=12s,48s --start 50 --step 25 --max 2000 --hold 20s
  replay capacity --capture captures/vr-session.pcap --loop=12s,48s --senders 20 --slo 'p99<50ms,drops=0'`,
		setHere: []string{"clients", "duration", "metrics"}, // the levels set them
		flags:   capacityFlags, check: (*compare.Config).CheckCapacity, run: searchCapacity,
	}} {
		subcommands = append(subcommands, func(st *state) *cobra.Command { return newDriveCmd(st, spec) })
	}
}

// driveFlags are what `replay compare` and `replay capacity` share: the
// fleet's flags, how the fleet runs (--shards), the server's metrics and
// the report; every default from compare.DefaultConfig.
type driveFlags struct {
	kind     string // "compare" or "capacity": the command and its report folder
	ff       fleetFlags
	fleetFS  *pflag.FlagSet // the fleet's flags alone, handed to shards as given
	cc       compare.Config
	logLevel string
	shards   int
	local    bool
	k8s      k8sDrive
}

// addDriveFlags registers the shared flags on cmd; the caller adds its
// own and hides what it sets itself.
func addDriveFlags(cmd *cobra.Command, d *driveFlags) {
	d.cc = compare.DefaultConfig()
	d.fleetFS = pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	addFleetFlags(d.fleetFS, &d.ff)
	fs := cmd.Flags()
	fs.AddFlagSet(d.fleetFS)
	d.shards = 1
	addShardCount(fs, &d.shards, "run the fleet as N shard processes started together (with --local or --k8s), sampling every shard's metrics")
	fs.BoolVar(&d.local, "local", false, "the shards are local processes of this replay binary")
	addK8sDriveFlags(fs, &d.k8s)
	fs.StringVar(&d.cc.Out, "out", "", "report directory (default out/"+d.kind+"-<time>)")
	fs.Var(metricsAddr{&d.cc.RelayMetrics}, "relay-metrics", fmt.Sprintf("the server's metrics with --target: host:port (its /metrics) or a URL "+
		"(default <target host>:%d for --profile reprise, none for another server: its columns are then absent; without --target, the relay child's)", wire.DefaultMetricsPort))
	fs.DurationVar(&d.cc.Interval, "sample-interval", d.cc.Interval, "how often the server's and the fleet's metrics are sampled")
	fs.StringVar(&d.logLevel, "log-level", "warn", "debug, info, warn or error")
}

// metricsAddr is --relay-metrics: host:port or a URL, checked when set.
type metricsAddr struct{ s *string }

func (m metricsAddr) String() string {
	if m.s == nil {
		return ""
	}
	return *m.s
}
func (m metricsAddr) Type() string { return "host:port" }
func (m metricsAddr) Set(v string) error {
	if _, err := compare.MetricsURL(v); err != nil {
		return err
	}
	*m.s = v
	return nil
}

// hide hides flags the command sets itself.
func hide(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		if f := fs.Lookup(name); f != nil {
			f.Hidden = true
		}
	}
}

// config is the driver's configuration from the flags, checked by check
// before anything starts (no relay child, no report folder yet).
func (d *driveFlags) config(cmd *cobra.Command, st *state, spec driveSpec) (compare.Config, error) {
	cc := d.cc
	for _, name := range spec.setHere {
		if cmd.Flags().Changed(name) {
			return cc, usageError(fmt.Errorf("--%s: %s sets it itself", name, d.kind))
		}
	}
	log, err := newLogger(d.logLevel, st.stderr)
	if err != nil {
		return cc, usageError(err)
	}
	cc.Log = log
	if cc.Fleet, err = d.ff.config(st.stderr); err != nil {
		return cc, err
	}
	if cc.Out == "" {
		cc.Out = compare.DefaultOut(d.kind, time.Now())
	}
	if err := d.k8s.check(cmd.Flags(), cc.Fleet.Target); err != nil {
		return cc, err
	}
	if cc.Fleet.Target == "" && !d.k8s.on {
		if err := childRelayFits(cc.Fleet); err != nil {
			return cc, err
		}
	}
	if cc.Fleet.Target == "" && cc.RelayMetrics != "" {
		return cc, usageError(errors.New("--relay-metrics goes with --target: the relay child's metrics are known"))
	}
	if cc.Runner, err = d.runner(); err != nil {
		return cc, err
	}
	cc.Params = []report.Param{{Name: "flags", Value: setFlags(cmd)}}
	cc.Progress = st.stderr
	if err := spec.check(&cc); err != nil {
		return cc, usageError(err)
	}
	return cc, nil
}

// runner is how the fleets run: in this process, or --shards N --local.
func (d *driveFlags) runner() (launch.Runner, error) {
	if err := checkShardCount(d.shards); err != nil {
		return nil, err
	}
	switch {
	case d.k8s.on && d.local:
		return nil, usageError(errors.New("--k8s and --local: pick one"))
	case d.k8s.on:
		return nil, nil // set once the cluster is known (drive)
	case d.shards == 1:
		return nil, nil
	case !d.local:
		return nil, usageError(errors.New("--shards runs local processes only for now: add --local"))
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--shards: find the replay binary: %w", err)
	}
	return launch.Shards{N: d.shards, Command: shardCommand(exe, shardRunArgs(d.fleetFS))}, nil
}

// driven is what a run gives to print: its report's summary and folder,
// what comes before the warnings (head) and after where the report is
// (tail, may be nil).
type driven struct {
	sum        report.Summary
	dir        string
	head, tail func(io.Writer) error
}

// driveSpec is compare's or capacity's part of its command.
type driveSpec struct {
	use, short, example string
	// setHere are fleet flags the command sets itself: hidden, and
	// refused when given.
	setHere []string
	// flags adds the command's own flags, defaults from cc
	// (compare.DefaultConfig).
	flags func(fs *pflag.FlagSet, cc *compare.Config)
	// check finishes the configuration from the flags and checks it.
	check func(*compare.Config) error
	run   func(context.Context, compare.Config) (driven, error)
}

// newDriveCmd builds compare's or capacity's command: the shared flags
// and its own, and a RunE that checks every flag, then starts the relay
// child without --target, runs and prints.
func newDriveCmd(st *state, spec driveSpec) *cobra.Command {
	d := &driveFlags{kind: strings.Fields(spec.use)[0]}
	cmd := &cobra.Command{
		Use:           spec.use,
		Short:         spec.short,
		Example:       spec.example,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := d.config(cmd, st, spec)
			if err != nil {
				return err
			}
			return d.drive(cmd.Context(), st, cc, spec.run)
		},
	}
	addDriveFlags(cmd, d)
	spec.flags(cmd.Flags(), &d.cc)
	hide(cmd.Flags(), spec.setHere...)
	return cmd
}

// drive runs a checked configuration: it starts the relay child without
// --target, runs, and prints the result, the warnings and where the
// report is, even when the run failed after writing it.
func (d *driveFlags) drive(ctx context.Context, st *state, cc compare.Config, run func(context.Context, compare.Config) (driven, error)) error {
	defer cc.Log.Sync()
	if d.k8s.on {
		kr, err := d.k8s.open(ctx, st, d, &cc)
		if err != nil {
			return err
		}
		// Deleted after the report is written: its last samples need the
		// relay's /metrics.
		defer func() {
			if cerr := kr.Close(ctx); cerr != nil {
				fmt.Fprintln(st.stderr, "replay:", cerr)
			}
		}()
	}
	if cc.Fleet.Target == "" {
		child, err := startChildRelay(ctx, st, d.ff.relay, filepath.Join(cc.Out, "relay.log"))
		if err != nil {
			return err
		}
		// Stopped after the report is written: its last samples need the
		// relay's /metrics.
		defer child.stop(st)
		cc.Fleet.Target, cc.RelayMetrics, cc.RelayProcess = child.TCP, child.MetricsURL(), child.describe()
		cc.Fleet.ServerPIDs = []int{child.PID()} // its CPU is the server's, not other work
	}
	res, err := run(ctx, cc)
	if errors.Is(err, compare.ErrBadConfig) {
		return usageError(err)
	}
	if res.sum.Runs == nil {
		return err
	}
	if werr := res.head(st.stdout); werr != nil {
		return werr
	}
	if werr := report.WriteWarningsText(st.stdout, res.sum.WarningGroups); werr != nil {
		return werr
	}
	abs, aerr := filepath.Abs(filepath.Join(res.dir, report.IndexFile))
	if aerr != nil {
		abs = filepath.Join(res.dir, report.IndexFile)
	}
	fmt.Fprintln(st.stdout, "report:", abs)
	if res.tail != nil {
		if werr := res.tail(st.stdout); werr != nil {
			return werr
		}
	}
	return err
}

// setFlags is the flags given on the command line, for the report.
func setFlags(cmd *cobra.Command) string {
	var parts []string
	cmd.Flags().Visit(func(f *pflag.Flag) { parts = append(parts, "--"+f.Name+"="+f.Value.String()) })
	return strings.Join(parts, " ")
}

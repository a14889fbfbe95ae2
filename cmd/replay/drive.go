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
	"github.com/reprise-harness/reprise/internal/fleetrun"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/report"
)

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
}

// addDriveFlags registers the shared flags on cmd; the caller adds its
// own and hides what it sets itself.
func addDriveFlags(cmd *cobra.Command, d *driveFlags) {
	d.cc = compare.DefaultConfig()
	d.fleetFS = pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	addFleetFlags(d.fleetFS, &d.ff)
	fs := cmd.Flags()
	fs.AddFlagSet(d.fleetFS)
	fs.IntVar(&d.shards, "shards", 1, "run the fleet as N shard processes started together (with --local), sampling every shard's metrics")
	fs.BoolVar(&d.local, "local", false, "the shards are local processes of this replay binary")
	fs.StringVar(&d.cc.Out, "out", "", "report directory (default out/"+d.kind+"-<time>)")
	fs.Var(metricsAddr{&d.cc.RelayMetrics}, "relay-metrics", "the server's metrics with --target: host:port (its /metrics) or a URL (default <target host>:9400 for --profile reprise, none for another server: its columns are then absent; without --target, the relay child's)")
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
func (d *driveFlags) config(cmd *cobra.Command, st *state, check func(*compare.Config) error) (compare.Config, error) {
	cc := d.cc
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
	if cc.Fleet.Target == "" && cc.Fleet.Profile != "" && cc.Fleet.Profile != profile.Default {
		return cc, usageError(fmt.Errorf("--profile %s needs --target: the relay started without one speaks the reprise protocol", cc.Fleet.Profile))
	}
	if cc.Fleet.Target == "" && cc.RelayMetrics != "" {
		return cc, usageError(errors.New("--relay-metrics goes with --target: the relay child's metrics are known"))
	}
	if cc.Runner, err = d.runner(); err != nil {
		return cc, err
	}
	cc.Params = []report.Param{{Name: "flags", Value: setFlags(cmd)}}
	cc.Progress = st.stderr
	if err := check(&cc); err != nil {
		return cc, usageError(err)
	}
	return cc, nil
}

// runner is how the fleets run: in this process, or --shards N --local.
func (d *driveFlags) runner() (fleetrun.Runner, error) {
	switch {
	case d.shards < 1:
		return nil, usageError(fmt.Errorf("--shards %d: must be at least 1", d.shards))
	case d.shards == 1:
		return nil, nil
	case !d.local:
		return nil, usageError(errors.New("--shards runs local processes only for now: add --local"))
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--shards: find the replay binary: %w", err)
	}
	return fleetrun.Shards{N: d.shards, Command: shardCommand(exe, shardRunArgs(d.fleetFS))}, nil
}

// drive runs a checked configuration: it starts the relay child without
// --target, runs (compare.Run or compare.RunCapacity through run), and
// prints the result (head), the warnings, where the report is, and the
// answer (tail, may be nil), even when run failed after writing it.
func (d *driveFlags) drive(ctx context.Context, st *state, cc compare.Config, run func(context.Context, compare.Config) (report.Summary, string, error),
	head, tail func(io.Writer) error) error {
	defer cc.Log.Sync()
	if cc.Fleet.Target == "" {
		child, err := startChildRelay(ctx, st, d.ff.relay, filepath.Join(cc.Out, "relay.log"))
		if err != nil {
			return err
		}
		// Stopped after the report is written: its last samples need the
		// relay's /metrics.
		defer child.stop(st)
		cc.Fleet.Target, cc.RelayMetrics, cc.RelayProcess = child.TCP, child.MetricsURL(), child.describe()
	}
	sum, dir, err := run(ctx, cc)
	if errors.Is(err, compare.ErrBadConfig) {
		return usageError(err)
	}
	if sum.Runs == nil {
		return err
	}
	if werr := head(st.stdout); werr != nil {
		return werr
	}
	for _, w := range sum.Warnings {
		fmt.Fprintln(st.stdout, "warning:", w)
	}
	abs, aerr := filepath.Abs(filepath.Join(dir, report.IndexFile))
	if aerr != nil {
		abs = filepath.Join(dir, report.IndexFile)
	}
	fmt.Fprintln(st.stdout, "report:", abs)
	if tail != nil {
		if werr := tail(st.stdout); werr != nil {
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

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

func init() { subcommands = append(subcommands, newCompareCmd) }

// newCompareCmd is `replay compare`: N:N then 1:N with the same ramp, each
// --repeat times, and a report (internal/compare, internal/report).
func newCompareCmd(st *state) *cobra.Command {
	var (
		ff       fleetFlags
		cc       compare.Config
		logLevel string
		local    bool
	)
	fleetFS := pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	cmd := &cobra.Command{
		Use:   "compare --capture FILE --clients N --senders K --loop=A,B --duration D [flags]",
		Short: "run N:N (all send) and 1:N (K send) with the same ramp and write a side-by-side report",
		Example: `  replay compare --capture captures/vr-session.pcap --clients 200 --senders 20 --loop=1s,39s \
    --login-interval 250ms --pause-every 100 --pause 10s --duration 80s --repeat 3`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, st.stderr)
			if err != nil {
				return usageError(err)
			}
			defer log.Sync()
			if cc.Fleet, err = ff.config(st.stderr); err != nil {
				return err
			}
			// --senders is K of the 1:N scenario here; N:N has none.
			cc.Senders, cc.Fleet.Senders = cc.Fleet.Senders, 0
			if cc.Out == "" {
				cc.Out = compare.DefaultOut(time.Now())
			}
			cc.Progress, cc.Log = st.stderr, log
			if cc.Fleet.Target == "" {
				child, err := startChildRelay(cmd.Context(), st, ff.relay, filepath.Join(cc.Out, "relay.log"))
				if err != nil {
					return err
				}
				// Stopped after the report is written: its last samples
				// need the relay's /metrics.
				defer child.stop(st)
				cc.Fleet.Target, cc.RelayMetrics, cc.RelayProcess = child.TCP, child.MetricsURL(), child.describe()
			}
			cc.Params = []report.Param{{Name: "flags", Value: setFlags(cmd)}}
			if cc.Shards > 1 {
				if !local {
					return usageError(errors.New("--shards runs local processes only for now: add --local"))
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--shards: find the replay binary: %w", err)
				}
				cc.Exe, cc.RunArgs = exe, shardRunArgs(fleetFS)
			}
			res, err := compare.Run(cmd.Context(), cc)
			if errors.Is(err, compare.ErrBadConfig) {
				return usageError(err)
			}
			if res.Summary.Runs == nil {
				return err
			}
			if werr := report.SideBySide(res.Summary).WriteText(st.stdout); werr != nil {
				return werr
			}
			for _, w := range res.Summary.Warnings {
				fmt.Fprintln(st.stdout, "warning:", w)
			}
			abs, aerr := filepath.Abs(filepath.Join(res.Dir, report.IndexFile))
			if aerr != nil {
				abs = filepath.Join(res.Dir, report.IndexFile)
			}
			fmt.Fprintln(st.stdout, "report:", abs)
			for _, sc := range res.Summary.Scenarios {
				fmt.Fprintln(st.stdout, sc.Headline.Line())
			}
			return err
		},
	}
	fs := cmd.Flags()
	// The fleet flags in a set of their own, so that the ones given can be
	// handed to shard processes as they are.
	addFleetFlags(fleetFS, &ff)
	fs.AddFlagSet(fleetFS)
	fs.IntVar(&cc.Shards, "shards", 1, "run each scenario's fleet as N shard processes started together (with --local), sampling every shard's metrics")
	fs.BoolVar(&local, "local", false, "the shards are local processes of this replay binary")
	fs.IntVar(&cc.Repeat, "repeat", 1, "run each scenario this many times (3 or more gives mean ± sd)")
	fs.StringVar(&cc.Out, "out", "", "report directory (default out/compare-<time>)")
	fs.StringVar(&cc.RelayMetrics, "relay-metrics", "", "the relay's /metrics URL with --target (default http://<target host>:9400/metrics for --profile reprise, none for another server: its columns are then absent; without --target, the relay child's)")
	fs.DurationVar(&cc.Interval, "sample-interval", time.Second, "how often /metrics is sampled")
	fs.DurationVar(&cc.DrainTimeout, "drain-timeout", 30*time.Second, "how long to wait for the relay to get back to 0 connections between runs")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	// Each fleet gets its own free loopback metrics port; one scenario
	// receive-only for all makes no comparison.
	for _, name := range []string{"metrics", "receive-only"} {
		if f := fs.Lookup(name); f != nil {
			f.Hidden = true
		}
	}
	// Two fleet flags mean something slightly different here.
	for name, usage := range map[string]string{
		"senders":  "K: the clients that send in the 1:N run (the N:N run has every client send)",
		"duration": "length of each run (required)",
	} {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
	return cmd
}

// shardRunArgs are the fleet flags given on the command line, for the
// shard processes; compare and capacity set the clients, senders, target,
// duration and metrics of each run themselves.
func shardRunArgs(fs *pflag.FlagSet) []string {
	var args []string
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "clients", "senders", "target", "duration", "metrics", "receive-only":
			return
		}
		if f.Changed {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// setFlags is the flags given on the command line, for the report.
func setFlags(cmd *cobra.Command) string {
	var parts []string
	cmd.Flags().Visit(func(f *pflag.Flag) { parts = append(parts, "--"+f.Name+"="+f.Value.String()) })
	return strings.Join(parts, " ")
}

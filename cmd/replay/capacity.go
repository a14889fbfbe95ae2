package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

func init() { subcommands = append(subcommands, newCapacityCmd) }

// newCapacityCmd is `replay capacity`: a step ramp that stops at the first
// level breaking the objectives, and the answer in one line
// (internal/compare, internal/report).
func newCapacityCmd(st *state) *cobra.Command {
	var (
		ff       fleetFlags
		cc       compare.CapacityConfig
		logLevel string
		local    bool
	)
	fleetFS := pflag.NewFlagSet("fleet", pflag.ContinueOnError)
	cc.SLO = report.DefaultSLO()
	cmd := &cobra.Command{
		Use:   "capacity --capture FILE --loop=A,B --start N --step N --max N --hold D [flags]",
		Short: "find how many users the target holds: step up the clients until a level breaks the objectives",
		Example: `  replay capacity --capture captures/vr-session.pcap --loop=12s,48s --start 50 --step 25 --max 2000 --hold 20s
  replay capacity --capture captures/vr-session.pcap --loop=12s,48s --senders 20 --slo 'p99<50ms,drops=0'`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"clients", "duration"} {
				if cmd.Flags().Changed(name) {
					return usageError(fmt.Errorf("--%s: the levels set it here (--start, --step, --max, --hold)", name))
				}
			}
			log, err := newLogger(logLevel, st.stderr)
			if err != nil {
				return usageError(err)
			}
			defer log.Sync()
			if cc.Fleet, err = ff.config(st.stderr); err != nil {
				return err
			}
			if cc.Out == "" {
				cc.Out = "out/capacity-" + time.Now().Format("20060102-150405")
			}
			cc.Progress, cc.Log = st.stderr, log
			cc.Params = []report.Param{{Name: "flags", Value: setFlags(cmd)}}
			if cc.Fleet.Target == "" {
				child, err := startChildRelay(cmd.Context(), st, ff.relay, filepath.Join(cc.Out, "relay.log"))
				if err != nil {
					return err
				}
				defer child.stop(st)
				cc.Fleet.Target, cc.RelayMetrics, cc.RelayProcess = child.TCP, child.MetricsURL(), child.describe()
			}
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
			res, err := compare.RunCapacity(cmd.Context(), cc)
			if errors.Is(err, compare.ErrBadConfig) {
				return usageError(err)
			}
			if res.Summary.Runs == nil {
				return err
			}
			if werr := report.WriteLevels(st.stdout, res.Capacity); werr != nil {
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
			return err
		},
	}
	fs := cmd.Flags()
	// The fleet flags in a set of their own, for the shard processes.
	addFleetFlags(fleetFS, &ff)
	fs.AddFlagSet(fleetFS)
	fs.IntVar(&cc.Shards, "shards", 1, "run the fleet as N shard processes started together (with --local), sampling every shard's metrics")
	fs.BoolVar(&local, "local", false, "the shards are local processes of this replay binary")
	fs.IntVar(&cc.Start, "start", 50, "clients of the first level")
	fs.IntVar(&cc.Step, "step", 25, "clients added by each level")
	fs.IntVar(&cc.Max, "max", 2000, "clients of the last level: the search stops there at the latest")
	fs.DurationVar(&cc.Hold, "hold", 20*time.Second, "how long each level holds its clients after its last login (latency, CPU and send rate are measured over it)")
	fs.Var(&cc.SLO, "slo", "objectives every level must keep: p99 (latency), drops (disconnects of logged-in clients), login_fail (%), idle (relay host CPU idle %), fleet_idle and lag (the load generator's saturation); KEY=off drops one")
	fs.StringVar(&cc.Out, "out", "", "report directory (default out/capacity-<time>)")
	fs.StringVar(&cc.RelayMetrics, "relay-metrics", "", "the relay's /metrics URL with --target (default http://<target host>:9400/metrics for --profile reprise, none for another server: its columns are then absent; without --target, the relay child's)")
	fs.DurationVar(&cc.Interval, "sample-interval", time.Second, "how often the relay's /metrics and the fleet are sampled")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	// The levels set the clients and the run's length; the fleet is
	// sampled in process.
	for _, name := range []string{"clients", "duration", "metrics"} {
		if f := fs.Lookup(name); f != nil {
			f.Hidden = true
		}
	}
	return cmd
}

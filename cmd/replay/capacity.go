package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

func init() { subcommands = append(subcommands, newCapacityCmd) }

// newCapacityCmd is `replay capacity`: a step ramp that stops at the first
// level breaking the objectives, and the answer in one line
// (internal/compare, internal/report).
func newCapacityCmd(st *state) *cobra.Command {
	d := &driveFlags{kind: "capacity"}
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
			cc, err := d.config(cmd, st, (*compare.Config).CheckCapacity)
			if err != nil {
				return err
			}
			var res compare.CapacityResult
			run := func(ctx context.Context, cc compare.Config) (report.Summary, string, error) {
				res, err = compare.RunCapacity(ctx, cc)
				return res.Summary, res.Dir, err
			}
			levels := func(w io.Writer) error { return report.WriteLevels(w, res.Capacity) }
			return d.drive(cmd.Context(), st, cc, run, levels, nil)
		},
	}
	addDriveFlags(cmd, d)
	fs := cmd.Flags()
	fs.IntVar(&d.cc.Start, "start", d.cc.Start, "clients of the first level")
	fs.IntVar(&d.cc.Step, "step", d.cc.Step, "clients added by each level")
	fs.IntVar(&d.cc.Max, "max", d.cc.Max, "clients of the last level: the search stops there at the latest")
	fs.DurationVar(&d.cc.Hold, "hold", d.cc.Hold, "how long each level holds its clients after its last login (latency, CPU and send rate are measured over it)")
	fs.Var(&d.cc.SLO, "slo", "objectives every level must keep: p99 (latency), drops (disconnects of logged-in clients), login_fail (%), idle (relay host CPU idle %), fleet_idle and lag (the load generator's saturation); KEY=off drops one")
	// The levels set the clients and the run's length; the runner samples
	// the fleet.
	hide(fs, "clients", "duration", "metrics")
	return cmd
}

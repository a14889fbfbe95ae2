package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

func init() { subcommands = append(subcommands, newCompareCmd) }

// newCompareCmd is `replay compare`: N:N then 1:N with the same ramp, each
// --repeat times, and a report (internal/compare, internal/report).
func newCompareCmd(st *state) *cobra.Command {
	d := &driveFlags{kind: "compare"}
	cmd := &cobra.Command{
		Use:   "compare --capture FILE --clients N --senders K --loop=A,B --duration D [flags]",
		Short: "run N:N (all send) and 1:N (K send) with the same ramp and write a side-by-side report",
		Example: `  replay compare --capture captures/vr-session.pcap --clients 200 --senders 20 --loop=1s,39s \
    --login-interval 250ms --pause-every 100 --pause 10s --duration 80s --repeat 3`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := d.config(cmd, st, func(cc *compare.Config) error {
				// --senders is K of the 1:N scenario here; N:N has none.
				cc.Senders, cc.Fleet.Senders = cc.Fleet.Senders, 0
				return cc.CheckCompare()
			})
			if err != nil {
				return err
			}
			var res compare.Result
			run := func(ctx context.Context, cc compare.Config) (report.Summary, string, error) {
				res, err = compare.Run(ctx, cc)
				return res.Summary, res.Dir, err
			}
			table := func(w io.Writer) error { return report.SideBySide(res.Summary).WriteText(w) }
			headlines := func(w io.Writer) error {
				for _, sc := range res.Summary.Scenarios {
					if _, err := fmt.Fprintln(w, sc.Headline.Line()); err != nil {
						return err
					}
				}
				return nil
			}
			return d.drive(cmd.Context(), st, cc, run, table, headlines)
		},
	}
	addDriveFlags(cmd, d)
	fs := cmd.Flags()
	fs.IntVar(&d.cc.Repeat, "repeat", d.cc.Repeat, "run each scenario this many times (3 or more gives mean ± sd)")
	fs.DurationVar(&d.cc.DrainTimeout, "drain-timeout", d.cc.DrainTimeout, "how long to wait for the relay to get back to 0 connections between runs")
	// Each fleet is sampled by the runner; one scenario receive-only for
	// all makes no comparison.
	hide(fs, "metrics", "receive-only")
	// Two fleet flags mean something slightly different here.
	fs.Lookup("senders").Usage = "K: the clients that send in the 1:N run (the N:N run has every client send)"
	fs.Lookup("duration").Usage = "length of each run (required)"
	return cmd
}

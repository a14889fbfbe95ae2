package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

// `replay compare` runs N:N then 1:N with the same ramp, each --repeat
// times, and writes a report (internal/compare, internal/report).

// checkCompare: --senders is K of the 1:N scenario here; N:N has none.
func checkCompare(cc *compare.Config) error {
	cc.Senders, cc.Fleet.Senders = cc.Fleet.Senders, 0
	return cc.CheckCompare()
}

// runCompare runs the comparison; it prints the side-by-side table, and
// last the answer cards and each scenario's headline in one line.
func runCompare(ctx context.Context, cc compare.Config) (driven, error) {
	res, err := compare.Run(ctx, cc)
	return driven{
		sum:  res.Summary,
		dir:  res.Dir,
		head: func(w io.Writer) error { return report.SideBySide(res.Summary).WriteText(w) },
		tail: func(w io.Writer) error {
			if err := report.WriteCardsText(w, res.Summary.Cards); err != nil {
				return err
			}
			for _, sc := range res.Summary.Scenarios {
				if _, err := fmt.Fprintln(w, sc.Headline.Line()); err != nil {
					return err
				}
			}
			return nil
		},
	}, err
}

// compareFlags are compare's own flags.
func compareFlags(fs *pflag.FlagSet, cc *compare.Config) {
	fs.IntVar(&cc.Repeat, "repeat", cc.Repeat, "run each scenario this many times (3 or more gives mean ± sd)")
	fs.DurationVar(&cc.DrainTimeout, "drain-timeout", cc.DrainTimeout, "how long to wait for the relay to get back to 0 connections between runs")
	fs.Var(&cc.SLO, "slo", "objectives the headline judges, as capacity's: p99 (latency), drops, login_fail (%), idle (relay host CPU idle %), fleet_idle and lag (the load generator's saturation); KEY=off drops one")
	// One scenario receive-only for all makes no comparison (refused).
	hide(fs, "receive-only")
	// Two fleet flags mean something slightly different here.
	fs.Lookup("senders").Usage = "K: the clients that send in the 1:N run (the N:N run has every client send)"
	fs.Lookup("duration").Usage = "length of each run (required)"
}

package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/report"
)

// `replay capacity` steps the clients up level by level, stops at the
// first level breaking the objectives, and gives the answer in one line
// (internal/compare, internal/report).

// capacityFlags are the search's own flags: its levels and objectives.
func capacityFlags(fs *pflag.FlagSet, cc *compare.Config) {
	fs.IntVar(&cc.Start, "start", cc.Start, "clients of the first level")
	fs.IntVar(&cc.Step, "step", cc.Step, "clients added by each level")
	fs.IntVar(&cc.Max, "max", cc.Max, "clients of the last level: the search stops there at the latest")
	fs.DurationVar(&cc.Hold, "hold", cc.Hold, "how long each level holds its clients after its last login (latency, CPU and send rate are measured over it)")
	fs.Var(&cc.SLO, "slo", "objectives every level must keep: p99 (latency), drops (disconnects of logged-in clients), login_fail (%), idle (relay host CPU idle %), fleet_idle and lag (the load generator's saturation); KEY=off drops one")
}

// searchCapacity runs the search; it prints the levels, and last the
// answer card.
func searchCapacity(ctx context.Context, cc compare.Config) (driven, error) {
	res, err := compare.RunCapacity(ctx, cc)
	return driven{
		sum:  res.Summary,
		dir:  res.Dir,
		head: func(w io.Writer) error { return report.WriteLevels(w, res.Capacity) },
		tail: func(w io.Writer) error { return report.WriteCardsText(w, res.Summary.Cards) },
	}, err
}

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// writeAnswer prints the answer card of a run without a series (plain
// replay, a shard, replay merge) under its summary table: the fleet's
// figures mapped into the report's Totals (the report does not read the
// fleet), with verdict, the error the run exits with, as its reason.
func writeAnswer(w io.Writer, sum fleet.Summary, maxLoss float64, verdict error) error {
	return report.WriteCardsText(w, []report.Card{report.TotalsCard(totalsOf(sum, maxLoss, verdict))})
}

// totalsOf maps a fleet summary and its verdict into the report's input.
func totalsOf(sum fleet.Summary, maxLoss float64, verdict error) report.Totals {
	t := report.Totals{
		Scenario:     "replay",
		Requested:    sum.ClientsRequested,
		LoggedIn:     sum.LoginsSucceeded,
		PeakLoggedIn: sum.PeakLoggedIn,
		LoginsFailed: sum.LoginsFailed,
		Cut:          sum.Disconnects,
		Saturated:    sum.Saturation,
		Warnings:     sum.Warnings,
		Failed:       failureOf(verdict),
	}
	switch {
	case sum.Shard != "":
		t.Scenario = "shard " + sum.Shard
	case len(sum.Shards) > 0:
		t.Scenario = fmt.Sprintf("merged %d shards", len(sum.Shards))
	}
	d := sum.Deliveries
	switch {
	case sum.Shard != "":
		t.LossWhy = "a shard's loss is judged by replay merge, on the merged figures"
	case maxLoss < 0:
		t.LossOff, t.LossWhy = true, "--max-loss is negative"
	case d.Measured() && d.Expected > 0, !d.Measured() && sum.NumberedReceived > 0:
		t.LossJudged = true
	case !d.Measured():
		t.LossWhy = d.NotMeasured
	default:
		t.LossWhy = "no delivery was owed"
	}
	return t
}

// failureOf is the objective and the line of the error a run exits with:
// nil when it held, or when the run ended on an error that is no verdict
// on the server.
func failureOf(err error) *report.Failure {
	var r report.Reason
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrNothingLoggedIn):
		r = report.ReasonLoginFailures
	case errors.Is(err, fleet.ErrAllCut):
		r = report.ReasonDisconnects
	case errors.Is(err, fleet.ErrDeliveriesLost):
		r = report.ReasonLoss
	default:
		return nil
	}
	return &report.Failure{Objective: r, Text: strings.TrimPrefix(err.Error(), fleet.ErrBrokenServer.Error()+": ")}
}

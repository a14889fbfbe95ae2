// Package launch is the seam between a driver (internal/compare's
// comparison and capacity search, `replay k8s run`'s one fleet) and a
// fleet: one interface, Runner, to
// prepare a fleet, start it, sample its metrics, hold it at each of its
// levels until the driver says go on or stop, and collect its summary —
// whether the fleet runs in this process (InProcess) or as shard processes
// started together at a barrier (Shards), or as the pods of a Kubernetes
// Job (Kubernetes).
//
// It is not the fleet (internal/fleet) nor a driver: it decides nothing
// about a run. It builds no command line: Shards gets its processes'
// arguments from a function the command passes in (cmd/replay builds them
// next to the flags that define them), and Kubernetes its pods' flags.
// OpenKubernetes sets up a run on a cluster (what it creates besides its
// fleets) for every command alike.
package launch

import (
	"context"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// Runner prepares fleets. A driver prepares one fleet per run (a scenario
// of a comparison, a capacity search).
type Runner interface {
	// Prepare makes a fleet of cfg (the whole fleet's configuration, as
	// for one process: its Clients, Senders, Duration, Levels) ready to
	// start: the capture loaded, the sockets bound, every part answering
	// on its metrics with its counters at zero. The runner sets cfg's
	// Metrics, Shard and AtLevel itself. cfg.Out receives the fleet's
	// progress lines. Close releases a fleet that is not started.
	Prepare(ctx context.Context, cfg fleet.Config) (Fleet, error)
	// Describe says how the fleets run, for a report ("in this process",
	// "2 local shard processes").
	Describe() string
}

// Fleet is one prepared fleet. Its methods are for one goroutine, the
// driver's, except Stop, which any goroutine may call.
type Fleet interface {
	// Targets are the fleet's metrics to sample, role report.RoleFleet:
	// its registry in this process, or each part's /metrics. They answer
	// from Prepare until the fleet ends (in process: also after).
	Targets() []report.Target
	// Start starts the fleet and returns the instant its clock starts
	// (its first login is due): ahead of the call by a short lead, during
	// which its counters stay at zero, so that the driver can take a
	// baseline of the server's and the fleet's metrics. It ends when ctx
	// ends: stopped as by Stop, the summary still made.
	Start(ctx context.Context) (time.Time, error)
	// Levels delivers each of cfg.Levels once the whole fleet waits there
	// (every part has made its attempts up to it and makes no more); the
	// fleet waits until Resume or Stop. It is closed when the fleet ends,
	// so a driver ranges over it and then calls Wait.
	Levels() <-chan Level
	// Resume lets the fleet go on past level l, every part together.
	Resume(l Level)
	// Stop ends the run now, or at the level it waits at: no more
	// logins; the fleet drains, leaves and makes its summary, as at the
	// end of its Duration.
	Stop()
	// Wait waits for the fleet to end and returns its summary (over
	// shards: their merge, fleet.Merge). The error says why the run could
	// not happen or its summary could not be had. Wait releases the
	// fleet.
	Wait() (fleet.Summary, error)
	// Close releases a fleet that was prepared but not started.
	Close()
}

// Level is a level the whole fleet waits at.
type Level struct {
	Index    int       // in cfg.Levels
	Attempts int       // cfg.Levels[Index]: the fleet's login attempts so far
	At       time.Time // when the last part got there
}

// StartLead is how far ahead of Start's call the fleet's clock starts:
// room for a driver's baseline scrape.
const StartLead = 500 * time.Millisecond

// levelIndex is attempts' index in levels (-1: not a level).
func levelIndex(levels []int, attempts int) int {
	for i, l := range levels {
		if l == attempts {
			return i
		}
	}
	return -1
}

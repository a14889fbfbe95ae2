package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// schedule is the recorded client's send schedule: the frames a replay
// plays (from the first join to before the first leave, as the fleet's
// script keeps them), each with its kind, size and due time since the
// join, divided by the replay's speed.
type schedule struct {
	kinds []wire.Type
	sizes []int
	at    []time.Duration
	// firstSend is the index of the first send: what comes before it is
	// the login part, which the fleet plays on its own clock (the join at
	// once, the rest from the joined it reads), so gaps count from here.
	firstSend int
}

// errNoSchedule means the recorded flow holds nothing a replay schedules.
var errNoSchedule = errors.New("the recorded flow has no join followed by a send")

// kind is a reprise frame's type.
func kind(f capture.Frame) wire.Type { return wire.Type(f.Bytes[wire.LenSize]) }

// newSchedule reads the schedule of a recorded flow's client frames.
func newSchedule(frames []capture.Frame, speed float64) (schedule, error) {
	if speed <= 0 {
		speed = 1
	}
	first := slices.IndexFunc(frames, func(f capture.Frame) bool { return kind(f) == wire.TypeJoin })
	if first < 0 {
		return schedule{}, errNoSchedule
	}
	var s schedule
	s.firstSend = -1
	base := frames[first].Time
	for _, f := range frames[first:] {
		if kind(f) == wire.TypeLeave {
			break
		}
		if kind(f) == wire.TypeSend && s.firstSend < 0 {
			s.firstSend = len(s.kinds)
		}
		s.kinds = append(s.kinds, kind(f))
		s.sizes = append(s.sizes, len(f.Bytes))
		s.at = append(s.at, time.Duration(float64(f.Time.Sub(base))/speed))
	}
	if s.firstSend < 0 {
		return schedule{}, errNoSchedule
	}
	return s, nil
}

// clientResult is what one replayed client's frames say against the
// schedule.
type clientResult struct {
	// errs are the gap errors in ns, one per pair of successive matched
	// frames: the replay's gap minus the recorded gap of the same two
	// frames (negative: sent closer together than recorded).
	errs []int64
	// drift is how late the last matched frame went out against the
	// schedule, anchored where it fits the client's earliest frame (the
	// fleet sends no frame before it is due, so the smallest
	// time-minus-due of a client is its schedule's start plus the least
	// lateness).
	drift int64
	// endLate is how far behind its schedule the client was at the end:
	// the median lateness (anchored as drift is) of its frames of the
	// last second. One last frame may be on time after a burst that
	// caught up (a shard that fell behind sends what is due in one turn).
	endLate int64
	// matched frames played a step of the schedule; unmatched came after
	// the first send but were not the next step's kind (the fleet's own
	// leave, heartbeats after the script, anything the recording did not
	// send); sizeDiff matched a step of another size (a rewritten id; many
	// would mean the frames were aligned wrongly).
	matched, unmatched, sizeDiff int
}

// compareClient aligns one replayed client's client→server frames (cut
// from its reassembled stream or datagrams, in order) with the schedule
// and measures its gaps. The replay's first send plays the schedule's
// first send; from there each frame plays the next step when it is of
// that step's kind. ok is false for a client that never sent (a
// receive-only one), which has nothing to compare.
func compareClient(s schedule, frames []capture.Frame) (r clientResult, ok bool) {
	i := slices.IndexFunc(frames, func(f capture.Frame) bool { return kind(f) == wire.TypeSend })
	if i < 0 {
		return r, false
	}
	step := s.firstSend
	var prevT, prevDue time.Duration
	var minLate int64
	var times []time.Duration
	var lates []int64
	for k, f := range frames[i:] {
		if k > 0 {
			if step+1 >= len(s.kinds) || kind(f) != s.kinds[step+1] {
				r.unmatched++
				continue
			}
			step++
		}
		t, due := f.Time.Sub(frames[i].Time), s.at[step]
		if len(f.Bytes) != s.sizes[step] {
			r.sizeDiff++
		}
		if r.matched > 0 {
			r.errs = append(r.errs, int64((t-prevT)-(due-prevDue)))
		}
		late := int64(t - due)
		if r.matched == 0 || late < minLate {
			minLate = late
		}
		times, lates = append(times, t), append(lates, late)
		prevT, prevDue = t, due
		r.matched++
	}
	r.drift = lates[len(lates)-1] - minLate
	end := times[len(times)-1] - time.Second
	i = sort.Search(len(times), func(k int) bool { return times[k] >= end })
	last := slices.Clone(lates[i:])
	slices.Sort(last)
	r.endLate = last[(len(last)-1)/2] - minLate
	return r, true
}

// result is one replay's figures over all its clients.
type result struct {
	// clients were compared; idle sent no send (receive-only); broken
	// lost bytes in the capture (a resynchronised stream: the frames
	// after a hole cannot be placed) and are left out.
	clients, idle, broken int
	// frames are the client→server frames of every flow in the capture:
	// the fleet's own count of frames sent should match it.
	frames                 int
	gaps                   int
	p50, p99               time.Duration // of |gap error|
	within1, within5       float64       // share of |gap error| <= 1 ms, <= 5 ms
	driftP50, driftMax     time.Duration // over clients
	endLateP50, endLateMax time.Duration // over clients
	unmatched, sizeDiff    int
}

// compare measures every client flow of a replay's capture against the
// schedule.
func compare(s schedule, flows []*capture.Flow) (result, error) {
	var res result
	var errs, drifts, endLates []int64
	for _, fl := range flows {
		res.frames += fl.ClientCount
		if fl.Resynced {
			res.broken++
			continue
		}
		r, ok := compareClient(s, fl.ClientFrames)
		if !ok {
			res.idle++
			continue
		}
		res.clients++
		res.unmatched += r.unmatched
		res.sizeDiff += r.sizeDiff
		for _, e := range r.errs {
			errs = append(errs, abs(e))
		}
		drifts = append(drifts, r.drift)
		endLates = append(endLates, r.endLate)
	}
	if len(errs) == 0 {
		return res, fmt.Errorf("no gaps to compare: %d clients sent, %d only listened, %d lost bytes in the capture", res.clients, res.idle, res.broken)
	}
	slices.Sort(errs)
	slices.Sort(drifts)
	res.gaps = len(errs)
	res.p50, res.p99 = time.Duration(rank(errs, 0.50)), time.Duration(rank(errs, 0.99))
	res.within1 = share(errs, int64(time.Millisecond))
	res.within5 = share(errs, int64(5*time.Millisecond))
	res.driftP50, res.driftMax = time.Duration(rank(drifts, 0.50)), time.Duration(drifts[len(drifts)-1])
	slices.Sort(endLates)
	res.endLateP50, res.endLateMax = time.Duration(rank(endLates, 0.50)), time.Duration(endLates[len(endLates)-1])
	return res, nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// rank is the nearest-rank q-quantile of sorted v (not empty).
func rank(v []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// share is the fraction of sorted v at or under bound.
func share(v []int64, bound int64) float64 {
	n, _ := slices.BinarySearch(v, bound+1)
	return float64(n) / float64(len(v))
}

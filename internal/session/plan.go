package session

import (
	"sort"
	"time"
)

// Heartbeat is the Step.Frame of a heartbeat the plan adds after the
// script (receive-only clients, or a script played once).
const Heartbeat = -1

// Handover is the Frame of the End steps of a plan cut by Until, Due
// the cut: the client leaves this connection then, for its next one. A
// player that tests End first pays nothing for it on any other step.
const Handover = -2

// Plan is what one kind of client plays: a looping sender, a sender that
// plays the script once, or a receive-only client. Like vegeta's Pace, it
// is a pure function of a step number, so a client's whole future is known
// from its start time and how many steps it has taken.
type Plan struct {
	s *Timeline
	// login frames are played once: [0, login).
	login int
	// loop frames [s.loginEnd, s.loopEnd) repeat when loop is set.
	loop bool
	// heartbeats follow the last frame every hb when loop is not set.
	hb     time.Duration
	hbBase time.Duration
}

// Until is p played until d since the join, and no longer: the steps due
// by d, then the end, as End steps with Frame Handover due at d (whether
// p loops, heartbeats, or ended before d). A client that plays one connection,
// then another, plays the first's plan so (d > 0).
func (p Plan) Until(d time.Duration) Plan {
	// The cut lives in a timeline of its own, so that a Plan stays as
	// small as it was (every send copies one), and the plan is one with
	// no frame, no loop and a negative heartbeat interval: Step reaches
	// the cut only where an uncut plan ends (its hb <= 0 branch), and
	// an uncut plan pays nothing for it.
	return Plan{s: &Timeline{cut: &cutPlan{plan: p, until: max(d, 1)}}, hb: cutHB}
}

// cutHB is the heartbeat interval that marks a plan cut by Until.
const cutHB = -1

// cutPlan is a plan cut by Until: the plan, and its cut.
type cutPlan struct {
	plan  Plan
	until time.Duration
}

// Plan returns the sender's plan: the login part, then the loop forever,
// or without a loop the whole script once and then a heartbeat every hb.
func (s *Timeline) Plan(hb time.Duration) Plan {
	if s.looping {
		return Plan{s: s, login: s.loginEnd, loop: true}
	}
	return Plan{s: s, login: len(s.at), hb: hb, hbBase: s.at[len(s.at)-1]}
}

// ReceiveOnlyPlan returns the plan of a client that logs in and then sends
// only a heartbeat every hb, as the VR report's receive-only clients did.
// It plays the login part up to its first send (the join and any other
// handshake frames) but none of the casts the recorded client made before
// the loop start A: a listener must not talk.
//
// A login that sends nothing (a WebSocket upgrade that is the join) plays
// no frame: heartbeats count from the join.
func (s *Timeline) ReceiveOnlyPlan(hb time.Duration) Plan {
	login := min(s.handshakeEnd, s.loginEnd)
	var base time.Duration
	if login > 0 {
		base = s.at[login-1]
	}
	return Plan{s: s, login: login, hb: hb, hbBase: base}
}

// Frames is how many script frames (a prefix) the plan can ever play;
// only those need encoding.
func (p Plan) Frames() int {
	if p.hb == cutHB {
		return p.s.cut.plan.Frames()
	}
	if p.loop {
		return p.s.loopEnd
	}
	return p.login
}

// Step is the n-th thing a client sends.
type Step struct {
	// Frame is the script frame to send, or Heartbeat.
	Frame int
	// Due is when, since the client's join.
	Due time.Duration
	// Loops is how many loop passes were complete before this step.
	Loops int64
	// End is set when there is no such step (a zero heartbeat interval
	// after the last frame).
	End bool
}

// Step returns step n (from 0, the join).
func (p Plan) Step(n int64) Step {
	if n < int64(p.login) {
		return Step{Frame: int(n), Due: p.s.at[n]}
	}
	m := n - int64(p.login)
	if p.loop {
		a, b := int64(p.s.loginEnd), int64(p.s.loopEnd)
		k, j := m/(b-a), a+m%(b-a)
		return Step{Frame: int(j), Due: p.s.at[j] + time.Duration(k)*p.s.period, Loops: k}
	}
	if p.hb > 0 {
		return Step{Frame: Heartbeat, Due: p.hbBase + time.Duration(m+1)*p.hb}
	}
	if p.hb != cutHB {
		return Step{End: true}
	}
	// A plan cut by Until: the plan's step unless past the cut (steps
	// are due in order: every one past it is the end, the handover).
	// The plan's step is the above again, written here, so that Step
	// calls nothing: a function that calls pays a stack check and a
	// frame on every call, and every plan would pay for the cut.
	c := p.s.cut
	q := c.plan
	m = n - int64(q.login)
	st := Step{End: true}
	switch {
	case n < int64(q.login):
		st = Step{Frame: int(n), Due: q.s.at[n]}
	case q.loop:
		a, b := int64(q.s.loginEnd), int64(q.s.loopEnd)
		k, j := m/(b-a), a+m%(b-a)
		st = Step{Frame: int(j), Due: q.s.at[j] + time.Duration(k)*q.s.period, Loops: k}
	case q.hb > 0:
		st = Step{Frame: Heartbeat, Due: q.hbBase + time.Duration(m+1)*q.hb}
	}
	if st.End || st.Due > c.until {
		return Step{End: true, Frame: Handover, Due: c.until}
	}
	return st
}

// DueBy returns how many steps are due at or before elapsed since the
// join: the client has fallen behind if it has taken fewer.
func (p Plan) DueBy(elapsed time.Duration) int64 {
	if p.hb == cutHB {
		c := p.s.cut
		return c.plan.dueBy(min(elapsed, c.until))
	}
	return p.dueBy(elapsed)
}

func (p Plan) dueBy(elapsed time.Duration) int64 {
	fr := p.s.at
	if elapsed < 0 {
		return 0
	}
	n := int64(sort.Search(p.login, func(i int) bool { return fr[i] > elapsed }))
	if n < int64(p.login) {
		return n
	}
	if p.loop {
		a, b := p.s.loginEnd, p.s.loopEnd
		since := elapsed - fr[a]
		if since < 0 {
			return n
		}
		k := int64(since / p.s.period)
		// Frames of pass k due by elapsed: at_j + k·period ≤ elapsed.
		rest := elapsed - time.Duration(k)*p.s.period
		j := sort.Search(b-a, func(i int) bool { return fr[a+i] > rest })
		return n + k*int64(b-a) + int64(j)
	}
	if p.hb <= 0 || elapsed < p.hbBase {
		return n
	}
	return n + int64((elapsed-p.hbBase)/p.hb)
}

package fleet

import (
	"math/rand/v2"
	"time"
)

// A UDP join or its joined can be lost: that is not a refusal, so a UDP
// client sends its join again until it gets joined, an error, or its login
// timeout. The relay answers a repeated join from the same address with
// the same session (docs/protocol.md, "UDP specifics").
const (
	joinRetryFirst = 250 * time.Millisecond
	joinRetryMax   = 2 * time.Second
)

// joinRetry paces one UDP client's join datagrams: the first re-send after
// joinRetryFirst, then doubling up to joinRetryMax, each wait jittered by
// ±20% so clients that lost their joins together do not retry together.
type joinRetry struct {
	deadline time.Time // the login timeout
	wait     time.Duration
	dgram    []byte // the join datagram to send again (padded if the relay asked)
}

func newJoinRetry(deadline time.Time, dgram []byte) *joinRetry {
	return &joinRetry{deadline: deadline, wait: joinRetryFirst, dgram: dgram}
}

// readDeadline is when the reader stops waiting for joined before it
// sends the join again (never past the login timeout).
func (r *joinRetry) readDeadline(now time.Time) time.Time {
	w := r.wait + time.Duration((rand.Float64()*0.4-0.2)*float64(r.wait))
	if t := now.Add(w); t.Before(r.deadline) {
		return t
	}
	return r.deadline
}

// again reports whether there is time left to send the join again, and
// backs off for the next wait.
func (r *joinRetry) again(now time.Time) bool {
	if !now.Before(r.deadline) {
		return false
	}
	r.wait = min(2*r.wait, joinRetryMax)
	return true
}

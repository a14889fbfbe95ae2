package profile

import "fmt"

// Unanswered server messages: a server that pings and closes a client
// that does not answer often says nothing on the wire about why (Engine.IO
// v4 sends `2`, waits pingTimeout, then a WebSocket close frame with no
// status code). The profile declares which server kinds the server wants
// answered and by which client kind (expects); a client that is closed
// without a reason while the last such message had no answer since is
// counted as no_reply_<kind>: what the wire showed, not a guess at the
// server's reason.

// expectRule is a compiled ExpectSpec.
type expectRule struct {
	on     int // server kind
	answer int // client kind
}

// maxExpects bounds a profile's expects.
const maxExpects = 8

func (s *Spec) compileExpects(p *Profile) error {
	var errs specErrors
	if len(s.Expects) > maxExpects {
		errs.add(bad("expects", "%d expects: at most %d", len(s.Expects), maxExpects))
	}
	for i, e := range s.Expects {
		path := fmt.Sprintf("expects[%d]", i)
		r := expectRule{on: p.serverKind(e.On), answer: p.clientKind(e.Answer)}
		if r.on < 0 {
			errs.add(bad(path+".on", "%q is not a server kind%s", e.On, p.kindHint(e.On, true)))
		}
		if r.answer <= 0 {
			errs.add(bad(path+".answer", "%q is not a client kind (nor a reaction's as)%s", e.Answer, p.kindHint(e.Answer, false)))
		}
		if r.on >= 0 && r.answer > 0 {
			p.expects = append(p.expects, r)
		}
	}
	return errs.err()
}

// expectArrived notes server message kind k: an expected one now waits
// for its answer (the reader's).
func (c *client) expectArrived(k int) {
	for i, e := range c.s.p.expects {
		if e.on == k {
			c.unanswered.Store(int32(i + 1))
		}
	}
}

// answered notes a message of client kind k sent (the reader's or the
// sender's): an expected message it answers is answered.
func (c *client) answered(k int) {
	if u := c.unanswered.Load(); u > 0 && c.s.p.expects[u-1].answer == k {
		c.unanswered.CompareAndSwap(u, 0)
	}
}

// Unanswered implements Client.
func (c *client) Unanswered() string {
	if u := c.unanswered.Load(); u > 0 {
		return c.s.p.server[c.s.p.expects[u-1].on].name
	}
	return ""
}

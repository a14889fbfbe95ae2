package fleet

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// Connections in turn: a --flows client whose recorded session played on
// one server and then on another (a chat or lobby socket played for a
// while, then the game server's; a game server that hands over to
// another) plays its flows in turn, as one client. Its first connection's
// plan is cut where the recording left it (session.Plan.Until): at that
// Handover step the scheduler drops it and calls nextTurn, which leaves
// the connection as at the run's end (the leave message, the close, the
// reads drained until the server closes, bounded by --leave-timeout),
// then logs in with the next flow's player where the recording connected
// (LoadedFlow.Connect), carrying the values the earlier connection's
// server handed out that the recording sent there (profile.Carry: a
// ticket, a seat). The next connection is a client of its own in
// the fleet's bookkeeping (tracked, scheduled, polled, in its turn's
// rooms), with the same index, user id and sender role: each
// connection's sends, receipts, latency and loss count exactly as any
// client's. A client is one login, on its first connection (N clients:
// N of N logged in); each later connection is counted apart
// (NextConnections: tried, logged in, failed by flow<index>_<reason>),
// in its own flow row, and its login timed in its own step row
// (flow<index>). Nothing of this runs on a client that plays one
// connection: the cost is per login, none per message.

// nextTurn ends the client's connection at its plan's Handover step and
// plays its next flow. The scheduler calls it once, having dropped the
// client; a fleet goroutine does the leave and the login (which then
// stays the new connection's reader), so the scheduler never waits on a
// socket. The schedulers stop before the fleet waits for its goroutines,
// so the goroutine is always counted before that wait.
func (c *client) nextTurn() {
	f := c.f
	f.wg.Go(func() {
		defer c.turnOver()
		// Leaving: the reader answers nothing more, and the server's
		// close ends the connection without a disconnect.
		start := time.Now()
		c.stopping.Store(true)
		if !c.dead.Load() { // disconnected: its deliveries are judged as any client's
			c.tn.left.Store(true)
		}
		c.leave(start.Add(f.cfg.LeaveTimeout))
		if c.dead.Load() || f.runCtx.Err() != nil {
			return // disconnected meanwhile (no leave), or the run ended: no next login
		}
		then := c.tn.then.Then
		n, err := f.newClientOf(c.idx, then, &f.flowCnt[f.turnOf[then]], c.tn.turn+1)
		if err != nil {
			f.warnOnce(&f.warnedTurn, "WARNING: a client's next connection could not be made: "+err.Error())
			return
		}
		n.tn.loginAt = start
		f.stats.next.tried.Add(1)
		res := make(chan LoginResult, 1)
		// The values this connection's server handed out that the next
		// one sends (profile.Carry): none taken fails its login here.
		if missing := profile.Carry(c.pc, n.pc); missing != "" {
			n.loginFailed(LoginResult{code: LoginHTTPAnswer, said: missing}, res)
			return
		}
		n.attempt(f.runCtx, res)
		// Its turn is over once the next one's login has its result
		// (every path of a login reports one, bounded by its deadline).
		select {
		case <-res:
		case <-f.runCtx.Done():
		}
	})
}

// turnState is what a client playing connections in turn carries: then
// is the flow whose Then it plays next (nil: none), turn this
// connection's (0 the first); a later turn's connect is where it dials
// ("" the target) and name its label (flow<index>): its login's step row
// and the prefix of its failures; loginAt when its login began.
type turnState struct {
	then    *profile.LoadedFlow
	turn    int
	connect string
	name    string
	loginAt time.Time
	done    atomic.Bool // turnOver ran
	// left: it left for its next connection (its deliveries are
	// Deliveries.LeftInTurn's).
	left atomic.Bool
}

// turnIndex is the client's connection in turn (0: its first, or it
// plays one connection).
func (c *client) turnIndex() int {
	if c.tn == nil {
		return 0
	}
	return c.tn.turn
}

// nextFlow is the flow whose Then the client plays next (nil: none).
func (c *client) nextFlow() *profile.LoadedFlow {
	if c.tn == nil {
		return nil
	}
	return c.tn.then
}

// turnConnect is where a later turn dials ("": the target).
func (c *client) turnConnect() string {
	if c.tn == nil {
		return ""
	}
	return c.tn.connect
}

// leftInTurn says the client left for its next connection.
func (c *client) leftInTurn() bool { return c.tn != nil && c.tn.left.Load() }

// turnOver says a client that was to play a next connection no longer
// waits to (it handed over and the next login has its result, or its
// connection ended first): --after-logins counts from when no client
// does (Fleet.loginsSettled).
func (c *client) turnOver() {
	if c.nextFlow() != nil && c.tn.done.CompareAndSwap(false, true) {
		c.f.turnsPending.Add(-1)
	}
}

// nextStats count the clients' later connections (turns.go).
type nextStats struct {
	tried, ok atomic.Int64
	failed    reasons
}

// NextConnections are the later connections of clients playing flows in
// turn: how many clients went on to a next connection, how many logged
// in there, why the others failed (flow<index>_<reason>), and how many
// the run's end stopped before their login had its result (Ctrl-C, the
// duration): Tried = LoggedIn + Stopped + the failures. They are not
// logins: a client counts one login, on its first connection.
type NextConnections struct {
	Tried    int64            `json:"tried"`
	LoggedIn int64            `json:"logged_in"`
	Failed   map[string]int64 `json:"failed"`
	Stopped  int64            `json:"stopped,omitempty"`
}

// nextConnections is the summary's, nil when no flow is played in turn.
// It is made once every connection's goroutine has ended, so a tried
// login with no result was stopped by the run's end.
func (f *Fleet) nextConnections() *NextConnections {
	if len(f.turnFlows) == 0 {
		return nil
	}
	n := &f.stats.next
	out := &NextConnections{Tried: n.tried.Load(), LoggedIn: n.ok.Load(), Failed: n.failed.snapshot()}
	out.Stopped = out.Tried - out.LoggedIn
	for _, k := range out.Failed {
		out.Stopped -= k
	}
	return out
}

func (n *NextConnections) line() string {
	stopped := ""
	if n.Stopped > 0 {
		stopped = fmt.Sprintf(", %d stopped by the run's end", n.Stopped)
	}
	return fmt.Sprintf("%d tried, %d logged in%s, failed: %s", n.Tried, n.LoggedIn, stopped, byReason(n.Failed))
}

// mergeNext adds a shard's next connections to the merged summary's.
func mergeNext(out *Summary, s Summary) {
	n := s.NextConnections
	if n == nil {
		return
	}
	if out.NextConnections == nil {
		out.NextConnections = &NextConnections{Failed: map[string]int64{}}
	}
	out.NextConnections.Tried += n.Tried
	out.NextConnections.LoggedIn += n.LoggedIn
	out.NextConnections.Stopped += n.Stopped
	addAll(out.NextConnections.Failed, n.Failed)
}

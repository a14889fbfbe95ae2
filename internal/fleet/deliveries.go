package fleet

import (
	"fmt"
	"sync/atomic"

	"github.com/reprise-harness/reprise/internal/profile"
)

// Expected deliveries: the fleet knows who was in each of its rooms when
// each message went out, and the profile says how the server fans a
// message out (profile.Fanout), so it knows what each client should have
// received and loss shows whatever the protocol numbers.
//
// The bookkeeping is per send, not per receipt: a room counts the casts
// its members wrote (castRoom, one atomic add per sender's write batch),
// and a client notes the room's count when it joins and when it goes. What
// it should have received is the casts in between, less its own under
// FanoutOthers; what it did receive is Events.Casts, added per read. The
// receive path gains one uncontended atomic add per read that held casts.

// castRoom counts a room's casts: the counted sends whose fan-out reaches
// its members (FanoutAll, FanoutOthers), counted before they are written
// so that a member that joined after the count never misses one it was
// counted for. The count is striped, a stripe a scheduler (modulo
// castStripes), each on a line of its own: a room's senders are spread
// over the schedulers, and one count they all added to moved between
// the cores at nearly every send (issue 34). Reads (a join, a leave,
// the tally) sum the stripes.
type castRoom struct {
	by [castStripes]struct {
		n atomic.Int64
		_ [56]byte
	}
}

// castStripes is how many stripes a room's count has.
const castStripes = 4

// add counts n casts sent by the scheduler of index sched.
func (r *castRoom) add(sched int, n int64) { r.by[uint(sched)%castStripes].n.Add(n) }

// count is the room's casts so far.
func (r *castRoom) count() int64 {
	var n int64
	for i := range r.by {
		n += r.by[i].n.Load()
	}
	return n
}

// roomKey is a room as the server keeps it apart from others: where the
// connection goes ("" the target, else a later turn's LoadedFlow.Connect)
// and the name it joins. Clients that play other flows side by side
// (--flows all), or the same flow in another turn, share a room only
// where their server does: a room index alone would count one flow's
// casts as owed to another's members (hall and arena as one room).
type roomKey struct{ connect, name string }

// castRoom is key's cast count, made on first use.
func (f *Fleet) castRoom(key roomKey) *castRoom {
	f.roomsMu.Lock()
	defer f.roomsMu.Unlock()
	r := f.castRooms[key]
	if r == nil {
		r = new(castRoom)
		f.castRooms[key] = r
	}
	return r
}

// castCount is one send batch's casts, by fan-out.
type castCount struct{ all, others, unknown int64 }

func (k *castCount) add(f profile.Fanout) {
	switch f {
	case profile.FanoutAll:
		k.all++
	case profile.FanoutOthers:
		k.others++
	case profile.FanoutServer:
		k.unknown++
	}
}

// flush adds a batch's casts to the client's room, before its write.
func (k castCount) flush(c *client) {
	if n := k.all + k.others; n > 0 {
		c.room.add(c.sched.index, n)
		if k.others > 0 {
			c.ownOthers.Add(k.others)
		}
	}
	if k.unknown > 0 {
		c.sched.c.castsUnknown.Add(k.unknown)
	}
}

// joinedRoom notes the room's casts when the client starts receiving
// them: at joined, or over UDP at the relay's confirmation (before it the
// relay sends the session nothing).
func (c *client) joinedRoom() { c.inAt.Store(c.room.count()) }

// leftRoom notes the room's casts when the client stops receiving: its
// disconnect or its leave (once).
func (c *client) leftRoom() { c.outAt.CompareAndSwap(-1, c.room.count()) }

// expected is what a logged-in client should have received so far.
func (c *client) expected() int64 {
	out := c.outAt.Load()
	if out < 0 {
		out = c.room.count()
	}
	return max(out-c.inAt.Load()-c.ownOthers.Load(), 0)
}

// tally sums the expected and received casts of clients, per client so
// that one client's surplus (a cast that raced its join) never hides
// another's loss. Guarded by Fleet.mu.
type tally struct {
	expected, received, lost int64
	// receivers had casts expected; starved received none of them; min
	// is the fewest any receiver got (-1: no receiver).
	receivers, starved, min int64
}

func newTally() tally { return tally{min: -1} }

func (t *tally) add(expected, received int64) {
	t.expected += expected
	t.received += received
	t.lost += max(expected-received, 0)
	if expected <= 0 {
		return
	}
	t.receivers++
	if received == 0 {
		t.starved++
	}
	if t.min < 0 || received < t.min {
		t.min = received
	}
}

// deliveries is the fleet's tally now: the clients gone (f.done) and the
// logged-in ones.
func (f *Fleet) deliveries() Deliveries {
	f.mu.Lock()
	t := f.done
	for c := range f.live {
		if c.joined.Load() && !c.leftInTurn() {
			t.add(c.expected(), c.casts.Load())
		}
	}
	turn := f.doneTurn
	f.mu.Unlock()
	var unknown int64
	for i := range f.stats.byScheduler {
		unknown += f.stats.byScheduler[i].castsUnknown.Load()
	}
	d := Deliveries{
		Expected: t.expected, Received: t.received, Lost: t.lost,
		Receivers: t.receivers, MinReceived: max(t.min, 0), Starved: t.starved,
		UnackedAtLeaveBytes: f.stats.leaveUnsent.Load(), ClientsUnackedAtLeave: f.stats.leaveCut.Load(),
	}
	d.LossPercent = lossShare(d.Expected, d.Lost)
	if turn.Connections > 0 {
		d.LeftInTurn = &turn
	}
	switch {
	case f.cfg.Shard.Sharded():
		d.NotMeasured = fmt.Sprintf("a room spans the %d shards (clients i mod %d) and each shard counts its own senders' casts only", f.cfg.Shard.count(), f.cfg.Shard.count())
	case unknown > 0:
		d.NotMeasured = fmt.Sprintf("the %s profile does not say how its server fans a message out (fanout: server): give fanout: others, all or none", f.profileName)
	}
	return d
}

// lossShare is lost / expected in percent; 0 with nothing expected.
func lossShare(expected, lost int64) float64 {
	if expected <= 0 || lost <= 0 {
		return 0
	}
	return 100 * float64(lost) / float64(expected)
}

// Deliveries compares the deliveries the server owed the clients (their
// rooms' casts while they were in, by the profile's fan-out) with those
// that arrived.
type Deliveries struct {
	Expected int64 `json:"expected"`
	Received int64 `json:"received"`
	// Lost sums each client's shortfall (expected - received, at least
	// 0); LossPercent is Lost / Expected.
	Lost        int64   `json:"lost"`
	LossPercent float64 `json:"loss_percent"`
	// Receivers are the clients owed at least one delivery; MinReceived
	// the fewest any of them got; Starved those that got none although
	// their room had senders.
	Receivers   int64 `json:"receivers"`
	MinReceived int64 `json:"min_received"`
	Starved     int64 `json:"receivers_with_none"`
	// NotMeasured says why the fleet could not know what was owed; the
	// figures above are then not loss.
	NotMeasured string `json:"not_measured,omitempty"`
	// UnackedAtLeaveBytes are the bytes the kernel still held unsent or
	// unacknowledged (SIOCOUTQ) when TCP clients closed at the leave,
	// ClientsUnackedAtLeave those clients: sends counted as sent that the
	// server may never have read, so deliveries owed by them may be owed
	// by nobody.
	UnackedAtLeaveBytes   int64 `json:"unacked_at_leave_bytes"`
	ClientsUnackedAtLeave int64 `json:"clients_unacked_at_leave"`
	// LeftInTurn are the deliveries of the connections that clients left
	// for their next (turns.go), apart from the figures above and not
	// judged as loss: casts sent while such a connection left reached
	// the server before or after its leave, which only the server knows
	// (a busy server's reads of its sockets lag by tens of ms). Nil when
	// no client played connections in turn.
	LeftInTurn *TurnDeliveries `json:"left_in_turn,omitempty"`
}

// TurnDeliveries are the casts owed to connections left in turn until
// each left, and those they received until the server closed them.
type TurnDeliveries struct {
	Connections int64 `json:"connections"`
	Expected    int64 `json:"expected"`
	Received    int64 `json:"received"`
}

// Measured reports whether the expected deliveries are known.
func (d Deliveries) Measured() bool { return d.NotMeasured == "" }

// line is the text summary's row.
func (d Deliveries) line() string {
	if !d.Measured() {
		return fmt.Sprintf("not measured: %s (received %d)", d.NotMeasured, d.Received) + d.unackedText()
	}
	return fmt.Sprintf("%d / %d (lost %d, %.3f%%)", d.Expected, d.Received, d.Lost, d.LossPercent) + d.unackedText() + d.turnText()
}

// turnText is the connections left in turn's, "" when none.
func (d Deliveries) turnText() string {
	if t := d.LeftInTurn; t != nil {
		return fmt.Sprintf("; and %d / %d to %d connections left in turn (not judged: casts racing a leave)", t.Expected, t.Received, t.Connections)
	}
	return ""
}

// unackedText is what the leave left unacknowledged, "" when nothing.
func (d Deliveries) unackedText() string {
	if d.ClientsUnackedAtLeave == 0 {
		return ""
	}
	return fmt.Sprintf("; %d sent bytes of %d clients unacknowledged by the server's TCP at the leave", d.UnackedAtLeaveBytes, d.ClientsUnackedAtLeave)
}

// receiversLine is the text summary's per-client row.
func (d Deliveries) receiversLine() string {
	if !d.Measured() {
		return "not measured"
	}
	if d.Receivers == 0 {
		return "none owed a delivery"
	}
	return fmt.Sprintf("min %d over %d receivers; %d received nothing while their room had senders", d.MinReceived, d.Receivers, d.Starved)
}

// mergeDeliveries adds one shard's deliveries to the merged ones (first:
// out is still empty).
func mergeDeliveries(out *Deliveries, d Deliveries, first bool) {
	if out.NotMeasured == "" {
		out.NotMeasured = d.NotMeasured
	}
	switch {
	case d.Receivers == 0:
	case first || out.Receivers == 0 || d.MinReceived < out.MinReceived:
		out.MinReceived = d.MinReceived
	}
	out.Expected += d.Expected
	out.Received += d.Received
	out.Lost += d.Lost
	out.Receivers += d.Receivers
	out.Starved += d.Starved
	out.UnackedAtLeaveBytes += d.UnackedAtLeaveBytes
	out.ClientsUnackedAtLeave += d.ClientsUnackedAtLeave
	out.LossPercent = lossShare(out.Expected, out.Lost)
	if t := d.LeftInTurn; t != nil {
		if out.LeftInTurn == nil {
			out.LeftInTurn = &TurnDeliveries{}
		}
		out.LeftInTurn.Connections += t.Connections
		out.LeftInTurn.Expected += t.Expected
		out.LeftInTurn.Received += t.Received
	}
}

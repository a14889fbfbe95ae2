package profile

import (
	"errors"

	"github.com/reprise-harness/reprise/internal/hdrcounts"
	"github.com/reprise-harness/reprise/internal/session"
)

// Player is a recorded session compiled by a profile: what every client
// of a fleet plays. It is immutable and shared by all clients.
type Player interface {
	// Timeline is the script's timing (steps are its messages).
	Timeline() *session.Timeline
	// LoginSteps is how many script steps the login takes (all its
	// steps'): the schedule starts there. The fleet sends the login's
	// first step (Client.AppendLogin); the profile answers with the later
	// ones (Events.Reply).
	LoginSteps() int
	// Kinds name the sent kinds; AppendStep returns an index into them.
	Kinds() KindNames
	// Counted reports whether sends of kind k count as sent messages.
	Counted(k int) bool
	// Fanout is how the server passes step i's message on to the room,
	// for a counted send: its deliveries are what Events.Casts counts
	// (FanoutNone: none of them counted there).
	Fanout(i int) Fanout
	// HeartbeatKind and LeaveKind are the kinds of those messages.
	HeartbeatKind() int
	LeaveKind() int
	Transport() Transport
	// WSText says messages travel in WebSocket text frames (else binary).
	WSText() bool
	// Notes say what was dropped or adjusted while compiling.
	Notes() []string
	// Recorded are the recorded user id and room ("" when not found) and
	// the number of other users the recorded client addressed.
	Recorded() (user, room string, others int)
	// CheckID checks that a user id or room (what) fits the protocol.
	CheckID(what, id string) error
	// NewClient prepares one client's own bytes.
	NewClient(id Identity) (Client, error)
	// Replies says the reader may write after the login (a reaction's
	// answer, an acknowledgement), so the sender must share the
	// connection with it.
	Replies() bool
	// ClosedByRelay says a close without a reason is the reference
	// relay's (its protocol is the relay's), not an unknown server's.
	ClosedByRelay() bool
}

// Identity is who one replayed client is.
type Identity struct {
	// Index is the client's number in the fleet, from 0; Clients the size
	// of the fleet (for ids that keep the recorded length).
	Index, Clients int
	// User replaces the recorded user id; Room the recorded room (empty
	// keeps it); Peers[k] the k-th other recorded user.
	User  string
	Room  string
	Peers []string
	// PeerIndexes are the peers' indexes in the fleet (an index past it
	// stands for a user who is not there), for ids derived from an index.
	PeerIndexes []int
	// ServerIDs are the ids the server issued the fleet's clients (shared
	// by all; nil: peers' server ids are not mapped).
	ServerIDs *ServerIDs
	// Auth is a login token to put in the login, when the protocol has one.
	Auth []byte
	// Steps is how many script steps the client can ever play (a prefix:
	// session.Plan.Frames); 0 means all.
	Steps int
}

// Client is one replayed client's protocol state. AppendStep,
// AppendHeartbeat and AppendLeave run on the goroutine that sends; Feed
// on the one that reads. They share only values the client publishes
// safely (correlated values, the UDP session token before the login
// ends).
type Client interface {
	// UpgradeRequest is the client's WebSocket upgrade request (nil when
	// the transport is not websocket).
	UpgradeRequest() []byte
	// AppendLogin appends message i of the login's first step and returns
	// its kind; ok false when the step has no message i.
	AppendLogin(dst []byte, i int, now int64) (out []byte, kind int, ok bool)
	// LoginStage names the login step the client waits in ("" for a
	// one-step login), for the failure's label. It runs on the reader.
	LoginStage() string
	// AppendStep appends step i's message, stamped with now (Unix ns)
	// when it carries a latency stamp, and returns its kind.
	AppendStep(dst []byte, i int, now int64) ([]byte, int)
	// AppendHeartbeat appends a heartbeat (nothing when the protocol has
	// none).
	AppendHeartbeat(dst []byte, now int64) []byte
	// AppendLeave appends the goodbye (nothing when there is none).
	AppendLeave(dst []byte) []byte
	// Unanswered names the server kind (a profile's expects) that waited
	// for the client's answer when asked, "" for none: why a server that
	// said nothing closed the connection, as far as the wire shows.
	Unanswered() string
	// Feed takes bytes from the server (a stream read, one datagram, or
	// one WebSocket message) received at now (Unix ns) and adds what
	// they meant to ev.
	Feed(b []byte, now int64, ev *Events) error
}

// HotLines is a Client that says where a read of it begins in memory: it
// appends the addresses of the cache lines its Feed touches first (its
// own state, not the bytes read), for a fleet that asks the CPU for them
// while it reads another client (internal/prefetch, issue 34). The
// addresses are a hint, for as long as the client lives.
type HotLines interface {
	HotLines(dst []uintptr) []uintptr
}

// ErrNotProtocol is what Feed returns for bytes before the login's answer
// that are not the protocol's (the target speaks something else).
var ErrNotProtocol = errors.New("not the protocol's answer")

// Events is what a Feed found.
type Events struct {
	// Frames counts server messages, Messages the deliveries among them.
	Frames, Messages int64
	// Skipped counts what decoded as nothing and was let pass (a UDP
	// datagram that is no frame, once logged in), for SkipReason (a
	// constant: a bounded label).
	Skipped    int64
	SkipReason string
	// Casts are the deliveries of sends whose fan-out the player
	// declares (Player.Fanout): the received side of expected deliveries.
	Casts int64
	// Numbered are deliveries whose sender sequence was checked, Lost
	// the gaps found (late arrivals count back: it may go negative).
	Numbered, Lost int64
	// Latency, when set, counts the latency (µs) of each stamped
	// delivery as it is decoded: the fleet lends its recording counts
	// for the read. Unset, the latencies are appended to Latencies.
	Latency *hdrcounts.Counts
	// Latencies of stamped deliveries, in µs (appended) when Latency is
	// unset.
	Latencies []int64
	// LoggedIn is set when the login was accepted (and every awaited
	// value arrived).
	LoggedIn bool
	// Failed names a refused login.
	Failed string
	// Error names the last error the server reported after the login.
	Error string
	// Reply is what to send back now (appended): a pad request's answer,
	// a reaction's answer, a login's next step.
	Reply []byte
	// Replies mark the messages in Reply the profile composed: where each
	// ends in Reply and the kind it counts under (none for the reprise
	// profile's padded join, which the fleet counts as a join).
	Replies []Reply
	// Confirm is what proves the client's address after the login (a
	// reprise UDP session's first heartbeat): sent at once and again with
	// the login's backoff until Confirmed (the server's next message).
	Confirm   []byte
	Confirmed bool
	// Relogin says Reply replaces the login (a padded UDP join): a login
	// sent again goes out as Reply.
	Relogin bool
	// StartTLS says a login step that starts TLS was answered: a fleet
	// with --tls runs the handshake on the connection before it sends
	// Reply (the next step) and reads on through TLS.
	StartTLS bool
}

// Reset clears ev for the next read, keeping its buffers.
func (ev *Events) Reset() {
	*ev = Events{Latencies: ev.Latencies[:0], Reply: ev.Reply[:0], Replies: ev.Replies[:0], Confirm: ev.Confirm[:0]}
}

// latency accounts one stamped delivery's latency in µs.
func (ev *Events) latency(us int64) {
	if ev.Latency != nil {
		ev.Latency.Add(us)
		return
	}
	ev.Latencies = append(ev.Latencies, us)
}

// Reply is one message in Events.Reply.
type Reply struct {
	// End is its end offset in Reply; Kind the sent kind it counts under.
	End, Kind int
}

// WSFramer is a client whose recorded client sent both text and binary
// WebSocket frames (socket.io with a binary parser: Engine.IO's pong in
// text, events in binary): WSTextMessage tells each message's frame.
type WSFramer interface {
	WSFrames() bool
	WSTextMessage(m []byte) bool
}

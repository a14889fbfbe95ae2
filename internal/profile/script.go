package profile

import (
	"bytes"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reprise-harness/reprise/internal/session"
)

// ScriptOptions shape a compiled script.
type ScriptOptions struct {
	Loop  *session.Loop
	Speed float64
	// User and Room, when set, are the recorded user id and room, found
	// by value (they override the profile's places and proposals).
	User, Room string
	// RewritePayload also replaces recorded user ids inside payload
	// bytes, and MaxFrame caps a frame read (the reprise protocol's).
	RewritePayload bool
	MaxFrame       int
	// Variant forces the profile's way of logging in (--variant); empty:
	// the one the recording shows.
	Variant string
	// Measure: the script is for a run, which refuses a latency stamp
	// that `profile check` refuses (a send it would break): the run would
	// go on without latency, or with part of it. Inspect and check leave
	// it off, to report every problem.
	Measure bool
}

// Script is a recording compiled by a declarative or built-in profile
// (not reprise, whose script is reprise_script.go's).
type Script struct {
	p    *Profile
	tl   session.Timeline
	msgs []step
	// loginSteps is how many steps form the login; stages are its steps.
	loginSteps int
	stages     []stage
	user, room []byte
	// corrs are the recorded values of the profile's correlations, nil
	// when the recording does not show one.
	corrs [][]byte
	// unstamped is the first send the latency stamp would break (profile
	// check's problem), "" when none.
	unstamped string
	// others are the recorded ids of other users (identity.peers), in
	// the order they first appear.
	others [][]byte
	// serverOthers are the recorded server-issued ids of other clients
	// (identity.server_peers), in the order they first appear.
	serverOthers [][]byte
	upgrade      []byte
	notes        []string
	templates    int
	wsText       bool
	// wsFrames, for a recording whose client sent text and binary
	// frames, is the frame each client kind came in (1 text, 2 binary).
	wsFrames map[int]byte
	// client are the recorded client messages the script is cut from
	// (less the reactions' answers): script indexes point into them.
	client []Message
	// leave is the recorded goodbye; when set it is the last of msgs,
	// after the timeline's steps.
	leave Message
}

// step is one script message.
type step struct {
	bytes []byte
	kind  int
	// template marks messages that hold the user id or room; tmpl is
	// then the index of the client's own bytes.
	template bool
	tmpl     int
	// corr lists the correlations it carries.
	corr []int
	// stamp is 0 when the message carries a latency stamp, -1 when not.
	stamp int
	// fresh lists the fresh fields it carries.
	fresh []int
	// peers lists the recorded peers' server ids it carries.
	peers []int
}

// Compile builds a script from a recording cut into messages.
func (p *Profile) Compile(m Messages, opts ScriptOptions) (*Script, error) {
	vp, why, err := p.pickVariant(opts.Variant, m)
	if err != nil {
		return nil, err
	}
	switch {
	case why != "":
		why = fmt.Sprintf("logs in as variant %s: %s", vp.variant, why)
	case len(p.variants) > 0:
		why = fmt.Sprintf("logs in as variant %s: the recording shows no other of %s (--variant forces one)", p.variant, strings.Join(p.Variants(), ", "))
	}
	p = vp
	s := &Script{p: p, upgrade: m.Upgrade, wsText: m.WSText, notes: append(append([]string(nil), m.Notes...), m.Dropped...)}
	if why != "" {
		s.notes = append(s.notes, why)
	}
	if m.HTTP != nil {
		return nil, fmt.Errorf("profile %s: an HTTP flow (%s), not a WebSocket: replay the socket's flow (--flow) and make this request an http step", p.Name, m.HTTP[0])
	}
	if p.Transport == WebSocket && m.Upgrade == nil {
		return nil, fmt.Errorf("profile %s: the recorded flow has no WebSocket upgrade request", p.Name)
	}
	if len(m.Client) == 0 {
		return nil, fmt.Errorf("profile %s: the flow has no client messages", p.Name)
	}
	s.wsFrames = mixedFrames(m.Client)
	m.Client = s.dropAnswers(m.Client)
	s.client = m.Client
	first, last := p.loginRange(m.Client)
	if first < 0 {
		return nil, fmt.Errorf("profile %s: no login message (kinds %s) in the flow", p.Name, strings.Join(p.loginKinds(), ", "))
	}
	if first > 0 {
		s.notes = append(s.notes, fmt.Sprintf("dropped %d messages before the login", first))
	}
	if lk := p.LeaveKind(); lk > 0 {
		for i := first + 1; i < last; i++ {
			if m.Client[i].Kind == lk {
				// The recorded goodbye, rewritten per client, is the leave
				// (unless the profile says to leave without one).
				if !p.noGoodbye() {
					s.leave = m.Client[i]
				}
				s.notes = append(s.notes, fmt.Sprintf("dropped %d messages from the %s at #%d on: the fleet leaves by itself", last-i, p.Kinds[lk], i))
				last = i
				break
			}
		}
	}
	kept := m.Client[first:last]
	if p.steps == nil {
		s.loginSteps = 1
		for s.loginSteps < len(kept) && p.loginSend[kept[s.loginSteps].Kind] {
			s.loginSteps++
		}
		st := stage{}
		for i := range s.loginSteps {
			st.sends = append(st.sends, stageSend{msg: i})
		}
		s.stages = []stage{st}
	} else {
		var err error
		if s.stages, s.loginSteps, err = s.planLogin(kept); err != nil {
			return nil, err
		}
	}
	firstSend := len(kept)
	for i := s.loginSteps; i < len(kept); i++ {
		if p.counted(kept[i].Kind) {
			firstSend = i
			break
		}
	}
	flow := make([]time.Duration, len(m.Client))
	for i, c := range m.Client {
		flow[i] = c.Offset
	}
	tl, err := session.NewTimeline(session.TimelineInput{Flow: flow, First: first, Last: last, FirstSend: firstSend, Loop: opts.Loop, Speed: opts.Speed})
	if err != nil {
		return nil, err
	}
	s.tl = tl
	s.findRecorded(kept, m.Server, opts)
	s.findCorrelations(m.Server)
	s.findHTTPRecorded(kept)
	s.findServerPeers(kept)
	s.noteInstance(m.Server)
	for _, c := range kept {
		s.msgs = append(s.msgs, s.step(c))
	}
	if s.leave.Bytes != nil {
		st := s.step(s.leave)
		st.template = true
		s.msgs = append(s.msgs, st)
	}
	for i := range s.msgs {
		if s.msgs[i].template {
			s.msgs[i].tmpl = s.templates
			s.templates++
		}
	}
	if opts.Measure && s.unstamped != "" {
		return nil, fmt.Errorf("profile %s: latency: %s: the run would measure no latency for those sends (profile check --capture says the same): fix the profile's latency, or remove it", p.Name, s.unstamped)
	}
	return s, nil
}

// dropAnswers leaves out the recorded client messages of a kind a
// reaction sends (as: pong): the reaction answers each server message by
// itself, and a replayed answer would answer nothing (a server that
// refuses an unsolicited pong closes the connection).
func (s *Script) dropAnswers(msgs []Message) []Message {
	answers := map[int]bool{}
	for _, r := range s.p.reacts {
		if r.as > 0 && !s.p.loginSend[r.as] && !s.p.sends[r.as] {
			answers[r.as] = true
		}
	}
	if len(answers) == 0 {
		return msgs
	}
	out := make([]Message, 0, len(msgs))
	dropped := map[int]int{}
	for _, c := range msgs {
		if answers[c.Kind] {
			dropped[c.Kind]++
			continue
		}
		out = append(out, c)
	}
	for k := range s.p.Kinds {
		if n := dropped[k]; n > 0 {
			s.notes = append(s.notes, fmt.Sprintf("dropped %d recorded %s messages: a reaction sends them, answering the server", n, s.p.Kinds[k]))
		}
	}
	return out
}

// loginRange is [first, last) of the client messages to play: from the
// first login message to the end.
func (p *Profile) loginRange(c []Message) (int, int) {
	if p.steps != nil {
		// A login in steps starts at the first message of the first kind
		// a step sends.
		if i := p.firstLogin(c); i >= 0 {
			return i, len(c)
		}
		return -1, 0
	}
	if len(p.loginSend) == 0 {
		return 0, len(c)
	}
	for i, m := range c {
		if p.loginSend[m.Kind] {
			return i, len(c)
		}
	}
	return -1, 0
}

// firstOf is the index of the first message of kind k, -1 for none.
func (p *Profile) firstOf(c []Message, k int) int {
	for i, m := range c {
		if m.Kind == k {
			return i
		}
	}
	return -1
}

func (p *Profile) loginKinds() []string {
	var out []string
	for k := range p.loginSend {
		out = append(out, p.Kinds[k])
	}
	return out
}

// counted reports whether client kind k is a sent message.
func (p *Profile) counted(k int) bool {
	if len(p.sends) > 0 {
		return p.sends[k]
	}
	return !p.loginSend[k] && k != p.LeaveKind() && k != p.HeartbeatKind() && !p.reactAs[k]
}

// noGoodbye reports whether the profile leaves without a goodbye
// (leave: {text: ""}): the fleet then only closes.
func (p *Profile) noGoodbye() bool { return p.leave != nil && len(p.leave) == 0 }

// HeartbeatKind is the kind index of heartbeats.
func (p *Profile) HeartbeatKind() int { return p.Kinds.index("heartbeat") }

// LeaveKind is the kind index of the leave.
func (p *Profile) LeaveKind() int { return p.Kinds.index("leave") }

func (s *Script) findRecorded(kept, server []Message, opts ScriptOptions) {
	p := s.p
	take := func(f *fieldRule) []byte {
		if f == nil {
			return nil
		}
		if f.value != nil {
			return f.value
		}
		for _, m := range kept {
			if v := f.take(m.Bytes, m.Kind); v != nil {
				return append([]byte(nil), v...)
			}
		}
		// A value carried only by the WebSocket upgrade (a query
		// parameter, a header): the upgrade is rewritten like a message.
		if f.re != nil && s.upgrade != nil {
			if g := f.re.FindSubmatch(s.upgrade); len(g) > 1 && len(g[1]) > 0 {
				return append([]byte(nil), g[1]...)
			}
		}
		return nil
	}
	s.user, s.room = take(p.identity.user), take(p.identity.room)
	if p.hooks != nil && (s.user == nil || s.room == nil) {
		u, r := p.hooks.recorded(kept)
		if s.user == nil {
			s.user = u
		}
		if s.room == nil {
			s.room = r
		}
	}
	if opts.User != "" {
		s.user = []byte(opts.User)
	}
	if opts.Room != "" {
		s.room = []byte(opts.Room)
	}
	if f := p.identity.peers; f != nil {
		for _, m := range kept {
			v := f.take(m.Bytes, m.Kind)
			if len(v) == 0 || bytes.Equal(v, s.user) || containsValue(s.others, v) {
				continue
			}
			if len(s.others) == maxPeers {
				s.notes = append(s.notes, fmt.Sprintf("more than %d other users: the rest keep their recorded ids", maxPeers))
				break
			}
			s.others = append(s.others, append([]byte(nil), v...))
		}
	}
	for _, v := range [][]byte{s.user, s.room} {
		if v != nil && !containsAny(kept, v) && !bytes.Contains(s.upgrade, v) {
			s.notes = append(s.notes, fmt.Sprintf("recorded value %q appears in no client message: nothing to rewrite", v))
		}
	}
	if s.room != nil {
		s.roomPatterns()
	}
	if s.user == nil {
		s.notes = append(s.notes, "no recorded user id: every client sends the recorded one (give --recorded-user or identity.user)")
	}
}

// maxPeers bounds the other users a script maps.
const maxPeers = 64

func containsValue(vs [][]byte, v []byte) bool {
	for _, x := range vs {
		if bytes.Equal(x, v) {
			return true
		}
	}
	return false
}

// roomPatterns notes the kinds whose pattern holds the recorded room: a
// client whose room is rewritten (--room, --room-size) gets messages that
// no longer match them (deliveries that count 0 and lose none).
func (s *Script) roomPatterns() {
	var names []string
	check := func(kinds []kind) {
		for _, k := range kinds {
			m := &k.m
			if bytes.Contains(m.prefix, s.room) || (m.re != nil && strings.Contains(m.re.String(), string(s.room))) {
				names = append(names, k.name)
			}
		}
	}
	check(s.p.client)
	check(s.p.server)
	if len(names) > 0 {
		s.notes = append(s.notes, fmt.Sprintf("WARNING: kinds %s match on the recorded room %q: with --room or --room-size the clients' messages hold another room and match them no more (deliveries would count 0); match without the room", strings.Join(names, ", "), s.room))
	}
}

func containsAny(msgs []Message, v []byte) bool {
	for _, m := range msgs {
		if bytes.Contains(m.Bytes, v) {
			return true
		}
	}
	return false
}

// findCorrelations takes each correlation's recorded value from the
// recorded server messages.
func (s *Script) findCorrelations(server []Message) {
	s.corrs = make([][]byte, len(s.p.corrs))
	for i := range s.p.corrs {
		c := &s.p.corrs[i]
		if c.handed() {
			continue // findHTTPRecorded
		}
		for _, m := range server {
			if v := c.from.take(m.Bytes, m.Kind); len(v) > 0 {
				s.corrs[i] = append([]byte(nil), v...)
				break
			}
		}
		if s.corrs[i] == nil {
			s.notes = append(s.notes, fmt.Sprintf("correlation %s: no recorded server message holds it: not substituted", c.name))
		}
	}
}

func (s *Script) step(m Message) step {
	st := step{bytes: m.Bytes, kind: m.Kind, stamp: -1}
	for _, v := range append([][]byte{s.user, s.room}, s.others...) {
		if v != nil && bytes.Contains(m.Bytes, v) {
			st.template = true
		}
	}
	st.peers = s.serverPeersIn(m.Bytes)
	for i := range s.p.fresh {
		if s.p.fresh[i].applies(m.Bytes, m.Kind) {
			st.fresh = append(st.fresh, i)
		}
	}
	if s.p.hooks != nil && s.p.hooks.templated(m.Bytes) {
		st.template = true
	}
	for i, c := range s.p.corrs {
		if s.corrs[i] != nil && (c.into == nil || c.into[m.Kind]) && bytes.Contains(m.Bytes, s.corrs[i]) {
			st.corr = append(st.corr, i)
		}
	}
	if r := s.p.stamp; r != nil && r.send == m.Kind {
		// A stamp that would break the message is left out (profile
		// check says why).
		if why := s.p.stampProblem(m.Bytes, s.wsText); why != "" {
			if s.unstamped == "" {
				s.unstamped = fmt.Sprintf("a %s send: %s", s.p.KindName(m.Kind), why)
			}
			s.stampNote(why)
		} else if b, err := s.p.makeRoom(m.Bytes); err == nil {
			st.bytes, st.stamp = b, 0
		}
	}
	return st
}

// stampNote notes why sends go unstamped, once (the first reason).
func (s *Script) stampNote(why string) {
	const head = "latency: some sends are not stamped: "
	for _, have := range s.notes {
		if strings.HasPrefix(have, head) {
			return
		}
	}
	s.notes = append(s.notes, head+why)
}

// Timeline implements Player.
func (s *Script) Timeline() *session.Timeline { return &s.tl }

// LoginSteps implements Player.
func (s *Script) LoginSteps() int { return s.loginSteps }

// Kinds implements Player.
func (s *Script) Kinds() KindNames { return s.p.Kinds }

// Counted implements Player.
func (s *Script) Counted(k int) bool { return s.p.counted(k) }

// Fanout implements Player: the profile's for a counted send, none for
// the other messages.
func (s *Script) Fanout(i int) Fanout {
	if !s.p.counted(s.msgs[i].kind) {
		return FanoutNone
	}
	return s.p.fanout
}

// HeartbeatKind implements Player.
func (s *Script) HeartbeatKind() int { return s.p.HeartbeatKind() }

// LeaveKind implements Player.
func (s *Script) LeaveKind() int { return s.p.LeaveKind() }

// Transport implements Player.
func (s *Script) Transport() Transport { return s.p.Transport }

// WSText implements Player.
func (s *Script) WSText() bool { return s.wsText }

// mixedFrames is the frame each client kind came in when the client
// sent both text and binary frames (socket.io with a binary parser:
// Engine.IO's pong in text, events in binary), nil when one kind of
// frame carried all.
func mixedFrames(msgs []Message) map[int]byte {
	var text, bin bool
	for _, m := range msgs {
		text, bin = text || m.Text, bin || !m.Text
	}
	if !text || !bin {
		return nil
	}
	out := map[int]byte{}
	for _, m := range msgs {
		if _, ok := out[m.Kind]; !ok {
			out[m.Kind] = map[bool]byte{true: 1, false: 2}[m.Text]
		}
	}
	return out
}

// WSFrames implements WSFramer.
func (c *client) WSFrames() bool { return c.s.wsFrames != nil }

// WSTextMessage implements WSFramer: as m's kind was recorded, else
// when m is UTF-8 (a reaction's answer of a kind the recording did not
// send).
func (c *client) WSTextMessage(m []byte) bool {
	if f, ok := c.s.wsFrames[c.s.p.ClientKind(m)]; ok {
		return f == 1
	}
	return utf8.Valid(m)
}

// Replies implements Player: answers and reactions go out from the
// reader.
func (s *Script) Replies() bool { return true }

// ClosedByRelay implements Player.
func (s *Script) ClosedByRelay() bool { return false }

// Notes implements Player.
func (s *Script) Notes() []string { return s.notes }

// Recorded implements Player.
func (s *Script) Recorded() (string, string, int) {
	return string(s.user), string(s.room), max(len(s.others), len(s.serverOthers))
}

// Step is script message i's recorded bytes and kind (for inspect).
func (s *Script) Step(i int) ([]byte, int) { return s.msgs[i].bytes, s.msgs[i].kind }

// CorrelationValues are the recorded values of the correlations, by name.
func (s *Script) CorrelationValues() map[string][]byte {
	out := map[string][]byte{}
	for i, c := range s.p.corrs {
		if s.corrs[i] != nil {
			out[c.name] = s.corrs[i]
		}
	}
	return out
}

// CheckID implements Player: ids must be printable and at most 255
// bytes; a protocol that keeps lengths says so when a client is built.
func (s *Script) CheckID(what, id string) error {
	if id == "" || len(id) > 255 {
		return fmt.Errorf("%s %q: 1 to 255 bytes", what, id)
	}
	for _, r := range id {
		if r < 0x21 || r == 0x7f {
			return fmt.Errorf("%s %q: no spaces or control characters", what, id)
		}
	}
	return nil
}

package profile

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/session"
)

// ErrBadConfig marks errors in what the loader was asked (bad flags):
// the fleet's and the commands' ErrBadConfig are this one.
var ErrBadConfig = errors.New("bad configuration")

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

// DefaultCaptureMemory caps what reading a capture holds (--max-memory).
const DefaultCaptureMemory = capture.DefaultMaxMemory

// Source is what a fleet replays: a flow (or flows) of a capture file,
// or frames a program built (the reprise protocol's, over TCP).
type Source struct {
	// Capture is the pcap/pcapng file; Frames, when set, are used
	// instead.
	Capture string
	Frames  []session.Frame
	// Flow picks a flow by its index in `replay inspect`; -1 is the
	// longest. Client, if valid, picks the flow of that recorded client
	// address instead (the longest of them, if its port was reused).
	Flow   int
	Client netip.AddrPort
	// Flows, when set, picks several flows (--flows); it excludes Flow,
	// Client and Frames.
	Flows FlowSet
	// MaxFrame caps a reprise frame read from the capture or the relay;
	// 0 means wire.DefaultMaxFrame. ServerPort tells a flow's client side
	// when nothing else does; 0 means the profile's port.
	MaxFrame   int
	ServerPort uint16
	// CaptureMemory caps what reading the capture holds; 0 means
	// DefaultCaptureMemory.
	CaptureMemory int64
	// Transport overrides the recorded transport ("tcp", "udp",
	// "websocket"); empty keeps the capture's (tcp for Frames).
	Transport string
	// KeyLog decrypts the capture's TLS flows (--tls-keylog).
	KeyLog *KeyLog
	// Variant forces the profile's way of logging in (--variant); empty:
	// the one the recording shows.
	Variant string
}

// KeyLog is the TLS key log a capture's TLS flows are decrypted with,
// named here so the fleet can carry one without reading captures.
type KeyLog = capture.KeyLog

// Loaded is a source compiled by a profile: the players of the chosen
// flows and the notes on what was read, dropped or adjusted.
type Loaded struct {
	// Flows are the players; one unless Source.Flows chose several
	// (Many), each with its index in `replay inspect` and weight.
	Flows []LoadedFlow
	Many  bool
	Notes []string
}

// LoadedFlow is one compiled flow.
type LoadedFlow struct {
	Index, Weight int
	// Client is the recorded client's address ("" for Frames).
	Client string
	Player Player
	// ALPN are the protocols the recorded TLS handshake named (the one
	// negotiated, else those offered): a fleet with --tls offers them.
	ALPN []string
	// Then is the connection the same client plays next, in turn (nil:
	// none): the recorded client left this flow's server for Then's
	// (played on, not a lobby's step). The client plays this flow for
	// HandoverAt after its login, leaves, and logs in with Then.
	Then       *LoadedFlow
	HandoverAt time.Duration
	// Connect is where a later turn's connection goes: "" the target,
	// ":port" the target's host at the port the recording connected to,
	// else host:port.
	Connect string
}

// Turns is how many connections the flow's client plays in turn.
func (f *LoadedFlow) Turns() int {
	n := 1
	for t := f.Then; t != nil; t = t.Then {
		n++
	}
	return n
}

// Player is the first flow's player: the one every client of a
// one-flow fleet plays.
func (l *Loaded) Player() Player { return l.Flows[0].Player }

// Load reads src through p and compiles what it chose with opts: the one
// loader of replay, its fleet runners, inspect and `profile check`.
func Load(p *Profile, src Source, opts ScriptOptions) (*Loaded, error) {
	if opts.MaxFrame == 0 {
		opts.MaxFrame = src.MaxFrame
	}
	if opts.Variant == "" {
		opts.Variant = src.Variant
	}
	if src.Flows.IsSet() {
		return loadFlows(p, src, opts)
	}
	if !p.reprise {
		if src.Capture == "" {
			return nil, badf("--profile %s needs --capture", p.Name)
		}
		if t := src.Transport; t != "" && t != string(p.Transport) {
			return nil, badf("--transport %s: the %s profile runs over %s", t, p.Name, p.Transport)
		}
	}
	var (
		pl    Player
		notes []string
		alpn  []string
	)
	if src.Frames != nil {
		var err error
		if pl, err = p.compileFrames(src.Frames, src.transport("tcp"), 0, opts); err != nil {
			return nil, err
		}
	} else {
		c, fl, err := readFlow(src.Capture, src.Flow, src.Client, p.captureOptions(src), p.noFlow(src.Capture))
		if err != nil {
			return nil, err
		}
		if src.Flow < 0 && !src.Client.IsValid() && p.httpFlows() && HTTPExchanges(RecordingOf(fl)) != nil {
			// The longest flow is a client's kept-alive HTTP connection:
			// the default is its longest socket (read whole, once).
			if all, err := readPartial(src.Capture, p.captureOptions(src)); err == nil && p.Longest(all) != nil {
				c, fl = all, p.Longest(all)
			}
		}
		notes = append(append(notes, c.Warnings...), fl.Notes...)
		alpn = recordedALPN(fl.TLS)
		if pl, err = p.compileFlow(fl, src, opts); err != nil {
			if !p.reprise {
				err = fmt.Errorf("%w: %v", ErrBadConfig, err)
			}
			return nil, err
		}
	}
	return &Loaded{Flows: []LoadedFlow{{Index: src.Flow, Weight: 1, Player: pl, ALPN: alpn}}, Notes: append(notes, pl.Notes()...)}, nil
}

// recordedALPN reads the ALPN of a recorded TLS handshake: "h2", or the
// offer "h2,http/1.1 (offered)" when the server's answer is not known.
func recordedALPN(t *capture.TLSInfo) []string {
	if t == nil || t.ALPN == "" {
		return nil
	}
	list := strings.TrimSuffix(t.ALPN, " (offered)")
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// transport is the one the source asks for, else def.
func (src Source) transport(def string) string {
	if src.Transport != "" {
		return src.Transport
	}
	return def
}

// captureOptions is how p reads a capture: the reprise protocol's frames
// cut by its framer while the capture is read, any other profile's
// payloads raw, for Messages to cut.
func (p *Profile) captureOptions(src Source) capture.Options {
	port := p.Port
	if src.ServerPort != 0 {
		port = src.ServerPort
	}
	o := capture.Options{ServerPort: port, MaxMemory: src.CaptureMemory, KeyLog: src.KeyLog}
	if p.reprise {
		o.Framer = RepriseFramer(src.MaxFrame)
	}
	return o
}

// noFlow is the error of a capture with no flow to replay.
func (p *Profile) noFlow(path string) func(*capture.Capture) error {
	if p.reprise {
		return func(c *capture.Capture) error {
			_, err := Usable(c)
			return fmt.Errorf("read capture %s: %w", path, err)
		}
	}
	return func(*capture.Capture) error {
		return fmt.Errorf("read capture %s: no flow with client data", path)
	}
}

// compileFlow compiles one flow of a capture read with captureOptions.
func (p *Profile) compileFlow(fl *capture.Flow, src Source, opts ScriptOptions) (Player, error) {
	if p.reprise {
		return p.compileFrames(framesOf(fl), src.transport(string(fl.Transport)), fl.Duration(), opts)
	}
	return p.Compile(p.Messages(RecordingOf(fl)), opts)
}

// compileFrames is the reprise protocol's player of one flow's frames.
func (p *Profile) compileFrames(frames []session.Frame, transport string, end time.Duration, opts ScriptOptions) (Player, error) {
	if transport == "websocket" {
		return nil, badf("--transport websocket: the reprise profile runs over tcp or udp")
	}
	s, err := newRepriseScript(frames, repriseOptions{Speed: opts.Speed, RewritePayload: opts.RewritePayload, Loop: opts.Loop, End: end, MaxFrame: opts.MaxFrame})
	if errors.Is(err, errNoJoin) {
		// The capture, not the flags: the same failure as inspect's.
		return nil, fmt.Errorf("%w: %v", capture.ErrUnusable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	rp := newReprise(s, transport == "udp")
	rp.MaxFrame = opts.MaxFrame
	return rp, nil
}

// loadFlows compiles one player per chosen flow (src.Flows). With All, a
// flow that cannot be compiled is skipped and a note says why; a listed
// flow that cannot be is an error.
func loadFlows(p *Profile, src Source, opts ScriptOptions) (*Loaded, error) {
	if src.Capture == "" {
		return nil, badf("--flows needs --capture")
	}
	if t := src.Transport; !p.reprise && t != "" && t != string(p.Transport) {
		return nil, badf("--transport %s: the %s profile runs over %s", t, p.Name, p.Transport)
	}
	c, picked, skipped, err := readFlows(src.Capture, src.Flows, p.captureOptions(src))
	if err != nil {
		return nil, err
	}
	out := &Loaded{Many: true, Notes: append([]string(nil), c.Warnings...)}
	sess, err := p.sessions(picked, src.Flows.All, opts)
	if err != nil {
		return nil, err
	}
	out.Notes = append(out.Notes, sess.notes...)
	for _, pf := range picked {
		if sess.made[pf.index] {
			continue
		}
		fp := p
		if sp := sess.by[pf.index]; sp != nil {
			fp = sp
		} else if sp := sess.carry[pf.index]; sp != nil {
			fp = sp
		}
		pl, err := fp.compileFlow(pf.flow, src, opts)
		if err == nil {
			out.Flows = append(out.Flows, LoadedFlow{Index: pf.index, Weight: pf.weight, Client: pf.flow.Client.String(), Player: pl})
			for _, n := range pf.flow.Notes {
				out.Notes = append(out.Notes, fmt.Sprintf("flow %d: %s", pf.index, n))
			}
			continue
		}
		if !src.Flows.All {
			return nil, fmt.Errorf("--flows: flow %d (%s): %w", pf.index, pf.flow, err)
		}
		skipped = append(skipped, fmt.Sprintf("flow %d (%s): %v", pf.index, pf.flow, err))
	}
	if len(out.Flows) == 0 {
		return nil, fmt.Errorf("%w: --flows all: none of the %d flows of %s can be replayed (%s)", capture.ErrUnusable, len(c.Flows), src.Capture, strings.Join(skipped, "; "))
	}
	if src.Flows.All {
		var notes []string
		out.Flows, notes = inTurn(out.Flows, picked, sess.by, sess.next, opts.Speed)
		out.Notes = append(out.Notes, notes...)
	}
	first := out.Flows[0]
	for _, f := range out.Flows[1:] {
		if f.Player.Transport() != first.Player.Transport() {
			return nil, badf("--flows: flow %d and flow %d run over different transports; choose flows of one transport", first.Index, f.Index)
		}
	}
	idx := make([]string, len(out.Flows))
	weights := make([]string, len(out.Flows))
	total, weighted := 0, false
	for i, f := range out.Flows {
		idx[i], weights[i] = strconv.Itoa(f.Index), strconv.Itoa(f.Weight)
		total += f.Weight
		weighted = weighted || f.Weight != 1
	}
	how := fmt.Sprintf("client i plays the (i mod %d)-th of them", len(out.Flows))
	if weighted {
		how = fmt.Sprintf("weights %s: of each %d clients in join order, the first %s play the first flow, and so on", strings.Join(weights, ", "), total, weights[0])
	}
	out.Notes = append(out.Notes, fmt.Sprintf("--flows %s: replaying flows %s; %s", src.Flows, strings.Join(idx, ", "), how))
	for _, s := range skipped {
		out.Notes = append(out.Notes, "--flows all: skipped "+s)
	}
	for _, f := range out.Flows {
		for _, n := range f.Player.Notes() {
			out.Notes = append(out.Notes, fmt.Sprintf("flow %d: %s", f.Index, n))
		}
	}
	return out, nil
}

// flowSessions are the client groups of a --flows fleet (flowgroup.go):
// the profile each grouped realtime flow plays with (its client's
// recorded requests as HTTP steps), the HTTP flows those steps make
// (not played as clients of their own), and notes saying so.
type flowSessions struct {
	by    map[int]*Profile
	made  map[int]bool
	notes []string
	// carry are the flows whose profile carries values to or from
	// another played in turn (turncarry.go), and next each giving flow's
	// taker.
	carry map[int]*Profile
	next  map[int]int
}

// sessions groups the picked flows one client opened. A profile with
// HTTP steps of its own keeps them: they stand for the group's HTTP
// flows. A group whose requests cannot be steps is an error when its
// flows were listed, a note under --flows all (its flows then play as
// before: the HTTP ones skipped).
func (p *Profile) sessions(picked []pickedFlow, all bool, opts ScriptOptions) (flowSessions, error) {
	out := flowSessions{by: map[int]*Profile{}, made: map[int]bool{}}
	if p.reprise {
		return out, nil
	}
	maybe := false
	for _, pf := range picked {
		if c := pf.flow.ClientFrames; len(c) > 0 && httpStart.Match(c[0].Bytes) {
			maybe = true
			break
		}
	}
	if !maybe { // no flow is plain HTTP: nothing to group (and no flow read twice)
		return out, nil
	}
	flows, msgs := map[int]FlowData{}, map[int]Messages{}
	var data []FlowData
	for _, pf := range picked {
		r := RecordingOf(pf.flow)
		d := FlowData{Index: pf.index, Client: pf.flow.Client.String(), Server: pf.flow.Server.String(), Start: pf.flow.Start, HTTP: HTTPExchanges(r)}
		if d.HTTP == nil {
			m := p.Messages(r)
			d.Upgrade, d.Msgs, d.Answers = m.Upgrade, m.Client, m.Server
			if m.Upgrade != nil {
				d.Upgraded = UpgradeAnswer(r)
			}
			msgs[pf.index] = m
		}
		flows[pf.index] = d
		data = append(data, d)
	}
	links := Links(data)
	if all {
		var turn []Link
		turn, links = turnLinks(links, flows)
		p.carries(turn, &out)
	}
	for _, g := range sessionGroups(links) {
		if len(g.realtime) == 0 {
			continue
		}
		if p.hasHTTPAnyVariant() {
			for _, f := range g.http {
				out.made[f] = true
			}
			out.notes = append(out.notes, fmt.Sprintf("%s are one client's: the profile's http steps make flow %s's requests, then the client plays flow %s", g, joinInts(g.http), joinInts(g.realtime)))
			continue
		}
		// The recorded user id and room, as the socket's flow shows them.
		var own recordedIdentity
		if m, ok := msgs[g.realtime[0]]; ok {
			if s, err := p.Compile(m, opts); err == nil {
				own = recordedIdentity{user: string(s.user), room: string(s.room)}
			}
		}
		dp, steps, err := p.withRecordedSteps(g, flows, own)
		if err != nil {
			err = fmt.Errorf("%s are one client's, but its requests cannot be http steps: %w", g, err)
			if !all {
				return out, fmt.Errorf("--flows: %w", err)
			}
			out.notes = append(out.notes, "--flows all: "+err.Error()+"; its flows play as clients of their own")
			continue
		}
		for _, f := range g.http {
			out.made[f] = true
		}
		for _, f := range g.realtime {
			out.by[f] = dp
		}
		out.notes = append(out.notes, fmt.Sprintf("%s are one client's: each client makes the recorded requests as http steps %s, then plays flow %s with the values it was handed", g, strings.Join(steps, "; "), joinInts(g.realtime)))
		if len(g.realtime) > 1 {
			out.notes = append(out.notes, fmt.Sprintf("%s: flows %s are played by different clients, each making the requests first (one client does not yet play several connections in turn)", g, joinInts(g.realtime)))
		}
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// readFlow reads the capture in two passes: an index pass that keeps no
// frames finds the flows and picks one (flow < 0: the longest, client
// valid: that client's; none gives noFlow's error), then a pass keeps
// that flow's frames only, so a replay holds its script, not the file.
func readFlow(path string, flow int, client netip.AddrPort, opts capture.Options, noFlow func(*capture.Capture) error) (*capture.Capture, *capture.Flow, error) {
	index := opts
	index.Select = func(a, b netip.AddrPort) bool { return false }
	c, err := readPartial(path, index)
	if err != nil {
		return nil, nil, err
	}
	if client.IsValid() {
		var of []*capture.Flow
		for _, f := range c.Flows {
			if f.Client == client {
				of = append(of, f)
			}
		}
		c.Flows = of
		if len(of) == 0 {
			return nil, nil, badf("--client %s: no flow of the capture has this client (see replay inspect)", client)
		}
		flow = -1
	}
	if flow < 0 && c.Longest() == nil {
		if err := c.Undecrypted(-1); err != nil {
			return nil, nil, fmt.Errorf("read capture %s: %w", path, err)
		}
		return nil, nil, noFlow(c)
	}
	pick, err := pickFlow(c, path, flow)
	if err != nil {
		return nil, nil, err
	}
	for i, f := range c.Flows {
		if f == pick {
			if err := c.Undecrypted(i); err != nil {
				return nil, nil, fmt.Errorf("read capture %s: %w", path, err)
			}
		}
	}
	same := func(a, b netip.AddrPort) bool {
		return (a == pick.Client && b == pick.Server) || (a == pick.Server && b == pick.Client)
	}
	opts.Select = same
	c, err = readPartial(path, opts)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range c.Flows {
		// A port reused gives flows with the same endpoints: the start
		// tells them apart.
		if same(f.Client, f.Server) && f.Start.Equal(pick.Start) {
			return c, f, nil
		}
	}
	return nil, nil, fmt.Errorf("read capture %s: flow %s not found again on the second pass", path, pick)
}

// readPartial reads a capture; a structure break late in the file gives
// what was read before it, with a warning saying so.
func readPartial(path string, opts capture.Options) (*capture.Capture, error) {
	c, err := capture.ReadFile(path, opts)
	if err != nil {
		if c == nil || len(c.Flows) == 0 {
			return nil, fmt.Errorf("read capture: %w", err)
		}
		c.Warnings = append(c.Warnings, "capture cut short: "+err.Error())
	}
	return c, nil
}

// pickFlow is flow number flow of c, or its longest with flow < 0.
func pickFlow(c *capture.Capture, path string, flow int) (*capture.Flow, error) {
	switch {
	case flow < 0:
		if fl := c.Longest(); fl != nil {
			return fl, nil
		}
		return nil, fmt.Errorf("read capture %s: no flow with client data", path)
	case flow >= len(c.Flows):
		return nil, badf("--flow %d: the capture has %d flows (see replay inspect)", flow, len(c.Flows))
	}
	return c.Flows[flow], nil
}

// pickedFlow is a flow of the capture and its index in `replay inspect`.
type pickedFlow struct {
	index  int
	weight int
	flow   *capture.Flow
}

// readFlows reads the capture in two passes, as readFlow does for one: the
// index pass finds the flows and picks the set's (All: those with client
// data; the others are returned as skipped, with why), the second keeps
// those flows' frames only.
func readFlows(path string, set FlowSet, opts capture.Options) (*capture.Capture, []pickedFlow, []string, error) {
	index := opts
	index.Select = func(a, b netip.AddrPort) bool { return false }
	c, err := readPartial(path, index)
	if err != nil {
		return nil, nil, nil, err
	}
	var want []pickedFlow
	var skipped []string
	if set.All {
		for i, fl := range c.Flows {
			if fl.ClientCount == 0 {
				skipped = append(skipped, fmt.Sprintf("flow %d (%s): %s", i, fl, UnusableNoClient))
				continue
			}
			want = append(want, pickedFlow{i, 1, fl})
		}
	}
	for k, i := range set.Indexes {
		if i >= len(c.Flows) {
			return nil, nil, nil, badf("--flows %s: the capture has %d flows (see replay inspect)", set, len(c.Flows))
		}
		want = append(want, pickedFlow{i, set.Weight(k), c.Flows[i]})
	}
	if len(want) == 0 {
		_, err := Usable(c)
		if err == nil {
			err = errors.New("no flow with client data")
		}
		return nil, nil, nil, fmt.Errorf("read capture %s: %w", path, err)
	}
	ends := map[[2]netip.AddrPort]bool{}
	for _, p := range want {
		ends[[2]netip.AddrPort{p.flow.Client, p.flow.Server}] = true
	}
	opts.Select = func(a, b netip.AddrPort) bool { return ends[[2]netip.AddrPort{a, b}] || ends[[2]netip.AddrPort{b, a}] }
	c2, err := readPartial(path, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	for k, p := range want {
		found := false
		for _, fl := range c2.Flows {
			// A port reused gives flows with the same endpoints: the
			// start tells them apart.
			if fl.Client == p.flow.Client && fl.Server == p.flow.Server && fl.Start.Equal(p.flow.Start) {
				want[k].flow, found = fl, true
				break
			}
		}
		if !found {
			return nil, nil, nil, fmt.Errorf("read capture %s: flow %d (%s) not found again on the second pass", path, p.index, p.flow)
		}
	}
	return c2, want, skipped, nil
}

// framesOf is a capture flow's client frames as the reprise script's
// input.
func framesOf(fl *capture.Flow) []session.Frame {
	out := make([]session.Frame, len(fl.ClientFrames))
	for i, fr := range fl.ClientFrames {
		out[i] = session.Frame{Offset: fr.Offset, Bytes: fr.Bytes}
	}
	return out
}

// RecordingOf is a raw capture flow as a profile's recording.
func RecordingOf(fl *capture.Flow) Recording {
	seg := func(frames []capture.Frame) []Segment {
		out := make([]Segment, len(frames))
		for i, fr := range frames {
			out[i] = Segment{Offset: fr.Offset, Bytes: fr.Bytes}
		}
		return out
	}
	return Recording{Client: seg(fl.ClientFrames), Server: seg(fl.ServerFrames)}
}

// ReadCapture reads every flow of a capture as p reads it (Load's rule),
// for inspect and `profile check`. As capture.ReadFile, a structure break
// late in the file gives what was read before it and the error.
// keys, when set, decrypt its TLS flows.
func (p *Profile) ReadCapture(path string, keys *capture.KeyLog) (*capture.Capture, error) {
	if p.reprise {
		return nil, badf("--profile %s: use replay inspect without --profile", p.Name)
	}
	return capture.ReadFile(path, p.captureOptions(Source{KeyLog: keys}))
}

// ended is when a flow ended for inTurn: its last message either way, not
// its last packet. A UDP flow has no close (a datagram the server sent as
// the client left may arrive after the client moved on): its last client
// message. A TCP flow's teardown may outlast the client's move: over TLS
// a client reads the server's close_notify as the end and dials the next
// server, while the server's FIN and the last ACKs follow (under a slow
// server, after the next connection's SYN).
func ended(f *capture.Flow) time.Time {
	if len(f.ClientFrames) == 0 { // inTurn links no such flow; its close, then
		return f.End
	}
	last := f.ClientFrames[len(f.ClientFrames)-1].Time
	if f.Transport == capture.UDP {
		return last
	}
	if n := len(f.ServerFrames); n > 0 && f.ServerFrames[n-1].Time.After(last) {
		last = f.ServerFrames[n-1].Time
	}
	return last
}

// inTurn joins, under --flows all, the flows one client played in turn
// on different servers into one client's connections (LoadedFlow.Then):
// a flow whose recorded client (its address's host) logged in as the
// same user id as an earlier flow's, on another server, after that
// flow ended (ended), is that client's next connection, not a client of
// its own; so is a flow the earlier one's server handed values to
// (linked: turncarry.go). The client plays the earlier flow until the
// recorded handover (the later flow's start, counted from the earlier's
// first message, divided by speed), then connects where the recording did: the same host as the
// first server's is --target's host (":port"), another is as recorded.
// Flows of an HTTP session group (grouped) keep their steps and play
// as before. The notes say what was joined.
func inTurn(flows []LoadedFlow, picked []pickedFlow, grouped map[int]*Profile, linked map[int]int, speed float64) ([]LoadedFlow, []string) {
	if speed <= 0 {
		speed = 1
	}
	by := map[int]*capture.Flow{}
	for _, pf := range picked {
		by[pf.index] = pf.flow
	}
	userOf := func(f LoadedFlow) string {
		if _, ok := grouped[f.Index]; ok {
			return ""
		}
		u, _, _ := f.Player.Recorded()
		if len(u) < minLinkValue || by[f.Index] == nil || len(by[f.Index].ClientFrames) == 0 {
			return ""
		}
		return u
	}
	// Each flow's next in turn: the one its server's answers handed a
	// value to (linked), else the earliest later one of its user; of
	// its client host, on another server, started after it ended.
	next := map[int]int{} // by position in flows
	taken := map[int]bool{}
	for i := range flows {
		u := userOf(flows[i])
		to, hands := linked[flows[i].Index]
		if u == "" && !hands {
			continue
		}
		a := by[flows[i].Index]
		if a == nil || len(a.ClientFrames) == 0 {
			continue
		}
		best := -1
		for j := range flows {
			b := by[flows[j].Index]
			if j == i || taken[j] || b.Server == a.Server || b.Client.Addr() != a.Client.Addr() || b.Start.Before(ended(a)) {
				continue
			}
			if hands {
				if flows[j].Index == to {
					best = j
					break
				}
				continue
			}
			if userOf(flows[j]) != u {
				continue
			}
			if best < 0 || b.Start.Before(by[flows[best].Index].Start) {
				best = j
			}
		}
		if best >= 0 {
			next[i], taken[best] = best, true
		}
	}
	if len(next) == 0 {
		return flows, nil
	}
	var notes []string
	var out []LoadedFlow
	for i := range flows {
		if taken[i] {
			continue
		}
		if _, ok := next[i]; !ok {
			out = append(out, flows[i])
			continue
		}
		// Build the chain from its last turn back.
		chain := []int{i}
		for k, ok := next[i]; ok; k, ok = next[k] {
			chain = append(chain, k)
		}
		home := by[flows[i].Index].Server
		var then *LoadedFlow
		for n := len(chain) - 1; n >= 0; n-- {
			f := flows[chain[n]]
			cf := by[f.Index]
			if n > 0 {
				f.Connect = cf.Server.String()
				if cf.Server.Addr() == home.Addr() {
					f.Connect = fmt.Sprintf(":%d", cf.Server.Port())
				}
			}
			if then != nil {
				f.Then = then
				f.HandoverAt = max(time.Duration(float64(by[then.Index].Start.Sub(cf.ClientFrames[0].Time))/speed), time.Millisecond)
			}
			then = &f
		}
		idx := make([]int, 0, len(chain))
		desc := []string{fmt.Sprintf("flow %d on %s", then.Index, home)}
		for f := then; f != nil; f = f.Then {
			idx = append(idx, f.Index)
			if f.Then != nil {
				desc = append(desc, fmt.Sprintf("%v after its login, leaves for flow %d (connect %q)", f.HandoverAt.Round(time.Millisecond), f.Then.Index, f.Then.Connect))
			}
		}
		who := "each on another server"
		if u, _, _ := flows[i].Player.Recorded(); u != "" {
			who = fmt.Sprintf("user %q, %s", u, who)
		}
		notes = append(notes, fmt.Sprintf("flows %s are one client's connections in turn (%s): each client plays %s", joinInts(idx), who, strings.Join(desc, ", then ")))
		out = append(out, *then)
	}
	return out, notes
}

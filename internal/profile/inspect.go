package profile

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is what a profile found in one recorded flow: messages by kind,
// the recorded ids and where, the login's end, loop points to try, the
// correlated values, and what it could not place.
type Report struct {
	Profile string `json:"profile"`
	Flow    string `json:"flow"`
	// ClientKinds and ServerKinds count messages by kind.
	ClientKinds map[string]int `json:"client_kinds"`
	ServerKinds map[string]int `json:"server_kinds"`
	Client      int            `json:"client_messages"`
	Server      int            `json:"server_messages"`
	// User and Room are the recorded values and the client message (#)
	// they first appear in, -1 when nowhere.
	User   string `json:"user"`
	UserAt int    `json:"user_at"`
	// UserCandidates are text runs of the login message that may be the
	// user id, when the profile does not place it (--recorded-user).
	UserCandidates []string `json:"user_candidates,omitempty"`
	Room           string   `json:"room"`
	RoomAt         int      `json:"room_at"`
	// LoginAt is the login's first client message, LoginEnd the first
	// after it; FirstSend is the first message counted as a send (what a
	// receive-only client never plays) and FirstSendS its offset.
	LoginAt    int     `json:"login_at"`
	LoginEnd   int     `json:"login_end"`
	FirstSend  int     `json:"first_send"`
	FirstSendS float64 `json:"first_send_s"`
	// Answer is the server's answer to the login: "accepted", a refusal
	// reason, or "none" when no server message answers it.
	Answer string `json:"answer"`
	// Loop is a suggested --loop: from the first send to the flow's end.
	Loop         string            `json:"loop,omitempty"`
	Correlations map[string]string `json:"correlations,omitempty"`
	// ServerPeers are the recorded peers' server-issued ids
	// (identity.server_peers), in the order they first appear.
	ServerPeers []string `json:"server_peers,omitempty"`
	Upgrade     string   `json:"upgrade,omitempty"`
	// HTTP are an HTTP flow's exchanges ("POST /x -> 200 (...)"): a
	// flow an http step stands for, not one to replay.
	HTTP []string `json:"http,omitempty"`
	// Links are values this flow's answers (HTTP, or a lobby socket's
	// messages) handed out that a later flow sends (LinkReports, over
	// every flow).
	Links []string `json:"links,omitempty"`
	// Deflate is the permessage-deflate the recorded server accepted
	// (the messages counted are the inflated plaintext).
	Deflate string   `json:"deflate,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	// Problems are what makes the profile unfit for the flow.
	Problems []string `json:"problems,omitempty"`
	// Steps map the profile's HTTP steps onto the recording's HTTP
	// requests (StepMap).
	Steps []string `json:"http_steps,omitempty"`
	// prof is the profile (the variant) the flow compiled with.
	prof *Profile
	// Default marks the flow replay plays when --flow does not say (the
	// longest): the one profile check judges.
	Default bool `json:"default,omitempty"`
}

// Inspect reports what the profile makes of a recorded flow.
func (p *Profile) Inspect(flow string, m Messages, opts ScriptOptions) *Report {
	r := &Report{Profile: p.Name, Flow: flow, ClientKinds: map[string]int{}, ServerKinds: map[string]int{},
		Client: len(m.Client), Server: len(m.Server), UserAt: -1, RoomAt: -1, LoginAt: -1, LoginEnd: -1, FirstSend: -1, Answer: "none"}
	for _, c := range m.Client {
		r.ClientKinds[p.KindName(c.Kind)]++
	}
	for _, s := range m.Server {
		r.ServerKinds[p.ServerKindName(s.Kind)]++
	}
	if m.HTTP != nil {
		for _, e := range m.HTTP {
			r.HTTP = append(r.HTTP, e.String())
		}
		r.Notes = append(r.Notes, "an HTTP flow, not a realtime one: replay plays the socket's flow; a profile's http step makes this request per client")
		return r
	}
	if m.Upgrade != nil {
		r.Upgrade = string(firstLine(m.Upgrade))
	}
	if m.Deflate.On {
		r.Deflate = m.Deflate.String()
	}
	r.Notes = append(r.Notes, m.Notes...)
	r.Problems = append(r.Problems, m.Dropped...)
	s, err := p.Compile(m, opts)
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r
	}
	// The script's notes start with the cut's.
	r.Notes = append(r.Notes, s.notes[len(m.Notes)+len(m.Dropped):]...)
	p = s.p // the variant the recording logs in as
	r.prof = p
	// Indexes from here on are the script's: the recorded client
	// messages less the reactions' answers.
	all := m.Client
	m.Client = s.client
	first, _ := p.loginRange(m.Client)
	r.LoginAt, r.LoginEnd = first, first+s.loginSteps
	if fs := first + s.tl.HandshakeEnd(); fs < first+s.tl.Len() {
		r.FirstSend, r.FirstSendS = fs, m.Client[fs].Offset.Seconds()
	}
	r.User, r.Room = string(s.user), string(s.room)
	if s.user == nil && first >= 0 {
		r.UserCandidates = printableRuns(m.Client[first].Bytes, 4, 5)
	}
	r.UserAt, r.RoomAt = firstWith(m.Client, s.user), firstWith(m.Client, s.room)
	r.Answer = p.answer(m.Server)
	switch {
	case strings.HasPrefix(r.Answer, "none") && len(m.Server) > 0 && p.HasHTTP():
		// A client that made HTTP requests first may have had the
		// answer there (socket.io's 40 over polling).
		r.Notes = append(r.Notes, "the recorded socket shows no answer for the login's "+strings.TrimSuffix(strings.TrimPrefix(r.Answer, "none (waiting in "), ")")+" step: the recorded client's HTTP requests may have had it; replay waits for it on the socket")
	case strings.HasPrefix(r.Answer, "none") && len(m.Server) > 0:
		r.Problems = append(r.Problems, "no server message accepts or refuses the login (check login.success / login.failure, or each step's success)")
	}
	// A login of no client message (a WebSocket upgrade that is the
	// join) still plays its first message as the join: the loop starts
	// after it, as the timeline allows.
	if a, b := max(first+s.tl.HandshakeEnd(), first+1), first+s.tl.Len(); a < b && first >= 0 {
		r.Loop = suggestLoop(m.Client[a-1].Offset, a, m.Client[a:b])
	}
	r.Correlations = map[string]string{}
	for name, v := range s.CorrelationValues() {
		r.Correlations[name] = fmt.Sprintf("%q", v)
	}
	for _, v := range s.serverOthers {
		r.ServerPeers = append(r.ServerPeers, fmt.Sprintf("%q", v))
	}
	m.Client = all
	r.Problems = append(r.Problems, p.stampProblems(m)...)
	if n := r.ClientKinds["other"]; n > 0 && len(p.client) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d client messages match no kind", n))
	}
	return r
}

// suggestLoop is a --loop over msgs (the messages after the login, the
// first of them message number first, the login's last at offset login):
// from the first one exactly (to the µs, never after it) to one period
// after the last, the period being the median gap between them, so every
// wrap keeps the recorded rhythm (ending at the last one would send two
// messages back to back at each wrap). A start rounded to the µs must
// still come after the login, or replay would loop the join and refuse
// it: when the login's last message shares the first send's µs the start
// is written to the ns, and when it shares its very instant (a capture
// stamped in µs), as the first send's index.
func suggestLoop(login time.Duration, first int, msgs []Message) string {
	a := msgs[0].Offset.Truncate(time.Microsecond).String()
	switch {
	case msgs[0].Offset <= login:
		a = "#" + strconv.Itoa(first)
	case msgs[0].Offset.Truncate(time.Microsecond) <= login:
		a = msgs[0].Offset.String()
	}
	gaps := make([]time.Duration, 0, len(msgs))
	for i := 1; i < len(msgs); i++ {
		gaps = append(gaps, msgs[i].Offset-msgs[i-1].Offset)
	}
	period := time.Millisecond
	if len(gaps) > 0 {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		period = max(gaps[len(gaps)/2], time.Microsecond)
	}
	b := (msgs[len(msgs)-1].Offset + period).Truncate(time.Microsecond)
	return fmt.Sprintf("%s,%s", a, b)
}

func firstWith(msgs []Message, v []byte) int {
	if len(v) == 0 {
		return -1
	}
	for i, m := range msgs {
		if strings.Contains(string(m.Bytes), string(v)) {
			return i
		}
	}
	return -1
}

// answer is what the first deciding server message says of the login;
// for a login in steps, what the server messages say of its steps in turn.
func (p *Profile) answer(server []Message) string {
	if p.steps != nil {
		k := 0
		for _, m := range server {
			if r := p.refusal(m.Bytes, m.Kind); r != "" {
				return "refused in " + p.steps[k].name + ": " + r
			}
			if p.stageAccepts(&stage{rule: &p.steps[k]}, m.Bytes, m.Kind) {
				if k++; k == len(p.steps) {
					return "accepted"
				}
			}
		}
		return "none (waiting in " + p.steps[k].name + ")"
	}
	for _, m := range server {
		if r := p.refusal(m.Bytes, m.Kind); r != "" {
			return "refused: " + r
		}
		if p.accepts(m.Bytes, m.Kind) {
			return "accepted"
		}
	}
	return "none"
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s, flow %s\n", r.Profile, r.Flow)
	if len(r.HTTP) > 0 {
		for _, h := range r.HTTP {
			fmt.Fprintf(&b, "  http: %s\n", h)
		}
		for _, l := range r.Links {
			fmt.Fprintf(&b, "  link: %s\n", l)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.Upgrade != "" {
		fmt.Fprintf(&b, "  websocket upgrade: %s\n", r.Upgrade)
	}
	if r.Deflate != "" {
		fmt.Fprintf(&b, "  compression: %s negotiated; messages inflated\n", r.Deflate)
	}
	fmt.Fprintf(&b, "  client messages: %d  %s\n", r.Client, kinds(r.ClientKinds))
	fmt.Fprintf(&b, "  server messages: %d  %s\n", r.Server, kinds(r.ServerKinds))
	fmt.Fprintf(&b, "  user id: %s\n", place(r.User, r.UserAt))
	if len(r.UserCandidates) > 0 {
		fmt.Fprintf(&b, "    candidates in the login message: %s\n", strings.Join(quoted(r.UserCandidates), ", "))
	}
	fmt.Fprintf(&b, "  room: %s\n", place(r.Room, r.RoomAt))
	if r.LoginAt >= 0 {
		fmt.Fprintf(&b, "  login: client messages #%d..#%d; server answer: %s\n", r.LoginAt, r.LoginEnd-1, r.Answer)
	}
	if r.FirstSend >= 0 {
		fmt.Fprintf(&b, "  first send: client message #%d at %.3fs (receive-only clients play up to it)\n", r.FirstSend, r.FirstSendS)
	}
	if r.Loop != "" {
		fmt.Fprintf(&b, "  suggested --loop=%s\n", r.Loop)
	}
	names := make([]string, 0, len(r.Correlations))
	for n := range r.Correlations {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  correlation %s: recorded value %s\n", n, r.Correlations[n])
	}
	if len(r.ServerPeers) > 0 {
		fmt.Fprintf(&b, "  peers' server ids: %s (each replaced at send by a room-mate's own)\n", strings.Join(r.ServerPeers, ", "))
	}
	for _, st := range r.Steps {
		fmt.Fprintf(&b, "  %s\n", st)
	}
	if r.Default {
		fmt.Fprintf(&b, "  replay and profile check take this flow by default (the longest; --flow picks another)\n")
	}
	for _, l := range r.Links { // a lobby socket's answers
		fmt.Fprintf(&b, "  link: %s\n", l)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  PROBLEM: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func kinds(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}

func place(v string, at int) string {
	switch {
	case v == "":
		return "not found (give --recorded-user / --recorded-room, or place it in the profile's identity)"
	case at < 0:
		return fmt.Sprintf("%q, in no client message", v)
	}
	return fmt.Sprintf("%q, first in client message #%d", v, at)
}

// printableRuns returns up to max runs of at least min printable ASCII
// bytes (no spaces) in b, in order.
func printableRuns(b []byte, min, max int) []string {
	var out []string
	start := -1
	for i := 0; i <= len(b); i++ {
		ok := i < len(b) && b[i] > 0x20 && b[i] < 0x7f
		switch {
		case ok && start < 0:
			start = i
		case !ok && start >= 0:
			if i-start >= min && len(out) < max {
				out = append(out, string(b[start:i]))
			}
			start = -1
		}
	}
	return out
}

func quoted(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// stampProblems checks the latency stamp against the recorded sends and
// deliveries: the first send it does not fit, the first delivery it
// cannot be read back from.
func (p *Profile) stampProblems(m Messages) []string {
	r := p.stamp
	if r == nil {
		return nil
	}
	var out []string
	for i, c := range m.Client {
		if c.Kind != r.send {
			continue
		}
		if why := p.stampProblem(c.Bytes, m.WSText); why != "" {
			out = append(out, fmt.Sprintf("latency: client message #%d (%s): %s", i, p.KindName(c.Kind), why))
			break
		}
	}
	for i, sm := range m.Server {
		if sm.Kind != r.delivery {
			continue
		}
		if _, _, ok := r.place(p.stampBody(sm.Bytes), r.deliveryOffset); !ok {
			out = append(out, fmt.Sprintf("latency: server message #%d (%s): no stamp can be read back: its place (%s) is not in it", i, p.ServerKindName(sm.Kind), r.where(r.deliveryOffset)))
		}
		break
	}
	return out
}

// FrameRow is one client message of a flow as the profile cuts it.
type FrameRow struct {
	Index   int     `json:"index"`
	OffsetS float64 `json:"offset_s"`
	Kind    string  `json:"kind"`
	Size    int     `json:"size"`
	Text    string  `json:"text"`
}

// FrameRows lists the flow's client messages: what a replay's script is
// cut from.
func (p *Profile) FrameRows(m Messages) []FrameRow {
	out := make([]FrameRow, len(m.Client))
	for i, c := range m.Client {
		t := c.Bytes
		if len(t) > 60 {
			t = t[:60]
		}
		out[i] = FrameRow{Index: i, OffsetS: c.Offset.Seconds(), Kind: p.KindName(c.Kind), Size: len(c.Bytes), Text: fmt.Sprintf("%q", t)}
	}
	return out
}

// WriteFrameRows writes FrameRows for a person.
func WriteFrameRows(w io.Writer, profile, flow string, rows []FrameRow) error {
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s, flow %s: %d client messages\n", profile, flow, len(rows))
	for _, r := range rows {
		fmt.Fprintf(&b, "  #%-4d %9.3fs  %-12s %6d  %s\n", r.Index, r.OffsetS, r.Kind, r.Size, r.Text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

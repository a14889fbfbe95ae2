package profile

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// A client's session across connections, from the recording alone:
// --flows groups the flows one client opened (its HTTP flows and the
// flows that send values their answers handed out: Links) and plays each
// group as ONE client. The HTTP flows' recorded requests become that
// client's HTTP steps (method, target, headers and body as recorded),
// each answer's linked values taken by the JSON path the link found and
// replaced where the later flow carried them (its upgrade's path, query
// or headers, a login message) or where a later request of the group
// sent them; then the realtime flow plays. No step is written by hand: a
// profile's own http steps, where it has them, stand for the HTTP flows
// instead.

// sessionGroup is one client's flows: the flows that hand out values
// (its HTTP flows, a lobby socket's) and the realtime flows they reach,
// by index in `replay inspect`, each in recorded order, and the links
// between them. A flow that hands out values is one of http (its
// recorded exchange becomes steps), even when an earlier one's values
// reach it.
type sessionGroup struct {
	http, realtime []int
	links          []Link
}

// sessionGroups joins the flows the links tie together (an HTTP flow
// and the flows its values reach; groups sharing a flow are one).
func sessionGroups(links []Link) []sessionGroup {
	root := map[int]int{}
	var find func(int) int
	find = func(i int) int {
		r, ok := root[i]
		if !ok || r == i {
			root[i] = i
			return i
		}
		r = find(r)
		root[i] = r
		return r
	}
	for _, l := range links {
		root[find(l.To)] = find(l.From)
	}
	at := map[int]int{}
	var out []sessionGroup
	for _, l := range links {
		r := find(l.From)
		k, ok := at[r]
		if !ok {
			k = len(out)
			at[r] = k
			out = append(out, sessionGroup{})
		}
		g := &out[k]
		g.links = append(g.links, l)
		if !slices.Contains(g.http, l.From) {
			g.http = append(g.http, l.From)
		}
		to := &g.realtime
		if l.ToHTTP { // a cookie sent in a later request
			to = &g.http
		}
		if !slices.Contains(*to, l.To) {
			*to = append(*to, l.To)
		}
	}
	for i := range out {
		g := &out[i]
		g.realtime = slices.DeleteFunc(g.realtime, func(f int) bool { return slices.Contains(g.http, f) })
		slices.Sort(g.http)
		slices.Sort(g.realtime)
	}
	// Requests only (a cookie sent from one request to the next): no
	// connection to play them before.
	return slices.DeleteFunc(out, func(g sessionGroup) bool { return len(g.realtime) == 0 })
}

// String is "flows 0, 1".
func (g sessionGroup) String() string {
	all := append(append([]int(nil), g.http...), g.realtime...)
	slices.Sort(all)
	s := make([]string, len(all))
	for i, f := range all {
		s[i] = fmt.Sprint(f)
	}
	return "flows " + strings.Join(s, ", ")
}

// droppedHeaders are request headers a recorded step does not send as
// recorded: the target's (Host), the body's framing, the connection's,
// and Accept-Encoding (the fleet's HTTP client asks for gzip itself and
// decodes the answer only then).
var droppedHeaders = []string{"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "accept-encoding", "proxy-connection", "proxy-authorization"}

// recordedSteps are the HTTP steps that make the group's recorded
// requests, in recorded order. A value an answer handed out is taken by
// its JSON path where the realtime flow carried it (the link) or where a
// later request of the group sent it (then ${name} in that request).
// Takes are not named as reserved is (the client's own values, the
// profile's correlations). The recorded user id and room, where the
// realtime flow shows them (own), are the client's own in the requests
// too (${user}, ${room}): a token is asked for by the user who will use
// it.
//
// connect is where the realtime flow goes when an answer named its
// address (a lobby's), "" when none did.
func recordedSteps(g sessionGroup, flows map[int]FlowData, reserved []string, own recordedIdentity) (steps []HTTPStepSpec, connect string, err error) {
	var answers [][]leaf // each step's answer's JSON values
	stepNames, takeNames := map[string]bool{}, map[string]bool{"user": true, "room": true, "index": true, "random": true}
	for _, r := range reserved {
		takeNames[r] = true
	}
	unique := func(names map[string]bool, base string) string {
		name, sep := base, ""
		if c := base[len(base)-1]; c >= '0' && c <= '9' {
			sep = "_" // v2, then v2_2 (not v22)
		}
		for n := 2; names[name]; n++ {
			name = fmt.Sprintf("%s%s%d", base, sep, n)
		}
		names[name] = true
		return name
	}
	// fromEarlier takes the values earlier answers handed out that st
	// sends, and sends them as ${name}.
	fromEarlier := func(st *HTTPStepSpec) {
		for k := range steps {
			for _, lv := range answers[k] {
				if !strings.Contains(st.URL+st.Body+fmt.Sprint(st.Headers)+strings.Join(st.Send, "\n"), lv.value) {
					continue
				}
				name := unique(takeNames, leafName(lv.path))
				steps[k].Take = append(steps[k].Take, TakeSpec{Name: name, JSON: lv.path})
				ref := "${" + name + "}"
				st.URL, st.Body = strings.ReplaceAll(st.URL, lv.value, ref), strings.ReplaceAll(st.Body, lv.value, ref)
				for h, v := range st.Headers {
					st.Headers[h] = strings.ReplaceAll(v, lv.value, ref)
				}
				for i, m := range st.Send {
					st.Send[i] = strings.ReplaceAll(m, lv.value, ref)
				}
			}
		}
	}
	// linkTakes takes the values a step's answer handed out that the
	// realtime flow sends, or that name where it connected (the first
	// such is the connect address): the group's links keep picks, but
	// those reaching another flow that hands out values (fromEarlier's).
	linkTakes := func(keep func(Link) bool) []TakeSpec {
		var takes []TakeSpec
		for _, l := range g.links {
			if !keep(l) || slices.Contains(g.http, l.To) {
				continue
			}
			tk := l.TakeSpec(unique(takeNames, l.name()))
			if l.Addr() && connect == "" {
				connect = l.Connect("${" + tk.Name + "}")
			}
			takes = append(takes, tk)
		}
		return takes
	}
	for _, fi := range g.http {
		if flows[fi].HTTP == nil { // a lobby socket
			if len(steps) == maxHTTPSteps {
				return nil, "", fmt.Errorf("flow %d: more than %d recorded requests", fi, maxHTTPSteps)
			}
			st, lv, err := socketStepOf(flows[fi], own)
			if err != nil {
				return nil, "", err
			}
			st.Name = unique(stepNames, st.Name)
			fromEarlier(&st)
			st.Take = append(st.Take, linkTakes(func(l Link) bool { return l.From == fi })...)
			steps, answers = append(steps, st), append(answers, lv)
			continue
		}
		for _, e := range flows[fi].HTTP {
			if len(steps) == maxHTTPSteps {
				return nil, "", fmt.Errorf("flow %d: more than %d recorded requests", fi, maxHTTPSteps)
			}
			st := HTTPStepSpec{Name: unique(stepNames, stepName(e.Target)), Method: e.Method, URL: literal(e.Target), Body: literal(string(e.Sent))}
			for _, h := range e.Header {
				if slices.Contains(droppedHeaders, strings.ToLower(h[0])) {
					continue
				}
				if st.Headers == nil {
					st.Headers = map[string]string{}
				}
				st.Headers[h[0]] = literal(h[1])
			}
			st.URL, st.Body = own.in(st.URL), own.in(st.Body)
			for h, v := range st.Headers {
				st.Headers[h] = own.in(v)
			}
			fromEarlier(&st)
			st.Take = append(st.Take, linkTakes(func(l Link) bool {
				return l.From == fi && l.Exchange == e.Method+" "+e.Target && l.Cookie == "" // the jar carries cookies
			})...)
			var doc any
			var lv []leaf
			if json.Unmarshal(e.Body, &doc) == nil {
				lv = jsonLeaves(doc, "$", nil)
			}
			steps, answers = append(steps, st), append(answers, lv)
		}
	}
	return steps, connect, nil
}

// socketStepOf is the socket step that plays a recorded lobby socket:
// its upgrade's target and headers (but the connection's and the
// WebSocket handshake's own), its messages as recorded (the recorded
// user id and room the client's own), and its server messages' JSON
// values, which later steps and the realtime flow may take.
func socketStepOf(f FlowData, own recordedIdentity) (HTTPStepSpec, []leaf, error) {
	lines := strings.Split(string(f.Upgrade), "\r\n")
	req := strings.Fields(lines[0])
	if len(req) < 2 || req[0] != "GET" {
		return HTTPStepSpec{}, nil, fmt.Errorf("flow %d: no upgrade request to open its socket with", f.Index)
	}
	st := HTTPStepSpec{Name: stepName(req[1]), Method: "GET", URL: own.in(literal(req[1])), Socket: true}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if lk := strings.ToLower(k); slices.Contains(droppedHeaders, lk) || strings.HasPrefix(lk, "sec-websocket-") {
			continue
		}
		if st.Headers == nil {
			st.Headers = map[string]string{}
		}
		st.Headers[k] = own.in(literal(v))
	}
	for _, m := range f.Msgs {
		if !utf8.Valid(m.Bytes) {
			return HTTPStepSpec{}, nil, fmt.Errorf("flow %d: a socket step sends text, and client message #%d is binary", f.Index, len(st.Send))
		}
		st.Send = append(st.Send, own.in(literal(string(m.Bytes))))
	}
	if len(st.Send) > maxSocketSends {
		return HTTPStepSpec{}, nil, fmt.Errorf("flow %d: more than %d client messages for a socket step", f.Index, maxSocketSends)
	}
	var lv []leaf
	for _, m := range f.Answers {
		var doc any
		if json.Unmarshal(m.Bytes, &doc) == nil {
			lv = jsonLeaves(doc, "$", lv)
		}
	}
	return st, lv, nil
}

// recordedIdentity is the recorded client's user id and room (empty
// where the profile finds none).
type recordedIdentity struct{ user, room string }

// in is s with the recorded user id and room, where each stands on its
// own (not inside a longer word), as the client's ${user} and ${room}.
func (id recordedIdentity) in(s string) string {
	for _, r := range [][2]string{{id.user, "${user}"}, {id.room, "${room}"}} {
		if len(r[0]) >= minLinkValue {
			s = replaceWord(s, r[0], r[1])
		}
	}
	return s
}

// replaceWord replaces v in s where it is not inside a longer run of
// letters and digits (containsWord's rule).
func replaceWord(s, v, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, v)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(v)
		if (i == 0 || !alnum(s[i-1])) && (end == len(s) || !alnum(s[end])) {
			b.WriteString(s[:i])
			b.WriteString(with)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

// literal is s as template text: its "${" written "$${".
func literal(s string) string { return strings.ReplaceAll(s, "${", "$${") }

// stepName names a recorded request's step by its path's first segment
// ("matchmake" for /matchmake/joinOrCreate/chat), else "request".
func stepName(target string) string {
	p := strings.TrimPrefix(urlPath(target), "/")
	p, _, _ = strings.Cut(p, "/")
	name := strings.Trim(strings.ToLower(nonName.ReplaceAllString(p, "_")), "_")
	if len(name) > 24 {
		name = name[:24]
	}
	if name == "" || !validName.MatchString(name) {
		return "request"
	}
	if _, ok := reservedStepName(name); ok {
		return "request_" + name
	}
	return name
}

// leafName is a JSON value's take name: its path's last key.
func leafName(path string) string { return Link{Path: path}.name() }

// hasHTTP reports whether p or any of its variants makes HTTP steps.
func (p *Profile) hasHTTPAnyVariant() bool {
	if p.HasHTTP() {
		return true
	}
	for _, v := range p.variants {
		if v.p.HasHTTP() {
			return true
		}
	}
	return false
}

// withRecordedSteps is p with the group's recorded requests as its HTTP
// steps.
func (p *Profile) withRecordedSteps(g sessionGroup, flows map[int]FlowData, own recordedIdentity) (*Profile, []string, error) {
	if p.spec == nil {
		return nil, nil, fmt.Errorf("profile %s is not a file's: it takes no http steps", p.Name)
	}
	var corrs []string
	for _, c := range p.spec.Correlation {
		corrs = append(corrs, c.Name)
	}
	steps, connect, err := recordedSteps(g, flows, corrs, own)
	if err != nil {
		return nil, nil, err
	}
	s := *p.spec
	s.HTTP = steps
	if s.Connect == "" { // a hand-written connect wins
		s.Connect = connect
	}
	dp, err := Compile(&s)
	if err != nil {
		return nil, nil, err
	}
	desc := make([]string, len(steps))
	for i, st := range steps {
		takes := make([]string, len(st.Take))
		for j, t := range st.Take {
			takes[j] = t.Name + " at " + t.JSON
			if t.Header != "" {
				takes[j] = t.Name + " from header " + t.Header
			}
		}
		desc[i] = fmt.Sprintf("%s (%s %s", st.Name, st.Method, st.URL)
		if st.Socket {
			desc[i] = fmt.Sprintf("%s (a socket: GET %s, sends %d messages", st.Name, st.URL, len(st.Send))
		}
		if len(takes) > 0 {
			desc[i] += ", takes " + strings.Join(takes, ", ")
		}
		desc[i] += ")"
	}
	if s.Connect != "" {
		desc = append(desc, fmt.Sprintf("connect %q", s.Connect))
	}
	return dp, desc, nil
}

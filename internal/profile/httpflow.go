package profile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
)

// HTTP flows in a recording: a client's requests before its realtime
// connection (a seat, a token, an address). inspect names them, and
// finds the values their answers handed out that a later flow of the
// same client sends: the links an http step's take reproduces.

// HTTPExchange is one request of an HTTP flow and its answer.
type HTTPExchange struct {
	Method, Target string
	// Header and Sent are the request's headers (as recorded, in order)
	// and body: what a step made from the recording sends.
	Header      [][2]string
	Sent        []byte
	Status      int
	ContentType string
	Body        []byte
	// SetCookies are the cookies the answer set (name and value).
	SetCookies [][2]string
	// Answer are the answer's headers that may hand a value out (not
	// the protocol's own: handedOut), as recorded, in order (bounded).
	Answer [][2]string
}

// String is "POST /matchmake/joinOrCreate/chat -> 200 (application/json, 245 bytes)".
func (e HTTPExchange) String() string {
	s := e.Method + " " + e.Target + " -> "
	if e.Status == 0 {
		return s + "no answer"
	}
	s += strconv.Itoa(e.Status)
	if e.ContentType != "" || len(e.Body) > 0 {
		s += fmt.Sprintf(" (%s%d bytes)", strings.TrimSuffix(e.ContentType+", ", ", ")+sep(e.ContentType), len(e.Body))
	}
	return s
}

func sep(ct string) string {
	if ct == "" {
		return ""
	}
	return ", "
}

var httpMethod = regexp.MustCompile(`^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+) HTTP/1\.[01]\r\n`)

// httpStart is how a flow's first client segment starts when the flow
// may be HTTP (a request, or a WebSocket upgrade).
var httpStart = regexp.MustCompile(`^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) `)

// maxExchanges bounds the exchanges read from one flow.
const maxExchanges = 16

// HTTPExchanges reads r as plain HTTP/1.1 request/response exchanges;
// nil when its client stream does not start with a request, or starts
// with a WebSocket upgrade (a realtime flow).
func HTTPExchanges(r Recording) []HTTPExchange {
	client, server := joinSegments(r.Client), joinSegments(r.Server)
	head := client
	if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
		head = head[:i]
	}
	lines := bytes.Split(head, []byte("\r\n"))[1:]
	if !httpMethod.Match(client) || headerValue(lines, "Upgrade") != nil || headerValue(lines, "Sec-WebSocket-Key") != nil {
		return nil
	}
	var out []HTTPExchange
	for len(out) < maxExchanges {
		m := httpMethod.FindSubmatch(client)
		if m == nil {
			break
		}
		e := HTTPExchange{Method: string(m[1]), Target: string(m[2])}
		reqHead, sent, rest, ok := httpMessage(client)
		if !ok {
			out = append(out, e)
			break
		}
		client, e.Sent = rest, sent
		for _, h := range reqHead[1:] {
			if k, v, ok := bytes.Cut(h, []byte(":")); ok {
				e.Header = append(e.Header, [2]string{string(bytes.TrimSpace(k)), string(bytes.TrimSpace(v))})
			}
		}
		var hdr [][]byte
		hdr, e.Body, server, ok = httpMessage(server)
		if len(hdr) > 0 {
			if f := bytes.Fields(hdr[0]); len(f) >= 2 {
				e.Status, _ = strconv.Atoi(string(f[1]))
			}
			e.ContentType = string(headerValue(hdr[1:], "Content-Type"))
			e.SetCookies = setCookies(hdr[1:])
			e.Answer = answerHeaders(hdr[1:])
		}
		out = append(out, e)
		if !ok {
			break
		}
	}
	return out
}

func joinSegments(segs []Segment) []byte {
	var b []byte
	for _, s := range segs {
		b = append(b, s.Bytes...)
	}
	return b
}

// httpMessage cuts one HTTP message from b: its head's lines, its body
// (Content-Length or chunked; none otherwise) and the rest.
func httpMessage(b []byte) (head [][]byte, body, rest []byte, ok bool) {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, nil, nil, false
	}
	head, rest = bytes.Split(b[:i], []byte("\r\n")), b[i+4:]
	if te := headerValue(head[1:], "Transfer-Encoding"); bytes.EqualFold(te, []byte("chunked")) {
		for {
			j := bytes.Index(rest, []byte("\r\n"))
			if j < 0 {
				return head, body, nil, false
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(rest[:j], []byte(";"), 2)[0])), 16, 32)
			if err != nil || int(size) > len(rest)-j-2 {
				return head, body, nil, false
			}
			rest = rest[j+2:]
			if size == 0 {
				if k := bytes.Index(rest, []byte("\r\n")); k >= 0 {
					rest = rest[k+2:]
				}
				return head, body, rest, true
			}
			body = append(body, rest[:size]...)
			rest = bytes.TrimPrefix(rest[size:], []byte("\r\n"))
		}
	}
	n, _ := strconv.Atoi(string(headerValue(head[1:], "Content-Length")))
	if n > len(rest) {
		return head, rest, nil, false
	}
	return head, rest[:n], rest[n:], true
}

// protocolHeaders are answer headers that hand no value out: HTTP's and
// WebSocket's own (Set-Cookie has its links: cookieLinks).
var protocolHeaders = []string{"date", "content-length", "content-type", "content-encoding", "content-language",
	"transfer-encoding", "connection", "keep-alive", "server", "set-cookie", "upgrade", "sec-websocket-accept",
	"sec-websocket-extensions", "sec-websocket-protocol", "sec-websocket-version", "cache-control", "expires",
	"last-modified", "etag", "vary", "pragma", "age", "accept-ranges", "alt-svc", "via", "strict-transport-security",
	"x-content-type-options", "x-frame-options", "x-xss-protection", "content-security-policy", "referrer-policy"}

// answerHeaders are the headers of an answer's head lines that may hand
// a value out (bounded: maxLinks).
func answerHeaders(lines [][]byte) [][2]string {
	var out [][2]string
	for _, l := range lines {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok || len(out) == maxLinks {
			continue
		}
		name := string(bytes.TrimSpace(k))
		lower := strings.ToLower(name)
		if slices.Contains(protocolHeaders, lower) || strings.HasPrefix(lower, "access-control-") || !validToken(name) {
			continue
		}
		if v := bytes.TrimSpace(v); len(v) >= minLinkValue {
			out = append(out, [2]string{name, string(v)})
		}
	}
	return out
}

// UpgradeAnswer are the headers of a WebSocket flow's recorded 101 that
// may hand a value out (answerHeaders); nil when the server's stream
// does not start with a 101.
func UpgradeAnswer(r Recording) [][2]string {
	var server []byte // the head only: a socket's stream may be long
	i := -1
	for _, s := range r.Server {
		if server = append(server, s.Bytes...); len(server) > 16<<10 {
			break
		}
		if i = bytes.Index(server, []byte("\r\n\r\n")); i >= 0 {
			break
		}
	}
	if i < 0 || !bytes.HasPrefix(server, []byte("HTTP/1.1 101")) {
		return nil
	}
	return answerHeaders(bytes.Split(server[:i], []byte("\r\n"))[1:])
}

// setCookies are the name and value of each Set-Cookie header (bounded).
func setCookies(lines [][]byte) [][2]string {
	var out [][2]string
	for _, l := range lines {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("Set-Cookie")) || len(out) == maxLinks {
			continue
		}
		pair, _, _ := bytes.Cut(v, []byte(";"))
		if name, value, ok := bytes.Cut(bytes.TrimSpace(pair), []byte("=")); ok && len(name) > 0 {
			out = append(out, [2]string{string(name), string(value)})
		}
	}
	return out
}

// Link is a value one flow's HTTP answer handed out that a later flow
// sends: what an http step's take reproduces, or a cookie the answer set
// that a later flow's Cookie header carries (the client's cookie jar
// carries it: no take).
type Link struct {
	From     int    `json:"from"`      // the HTTP flow
	Exchange string `json:"exchange"`  // its request, "POST /matchmake/..."
	Path     string `json:"json_path"` // where in the answer's JSON body
	Value    string `json:"value"`
	To       int    `json:"to"`    // the flow that sends it
	Where    string `json:"where"` // "upgrade query sessionId", "upgrade path", "upgrade header X-Token", "client message #3"
	// Recorded is a regexp that finds the value where the later flow
	// carries it (take.recorded).
	Recorded string `json:"recorded"`
	// Cookie names the cookie, for a link by a cookie.
	Cookie string `json:"cookie,omitempty"`
	// ToHTTP: the later flow is an HTTP flow too (a cookie link's).
	ToHTTP bool `json:"to_http,omitempty"`
	// Header names the answer's header that handed the value out (no
	// Path): an HTTP answer's, or a socket's 101.
	Header string `json:"header,omitempty"`
}

func (l Link) String() string {
	if l.Cookie != "" {
		return fmt.Sprintf("the cookie %s=%q set in flow %d's answer (%s) is sent in flow %d's %s", l.Cookie, l.Value, l.From, l.Exchange, l.To, l.Where)
	}
	in := fmt.Sprintf("flow %d's response body (%s) at %s", l.From, l.Exchange, l.Path)
	switch {
	case l.Header != "":
		in = fmt.Sprintf("flow %d's response header %s (%s)", l.From, l.Header, l.Exchange)
	case l.Socket():
		in = fmt.Sprintf("flow %d's %s at %s", l.From, l.Exchange, l.Path)
	}
	if l.Addr() {
		return fmt.Sprintf("the value %q answered in %s is where flow %d connected (its %s)", l.Value, in, l.To, strings.TrimPrefix(l.Where, whereConnect))
	}
	return fmt.Sprintf("the value %q answered in %s is sent in flow %d's %s", l.Value, in, l.To, l.Where)
}

// socketMessage starts the Exchange of a value a socket flow's server
// message handed out ("socket message #2").
const socketMessage = "socket message #"

// Socket reports whether a socket's message handed the value out (a
// lobby socket), not an HTTP answer.
func (l Link) Socket() bool { return strings.HasPrefix(l.Exchange, socketMessage) }

// Take is the http step's take that reproduces the link (and, for an
// address, the profile's connect).
func (l Link) Take() string {
	if l.Cookie != "" {
		return "none, each client's cookie jar carries it"
	}
	from := "json: " + l.Path
	if l.Header != "" {
		from = "header: " + l.Header
	}
	take := fmt.Sprintf("{name: %s, %s}", l.name(), from)
	if l.Recorded != "" {
		take = fmt.Sprintf("{name: %s, %s, recorded: {regexp: '%s'}}", l.name(), from, l.Recorded)
	}
	if l.Addr() {
		return fmt.Sprintf("%s; connect: %q", take, l.Connect("${"+l.name()+"}"))
	}
	return take
}

// TakeSpec is the take that reproduces the link, named name.
func (l Link) TakeSpec(name string) TakeSpec {
	tk := TakeSpec{Name: name, JSON: l.Path, Header: l.Header}
	if l.Recorded != "" {
		tk.Recorded = &FieldSpec{Regexp: l.Recorded}
	}
	return tk
}

// whereConnect starts a link's Where when the value is the later flow's
// server address ("connect address") or port ("connect port").
const whereConnect = "connect "

// Addr reports whether the value is where the later flow connected: the
// lobby's answer names the game server.
func (l Link) Addr() bool { return strings.HasPrefix(l.Where, whereConnect) }

// Connect is the connect template that goes where the value (ref, a
// template reference) says: the address itself, or the target's host
// with the port (":${port}": the fleet fills in the target's host).
func (l Link) Connect(ref string) string {
	if l.Where == whereConnect+"port" {
		return ":" + ref
	}
	return ref
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// name is the take's name: the JSON path's last key, or the header's
// name, lower case.
func (l Link) name() string {
	key := l.Path[strings.LastIndexAny(l.Path, ".]")+1:]
	if l.Header != "" {
		key = l.Header
	}
	name := strings.ToLower(nonName.ReplaceAllString(key, "_"))
	if name == "" || !validName.MatchString(name) {
		name = "value"
	}
	return name
}

// FlowData is what Links reads of one flow: its index, client address
// and recording; Upgrade and Client are its messages' (nil for an HTTP
// flow).
type FlowData struct {
	Index  int
	Client string
	// Server is the address the flow connected to (host:port; "" when
	// not known); Start its first packet's time.
	Server string
	Start  time.Time
	// Answers are a socket flow's server messages: a lobby socket's
	// answers hand out values as an HTTP flow's do.
	Answers []Message
	// Upgraded are a socket flow's 101 headers that may hand a value
	// out (UpgradeAnswer).
	Upgraded [][2]string
	HTTP     []HTTPExchange
	Upgrade  []byte
	Msgs     []Message
}

// minLinkValue: shorter values match by chance.
const minLinkValue = 4

// maxLinks bounds the links proposed.
const maxLinks = 32

// Links finds, for each HTTP flow's JSON answers, the values a later
// flow from the same client host sends (in its upgrade request or its
// client messages), or that name where it connected (addrLink).
func Links(flows []FlowData) []Link {
	var out []Link
	for _, f := range flows {
		for _, e := range f.HTTP {
			var doc any
			if json.Unmarshal(e.Body, &doc) != nil {
				continue
			}
			for _, lv := range jsonLeaves(doc, "$", nil) {
				for _, g := range flows {
					if g.Index == f.Index || g.HTTP != nil || host(g.Client) != host(f.Client) {
						continue
					}
					l, ok := addrLink(f.Server, g, lv)
					if !ok {
						l, ok = linkIn(g, lv)
					}
					if ok && len(out) < maxLinks {
						l.From, l.Exchange, l.To = f.Index, e.Method+" "+e.Target, g.Index
						out = append(out, l)
					}
				}
			}
			sent := e.Target + string(e.Sent) + fmt.Sprint(e.Header)
			out = headerLinks(f, e.Method+" "+e.Target, e.Answer, func(v string) bool { return strings.Contains(sent, v) }, flows, time.Time{}, out)
		}
		out = socketLinks(f, flows, out)
	}
	return append(out, cookieLinks(flows, maxLinks-len(out))...)
}

// socketLinks adds the links of a socket flow f's server messages (a
// lobby socket's answers): values a later flow of the same client host
// sends, or that name where it connected. The later flow must start
// after the message arrived (a chat's messages pass one client's words
// on to another, which would otherwise look like a value handed out),
// and the value must not be one f sent itself (a room's name echoed in
// its join's answer).
func socketLinks(f FlowData, flows []FlowData, out []Link) []Link {
	if f.HTTP != nil || f.Start.IsZero() {
		return out
	}
	own := func(v string) bool {
		b := []byte(v)
		return containsWord(f.Upgrade, b) || slices.ContainsFunc(f.Msgs, func(m Message) bool { return containsWord(m.Bytes, b) })
	}
	for k, m := range f.Answers {
		var doc any
		if json.Unmarshal(m.Bytes, &doc) != nil {
			continue
		}
		at := f.Start.Add(m.Offset)
		for _, lv := range jsonLeaves(doc, "$", nil) {
			if v := []byte(lv.value); containsWord(f.Upgrade, v) || slices.ContainsFunc(f.Msgs, func(m Message) bool { return containsWord(m.Bytes, v) }) {
				continue // the client's own (its room, its name), echoed: not handed out
			}
			for _, g := range flows {
				if g.Index == f.Index || g.HTTP != nil || host(g.Client) != host(f.Client) || !g.Start.After(at) {
					continue
				}
				l, ok := addrLink(f.Server, g, lv)
				if !ok {
					l, ok = linkIn(g, lv)
				}
				if ok && len(out) < maxLinks {
					l.From, l.Exchange, l.To = f.Index, fmt.Sprintf("%s%d", socketMessage, k), g.Index
					out = append(out, l)
				}
			}
		}
	}
	if req, _, ok := strings.Cut(string(f.Upgrade), " HTTP/"); ok {
		out = headerLinks(f, req+" -> 101", f.Upgraded, own, flows, f.Start, out)
	}
	return out
}

// headerLinks adds the links of the values f's answer (exchange) handed
// out in its headers hdr (the value is the whole header's): values a
// later flow of the same client host sends, or that name where it
// connected, as Links does for a body's (after them: a value its body
// handed out too is the body's link). A value f's client sent itself
// (own: a request id echoed) hands nothing out; a flow that started by
// after is not later.
func headerLinks(f FlowData, exchange string, hdr [][2]string, own func(string) bool, flows []FlowData, after time.Time, out []Link) []Link {
	for _, h := range hdr {
		if own(h[1]) {
			continue
		}
		lv := leaf{value: h[1]}
		for _, g := range flows {
			if g.Index == f.Index || g.HTTP != nil || host(g.Client) != host(f.Client) || !after.IsZero() && !g.Start.After(after) {
				continue
			}
			l, ok := addrLink(f.Server, g, lv)
			if !ok {
				l, ok = linkIn(g, lv)
			}
			// A value f's body handed out too is its body's link:
			// one take per value.
			if ok && len(out) < maxLinks && !slices.ContainsFunc(out, func(o Link) bool {
				return o.From == f.Index && o.To == g.Index && o.Value == l.Value && o.Where == l.Where
			}) {
				l.From, l.Exchange, l.To, l.Header = f.Index, exchange, g.Index, h[0]
				out = append(out, l)
			}
		}
	}
	return out
}

// cookieLinks finds, for each cookie an HTTP answer set, the later flows
// of the same client host that send it in a Cookie header: their
// upgrade, or a request of theirs (at most max links).
func cookieLinks(flows []FlowData, max int) []Link {
	var out []Link
	for _, f := range flows {
		for _, e := range f.HTTP {
			for _, c := range e.SetCookies {
				if len(c[1]) < minLinkValue {
					continue
				}
				for _, g := range flows {
					if g.Index == f.Index || host(g.Client) != host(f.Client) || len(out) >= max {
						continue
					}
					if where, ok := sendsCookie(g, c); ok {
						out = append(out, Link{From: f.Index, Exchange: e.Method + " " + e.Target, Value: c[1], To: g.Index, Where: where, Cookie: c[0], ToHTTP: g.HTTP != nil})
					}
				}
			}
		}
	}
	return out
}

// addrLink is the link of a value that names where flow g connected (a
// lobby's answer naming the game server): g's server address (or a
// host:port with its port), or its port alone, when g did not connect
// where the answer came from (from). The address is replaced where g's
// recording carries it (its upgrade's Host); a port alone is not (a
// number matches by chance).
func addrLink(from string, g FlowData, lv leaf) (Link, bool) {
	if g.Server == "" || g.Server == from {
		return Link{}, false
	}
	_, port, err := net.SplitHostPort(g.Server)
	if err != nil {
		return Link{}, false
	}
	_, fromPort, _ := net.SplitHostPort(from)
	l := Link{Path: lv.path, Value: lv.value}
	switch h, p, err := net.SplitHostPort(lv.value); {
	case lv.value == g.Server, err == nil && h != "" && p == port:
		l.Where = whereConnect + "address"
		v := []byte(lv.value)
		if containsWord(g.Upgrade, v) || slices.ContainsFunc(g.Msgs, func(m Message) bool { return containsWord(m.Bytes, v) }) {
			l.Recorded = "(" + regexp.QuoteMeta(lv.value) + ")"
		}
	case lv.value == port && port != fromPort:
		l.Where = whereConnect + "port"
	default:
		return Link{}, false
	}
	return l, true
}

// sendsCookie reports where flow g sends the cookie c (name, value).
func sendsCookie(g FlowData, c [2]string) (string, bool) {
	if lines := bytes.Split(g.Upgrade, []byte("\r\n")); len(lines) > 1 {
		if v := headerValue(lines[1:], "Cookie"); v != nil && carriesCookie(string(v), c) {
			return "upgrade header Cookie", true
		}
	}
	for _, e := range g.HTTP {
		for _, h := range e.Header {
			if strings.EqualFold(h[0], "Cookie") && carriesCookie(h[1], c) {
				return "request header Cookie (" + e.Method + " " + e.Target + ")", true
			}
		}
	}
	return "", false
}

// carriesCookie reports whether a Cookie header's value holds c.
func carriesCookie(header string, c [2]string) bool {
	for _, p := range strings.Split(header, ";") {
		if name, value, _ := strings.Cut(strings.TrimSpace(p), "="); name == c[0] && value == c[1] {
			return true
		}
	}
	return false
}

func host(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[:i]
	}
	return addr
}

type leaf struct{ path, value string }

// jsonLeaves lists the string and number values of doc with their paths
// (bounded), longest values first.
func jsonLeaves(doc any, path string, out []leaf) []leaf {
	if len(out) > 256 {
		return out
	}
	switch v := doc.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = jsonLeaves(v[k], path+"."+k, out)
		}
	case []any:
		for i, x := range v {
			out = jsonLeaves(x, fmt.Sprintf("%s[%d]", path, i), out)
		}
	case string:
		if len(v) >= minLinkValue {
			out = append(out, leaf{path, v})
		}
	case float64:
		if s := strconv.FormatFloat(v, 'f', -1, 64); len(s) >= minLinkValue {
			out = append(out, leaf{path, s})
		}
	}
	return out
}

// linkIn finds where flow g sends the value: its upgrade's query, path or
// headers, else a client message.
func linkIn(g FlowData, lv leaf) (Link, bool) {
	l := Link{Path: lv.path, Value: lv.value}
	v := []byte(lv.value)
	if lines := bytes.Split(g.Upgrade, []byte("\r\n")); len(lines) > 0 && containsWord(g.Upgrade, v) {
		reqLine := bytes.Fields(lines[0])
		if len(reqLine) >= 2 && containsWord(reqLine[1], v) {
			target := string(reqLine[1])
			p, q, _ := strings.Cut(target, "?")
			if vals, err := url.ParseQuery(q); err == nil {
				for k, vs := range vals {
					if len(vs) > 0 && vs[0] == lv.value {
						l.Where = "upgrade query " + k
						l.Recorded = `[?&]` + regexp.QuoteMeta(k) + `=([^& ]+)`
						return l, true
					}
				}
			}
			if segs := strings.Split(p, "/"); len(segs) > 1 {
				for i, s := range segs {
					if s == lv.value {
						l.Where = fmt.Sprintf("upgrade path segment %d", i)
						l.Recorded = "GET " + strings.Repeat(`/[^/ ?]+`, i-1) + `/([^/ ?]+)`
						return l, true
					}
				}
			}
			l.Where, l.Recorded = "upgrade request line", regexp.QuoteMeta(lv.value)
			l.Recorded = "(" + l.Recorded + ")"
			return l, true
		}
		for _, h := range lines[1:] {
			if k, hv, ok := bytes.Cut(h, []byte(":")); ok && containsWord(hv, v) {
				l.Where = "upgrade header " + string(bytes.TrimSpace(k))
				l.Recorded = "(" + regexp.QuoteMeta(lv.value) + ")"
				return l, true
			}
		}
	}
	for i, m := range g.Msgs {
		if containsWord(m.Bytes, v) {
			l.Where = fmt.Sprintf("client message #%d", i)
			l.Recorded = "(" + regexp.QuoteMeta(lv.value) + ")"
			return l, true
		}
	}
	return l, false
}

// httpFlows reports whether a recording read through p may hold plain
// HTTP flows beside its realtime ones (a lobby, a token, a seat before
// the connection): a WebSocket's or any TCP protocol's (an MQTT or NATS
// client that asked a matchmaker first); not UDP, nor the reprise
// protocol, whose flows are read as its frames.
func (p *Profile) httpFlows() bool {
	return !p.reprise && (p.Transport == WebSocket || p.Transport == TCP)
}

// Longest is the flow replay plays by default: the capture's longest,
// but for a stream profile (httpFlows) the longest that is not plain HTTP
// (a client keeps its matchmaking connection alive longer than its
// socket).
func (p *Profile) Longest(c *capture.Capture) *capture.Flow {
	if !p.httpFlows() {
		return c.Longest()
	}
	var best *capture.Flow
	for _, f := range c.Flows {
		if f.ClientCount == 0 || HTTPExchanges(RecordingOf(f)) != nil {
			continue
		}
		if best == nil || f.Duration() > best.Duration() || (f.Duration() == best.Duration() && f.ClientCount > best.ClientCount) {
			best = f
		}
	}
	if best == nil {
		return c.Longest()
	}
	return best
}

// containsWord reports whether v occurs in b on its own: not inside a
// longer run of letters and digits (12345 is not in tk-0123456789).
func containsWord(b, v []byte) bool {
	for off := 0; ; {
		i := bytes.Index(b[off:], v)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(v)
		if (i == 0 || !alnum(b[i-1])) && (end == len(b) || !alnum(b[end])) {
			return true
		}
		off = i + 1
	}
}

func alnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ClientGroup is the flows one client opened: an HTTP flow and the flows
// of the same host that send values its answers handed out.
type ClientGroup struct {
	Host   string
	Flows  []int // the HTTP flow first
	Values int   // the links between them
}

func (g ClientGroup) String() string {
	fl := make([]string, len(g.Flows))
	for i, f := range g.Flows {
		fl[i] = strconv.Itoa(f)
	}
	return fmt.Sprintf("flows %s are one client's (host %s, linked by %d values): replay the socket's flow with an http step for this one, or --flows all: the recorded requests as each client's steps", strings.Join(fl, ", "), g.Host, g.Values)
}

// ClientGroups groups each HTTP flow with the flows its links reach.
func ClientGroups(flows []FlowData, links []Link) []ClientGroup {
	hosts := map[int]string{}
	for _, f := range flows {
		hosts[f.Index] = host(f.Client)
	}
	var out []ClientGroup
	at := map[int]int{}
	for _, l := range links {
		i, ok := at[l.From]
		if !ok {
			i = len(out)
			at[l.From] = i
			out = append(out, ClientGroup{Host: hosts[l.From], Flows: []int{l.From}})
		}
		g := &out[i]
		g.Values++
		if !slices.Contains(g.Flows, l.To) {
			g.Flows = append(g.Flows, l.To)
		}
	}
	return out
}

package profile

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// HTTP steps: requests a client makes before its realtime connection (a
// seat reservation, a session token, the game server's address), each a
// template over the client's values, each answer's values taken by JSON
// path, regexp or header. A value taken is a correlation like one a
// server message hands out: ${name} in later templates (the next step,
// the login's messages, the connect address), and where the recording
// carried its recorded value (the upgrade's path, query or headers, a
// client message) the value this client was handed replaces it. The
// profile composes requests and reads answers; the fleet does the I/O.

// HTTPStepSpec is one request of a profile file's `http`.
type HTTPStepSpec struct {
	// Name labels the step's failures (<name>_http_503); default http1,
	// http2, ...
	Name string `yaml:"name"`
	// Method defaults to GET, POST when there is a body.
	Method string `yaml:"method"`
	// URL is a path (sent to --target over http) or an absolute http or
	// https URL; a template.
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	Body    string            `yaml:"body"`
	// Socket makes the step a WebSocket of its own (a lobby socket): the
	// upgrade at URL (a path, or a ws:// or wss:// URL) with Headers,
	// then each of Send as a text message; its takes are found in the
	// messages the server answers (any of them, until all are), and the
	// step ends there with a close. Body is not used.
	Socket bool     `yaml:"socket"`
	Send   []string `yaml:"send"`
	// Take are the values the answer hands out.
	Take []TakeSpec `yaml:"take"`
}

// TakeSpec is a value taken from an HTTP answer: by JSON path
// ($.room.roomId), a regexp's first group over the body, or a header.
// Recorded says where the recorded client carried the recorded value
// (a regexp over the upgrade request and the client messages, or the
// value itself), so that it is replaced.
type TakeSpec struct {
	Name     string     `yaml:"name"`
	JSON     string     `yaml:"json"`
	Regexp   string     `yaml:"regexp"`
	Header   string     `yaml:"header"`
	Recorded *FieldSpec `yaml:"recorded"`
}

// maxHTTPSteps bounds a profile's HTTP steps.
const maxHTTPSteps = 8

// httpStep is a compiled HTTPStepSpec.
type httpStep struct {
	name, method string
	url          *template
	urlText      string // as the profile wrote it
	hdrNames     []string
	hdrVals      []*template
	body         *template
	takes        []httpTake
	// socket: a WebSocket step, sending send (socketstep.go).
	socket bool
	send   []*template
}

// httpTake is a compiled TakeSpec: corr is its correlation's index.
type httpTake struct {
	name   string
	path   []string // JSON path: keys, and [n] as "[n]"
	re     *regexp.Regexp
	header string
	corr   int
}

// compileHTTP compiles the HTTP steps, connect and upgrade_query, every
// mistake at once. A take is a correlation whatever its mistakes, so
// that a template naming it is not refused for them too.
func (s *Spec) compileHTTP(p *Profile) error {
	var errs specErrors
	if len(s.HTTP) > maxHTTPSteps {
		errs.add(bad("http", "%d steps: at most %d", len(s.HTTP), maxHTTPSteps))
	}
	// The takes are correlations first, so that every step's templates
	// may name the values of the steps before.
	for i, h := range s.HTTP {
		for j, t := range h.Take {
			path := fmt.Sprintf("http[%d].take[%d]", i, j)
			if !validName.MatchString(t.Name) {
				errs.add(bad(path+".name", "%q: lower case letters, digits and _", t.Name))
			}
			c := corrRule{name: t.Name, http: i + 1, from: fieldRule{kind: -1}}
			if t.Recorded != nil {
				f, err := p.compileField(path+".recorded", t.Recorded, false)
				errs.add(err)
				c.recorded = f
			}
			p.corrs = append(p.corrs, c)
		}
	}
	corr := len(p.corrs) - countTakes(s.HTTP)
	for i, h := range s.HTTP {
		st, err := p.compileHTTPStep(fmt.Sprintf("http[%d]", i), i, h, corr)
		errs.add(err)
		corr += len(h.Take)
		p.http = append(p.http, st)
	}
	if s.Connect != "" {
		var err error
		if p.connect, err = parseTemplate(TemplateSpec{Text: s.Connect}, p.clientResolver); err != nil {
			errs.add(bad("connect", "%v", err))
		}
	}
	for _, k := range sortedKeys(s.UpgradeQuery) {
		if s.Transport != string(WebSocket) {
			errs.add(bad("upgrade_query", "only a websocket profile has an upgrade request"))
			break
		}
		if k == "" || strings.ContainsAny(k, "&=# ") {
			errs.add(bad("upgrade_query", "%q is not a query parameter's name", k))
			continue
		}
		q := queryEdit{name: k}
		if v := s.UpgradeQuery[k]; v != "" {
			t, err := parseTemplate(TemplateSpec{Text: v}, p.clientResolver)
			if err != nil {
				errs.add(bad("upgrade_query."+k, "%v", err))
				continue
			}
			q.val = t
		}
		p.upgradeQuery = append(p.upgradeQuery, q)
	}
	return errs.err()
}

// compileHTTPStep compiles HTTP step i at path, every mistake at once;
// its takes are the correlations from corr on.
func (p *Profile) compileHTTPStep(path string, i int, h HTTPStepSpec, corr int) (httpStep, error) {
	var errs specErrors
	st := httpStep{name: h.Name, method: strings.ToUpper(h.Method), urlText: h.URL}
	if st.name == "" {
		st.name = "http" + strconv.Itoa(i+1)
	} else if !validName.MatchString(st.name) {
		errs.add(bad(path+".name", "%q: lower case letters, digits and _", h.Name))
	} else if w, ok := reservedStepName(st.name); ok {
		errs.add(bad(path+".name", "%q: a step's failures are labelled <step>_<reason>, and %s_... names the fleet's own failures (connect_timeout, tls_error, ...): name the step otherwise", h.Name, w))
	}
	if st.method == "" {
		st.method = "GET"
		if h.Body != "" {
			st.method = "POST"
		}
	}
	if !h.Socket && !validMethod(st.method) {
		msg := fmt.Sprintf("%q: an HTTP method (GET, POST, PUT, ...)", h.Method)
		if m := suggest(st.method, httpMethods); m != "" {
			msg += " (did you mean " + m + "?)"
		}
		errs.add(bad(path+".method", "%s", msg))
	}
	var err error
	u := h.URL
	switch {
	case u == "":
		errs.add(bad(path+".url", "give a path (/matchmake/...) or an http(s) URL"))
	case !h.Socket && !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "${") &&
		!strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://"):
		errs.add(bad(path+".url", "%q: a path (/matchmake/...) or an http:// or https:// URL", u))
	default:
		st.url, err = parseTemplate(TemplateSpec{Text: h.URL}, p.clientResolver)
		if err != nil {
			errs.add(bad(path+".url", "%v", err))
		}
	}
	if h.Body != "" {
		if st.body, err = parseTemplate(TemplateSpec{Text: h.Body}, p.clientResolver); err != nil {
			errs.add(bad(path+".body", "%v", err))
		}
	}
	errs.add(st.compileSocket(h, path, p))
	for _, k := range sortedKeys(h.Headers) {
		if !validToken(k) {
			errs.add(bad(path+".headers."+k, "%q is not a header's name (letters, digits and !#$%%&'*+-.^_`|~)", k))
			continue
		}
		t, err := parseTemplate(TemplateSpec{Text: h.Headers[k]}, p.clientResolver)
		if err != nil {
			errs.add(bad(path+".headers."+k, "%v", err))
			continue
		}
		st.hdrNames, st.hdrVals = append(st.hdrNames, k), append(st.hdrVals, t)
	}
	for j, t := range h.Take {
		tp := fmt.Sprintf("%s.take[%d]", path, j)
		tk := httpTake{name: t.Name, header: t.Header, corr: corr + j}
		n := 0
		if t.JSON != "" {
			n++
			if tk.path, err = parseJSONPath(t.JSON); err != nil {
				errs.add(bad(tp+".json", "%q: %v", t.JSON, err))
			}
		}
		if t.Regexp != "" {
			n++
			if tk.re, err = regexp.Compile(t.Regexp); err != nil || tk.re.NumSubexp() < 1 {
				errs.add(bad(tp+".regexp", "%q: a regular expression with one group", t.Regexp))
			}
		}
		if t.Header != "" {
			n++
		}
		if n != 1 {
			errs.add(bad(tp, "give one of json, regexp or header"))
		}
		st.takes = append(st.takes, tk)
	}
	if len(errs) > 0 {
		return st, errs
	}
	return st, nil
}

// httpMethods are the methods a "did you mean" proposes.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// validMethod reports whether m is a method net/http sends: a known one,
// or a token no known one is a slip away from.
func validMethod(m string) bool {
	return contains(httpMethods, m) || validToken(m) && suggest(m, httpMethods) == ""
}

// validToken reports whether s is an HTTP token (RFC 9110), what a
// method or a header's name is.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// queryEdit is one upgrade_query parameter: its value for a client, or
// nil to leave it out.
type queryEdit struct {
	name string
	val  *template
}

// withQuery is the upgrade request req with the profile's query
// parameters set for this client: each replaced where the request line
// has it, added where it has not, or left out; the rest as recorded.
func (c *client) withQuery(req []byte) []byte {
	line, rest, ok := bytes.Cut(req, []byte("\r\n"))
	method, tail, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(tail, []byte(" "))
	if !ok || !ok1 || !ok2 {
		return req
	}
	path, query, _ := strings.Cut(string(target), "?")
	var params []string
	if query != "" {
		params = strings.Split(query, "&")
	}
	for _, q := range c.s.p.upgradeQuery {
		val := ""
		if q.val != nil {
			val = q.name + "=" + url.QueryEscape(string(q.val.render(nil, &tvalues{c: c})))
		}
		set := false
		out := params[:0:0]
		for _, p := range params {
			if name, _, _ := strings.Cut(p, "="); name == q.name {
				if val != "" && !set {
					out = append(out, val)
				}
				set = true
				continue
			}
			out = append(out, p)
		}
		if !set && val != "" {
			out = append(out, val)
		}
		params = out
	}
	target = []byte(path)
	if len(params) > 0 {
		target = append(append(target, '?'), strings.Join(params, "&")...)
	}
	out := make([]byte, 0, len(req)+64)
	out = append(append(append(append(append(out, method...), ' '), target...), ' '), proto...)
	return append(append(out, "\r\n"...), rest...)
}

func countTakes(h []HTTPStepSpec) int {
	n := 0
	for _, s := range h {
		n += len(s.Take)
	}
	return n
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// parseJSONPath reads $.a.b[0].c (or a.b[0].c) into its steps.
func parseJSONPath(s string) ([]string, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "$"), ".")
	var out []string
	for s != "" {
		switch {
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, errors.New("[ without ]")
			}
			if _, err := strconv.Atoi(s[1:end]); err != nil {
				return nil, fmt.Errorf("index %q is not a number", s[1:end])
			}
			out = append(out, s[:end+1])
			s = strings.TrimPrefix(s[end+1:], ".")
		default:
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, errors.New("an empty key")
			}
			out = append(out, s[:end])
			s = strings.TrimPrefix(s[end:], ".")
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no key")
	}
	return out, nil
}

// jsonAt is the value at path in a decoded JSON document: a string as
// it is, anything else as JSON.
func jsonAt(doc any, path []string) ([]byte, bool) {
	for _, k := range path {
		if k[0] == '[' {
			a, ok := doc.([]any)
			n, _ := strconv.Atoi(k[1 : len(k)-1])
			if !ok || n < 0 || n >= len(a) {
				return nil, false
			}
			doc = a[n]
			continue
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, false
		}
		if doc, ok = m[k]; !ok {
			return nil, false
		}
	}
	switch v := doc.(type) {
	case string:
		return []byte(v), true
	case nil:
		return nil, false
	default:
		b, err := json.Marshal(v)
		return b, err == nil
	}
}

// HTTPRequest is one HTTP step's request for one client.
type HTTPRequest struct {
	// Step names it, for the failure's label.
	Step   string
	Method string
	// URL is a path (to the target) or an absolute URL.
	URL     string
	Headers [][2]string
	Body    []byte
	// Socket says the step is a WebSocket (Method GET, URL its
	// upgrade's target): Send are its messages; its answers go to
	// SocketAnswer, not HTTPAnswer.
	Socket bool
	Send   [][]byte
}

// HTTPStepper is a client with HTTP steps before its connection. The
// fleet calls HTTPRequest(0), does it, hands the answer to HTTPAnswer,
// and so on while ok; then it dials (ConnectAddr, when the profile says
// where) and sends UpgradeRequest, both with the values taken.
type HTTPStepper interface {
	HTTPRequest(i int) (req HTTPRequest, ok bool)
	// ConnectAddr is where the realtime connection goes (host:port) when
	// the profile's connect says, "" for the target.
	ConnectAddr() string
	// HTTPAnswer takes step i's values from a 2xx answer; the error
	// names what was missing (a label: missing_<value>).
	HTTPAnswer(i int, header func(string) string, body []byte) (missing string)
	// SocketAnswer takes socket step i's values from one server message;
	// missing names the first value still missing, "" once all are in
	// (socketstep.go).
	SocketAnswer(i int, msg []byte) (missing string)
	// SocketUpgraded takes socket step i's header values from its
	// upgrade's answer; missing names the first not there.
	SocketUpgraded(i int, header func(string) string) (missing string)
}

// HasHTTP reports whether clients of p make HTTP steps.
func (p *Profile) HasHTTP() bool { return len(p.http) > 0 }

// HTTPRequest implements HTTPStepper.
func (c *client) HTTPRequest(i int) (HTTPRequest, bool) {
	p := c.s.p
	if i >= len(p.http) {
		return HTTPRequest{}, false
	}
	st := &p.http[i]
	v := &tvalues{c: c}
	r := HTTPRequest{Step: st.name, Method: st.method, URL: string(st.url.render(nil, &tvalues{c: c, url: true}))}
	for k, name := range st.hdrNames {
		r.Headers = append(r.Headers, [2]string{name, string(st.hdrVals[k].render(nil, v))})
	}
	if st.body != nil {
		r.Body = st.body.render(nil, v)
	}
	if st.socket {
		r.Socket = true
		for _, m := range st.send {
			r.Send = append(r.Send, m.render(nil, v))
		}
	}
	return r, true
}

// HTTPAnswer implements HTTPStepper.
func (c *client) HTTPAnswer(i int, header func(string) string, body []byte) string {
	st := &c.s.p.http[i]
	var doc any
	decoded := false
	for _, t := range st.takes {
		var v []byte
		switch {
		case t.header != "":
			v = []byte(header(t.header))
		case t.re != nil:
			if m := t.re.FindSubmatch(body); len(m) > 1 {
				v = m[1]
			}
		default:
			if !decoded {
				decoded = true
				if json.Unmarshal(body, &doc) != nil {
					doc = nil
				}
			}
			v, _ = jsonAt(doc, t.path)
		}
		if len(v) == 0 {
			return "missing_" + t.name
		}
		cp := append([]byte(nil), v...)
		c.vals[t.corr].Store(&cp)
	}
	return ""
}

// ConnectAddr implements HTTPStepper.
func (c *client) ConnectAddr() string {
	if c.s.p.connect == nil {
		return ""
	}
	return string(c.s.p.connect.render(nil, &tvalues{c: c}))
}

// withTaken replaces, in b, each HTTP value's recorded value by the one
// this client was handed.
func (c *client) withTaken(b []byte) []byte {
	for i := range c.s.p.corrs {
		if !c.s.p.corrs[i].handed() || c.s.corrs[i] == nil {
			continue
		}
		if v := c.vals[i].Load(); v != nil {
			b = bytes.ReplaceAll(b, c.s.corrs[i], *v)
		}
	}
	return b
}

// findHTTPRecorded takes each HTTP value's recorded value from where the
// profile says the recorded client carried it: the upgrade request
// first, then the client messages.
func (s *Script) findHTTPRecorded(client []Message) {
	for i := range s.p.corrs {
		c := &s.p.corrs[i]
		if !c.handed() || c.recorded == nil {
			continue
		}
		if c.recorded.value != nil {
			s.corrs[i] = c.recorded.value
			continue
		}
		if s.upgrade != nil {
			if v := c.recorded.take(s.upgrade, -1); len(v) > 0 {
				s.corrs[i] = append([]byte(nil), v...)
				continue
			}
		}
		for _, m := range client {
			if v := c.recorded.take(m.Bytes, m.Kind); len(v) > 0 {
				s.corrs[i] = append([]byte(nil), v...)
				break
			}
		}
		if s.corrs[i] == nil {
			s.notes = append(s.notes, fmt.Sprintf("http value %s: its recorded value is not in the upgrade or the client messages: not substituted", c.name))
		}
	}
}

// newRandom is a fresh value for ${random}: 16 hex digits.
func newRandom(dst []byte) []byte {
	var b [8]byte
	rand.Read(b[:])
	return hex.AppendEncode(dst, b[:])
}

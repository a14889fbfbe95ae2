// Package profile holds protocol profiles: everything the fleet, the
// capture reader, `replay inspect` and `profile check` need to know about
// one protocol, so that they stay protocol-agnostic. A profile says how a stream splits
// into messages (framing), how to name a message (kinds), where the
// recorded user id and room sit and how a client's own replace them
// (identity), which messages form the login and what answers it, the
// heartbeat of receive-only clients, which server messages are
// deliveries, where a send can carry a latency stamp, and which values
// the server hands out that later client messages must carry
// (correlation).
//
// Profiles come built in (Builtin: reprise in Go, the others files in
// the syntax users write, builtin/*.yaml, naming Go hooks where the
// syntax cannot reach: mqtt's and redis's) or from a declarative file
// (docs/profiles.md). The one loader, Load, reads a capture's chosen flow
// the way its profile needs (internal/capture reassembles the streams)
// and compiles it into a Player, which every replayed client plays
// through its own Client: replay, its fleet runners, inspect and
// `profile check` all go through it. The reprise protocol is a profile
// like the others: its script and id rewriting (reprise_script.go), its
// zero-allocation player (reprise.go) and its inspection (joins, users,
// rooms, rates: reprise_inspect.go, gathered while the capture is read)
// live here; a command shows any profile's view of a capture through
// WriteInspection. This package opens
// no sockets and knows no scheduling: internal/fleet sends and receives
// the bytes, internal/session paces them.
package profile

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Transport is how a profile's messages travel.
type Transport string

// Transports.
const (
	TCP       Transport = "tcp"
	UDP       Transport = "udp"
	WebSocket Transport = "websocket"
)

// Profile is a compiled protocol profile.
type Profile struct {
	Name      string
	Transport Transport
	// Port is the server's usual port: it tells the client side of a
	// captured flow.
	Port uint16
	// Raw replays the recorded segments as they were sent.
	Raw bool
	// MetricsPort is the server's usual /metrics port, 0 when the
	// protocol's servers have none we know.
	MetricsPort uint16
	// reprise marks the reprise protocol: the capture reader cuts its
	// frames, and its players are Reprise.
	reprise bool

	framer Framer
	frame  FramingSpec
	client []kind
	server []kind
	// Kinds are the names of sent kinds: index 0 is "other", then the
	// client kinds, then heartbeat and leave when the spec does not name
	// them. The fleet counts sends by this index.
	Kinds KindNames

	loginSend   map[int]bool
	success     int // server kind index, -1 none (first server message)
	successWhen *matcher
	failure     int
	reason      *reasonRule
	heartbeat   []byte
	hbInterval  time.Duration
	delivery    map[int]bool
	sends       map[int]bool
	leave       []byte
	stamp       *stampRule
	identity    identityRule
	corrs       []corrRule
	http        []httpStep
	turnTakes   bool      // a Turn take: the upgrade carries a value (turncarry.go)
	connect     *template // where the connection goes, when the answers say
	// upgradeQuery sets the upgrade's query parameters per client.
	upgradeQuery []queryEdit
	// steps is a login in steps, nil for the one-step login above.
	steps []loginRule
	// reacts are the reactions; reactOn lists them by server kind;
	// reactAs marks kinds only reactions send (not counted as messages).
	reacts  []reaction
	reactOn [][]int
	reactAs map[int]bool
	fresh   []freshRule
	expects []expectRule
	fanout  Fanout
	// rooms takes the room instance the server put a client in; nil
	// when the client picks its room (rooms.go).
	rooms *instanceRule

	hooks  hooks
	labels labelSet

	// variant names p's way of logging in; variants are the others.
	variant  string
	variants []variant
	// spec is the file p was compiled from (nil for reprise): --flows
	// compiles it again with a recorded client's requests as its HTTP
	// steps (flowgroup.go).
	spec *Spec
}

// kind is one named matcher.
type kind struct {
	name string
	m    matcher
}

// matcher is a compiled MatchSpec.
type matcher struct {
	offset  int
	byteVal int
	mask    byte
	hasByte bool
	prefix  []byte
	re      *regexp.Regexp
	// lit finds re's text when re is nothing but that text, perhaps
	// anchored (say '"type":"msg"', the usual kind of a JSON protocol, or
	// '^42', socket.io's event), where litAt says: a match is then a
	// vectorised scan (finder) or a comparison, where the regexp package
	// ran its backtracker and pool after bytes.Index, a fifth of the
	// fleet's user time per WebSocket delivery (issue 34). Its text is
	// nil otherwise.
	lit     finder
	litAt   litAnchor
	command []byte
}

// litAnchor is where a literal regexp's text must be: anywhere, or
// anchored at the start (^), the end ($: the end of the message; a Go
// regexp's $ is not before a final newline), or both.
type litAnchor uint8

const (
	litAnywhere litAnchor = iota
	litPrefix
	litSuffix
	litWhole
)

// matchLit is match for a literal regexp.
func (m *matcher) matchLit(b []byte) bool {
	switch m.litAt {
	case litPrefix:
		return bytes.HasPrefix(b, m.lit.text)
	case litSuffix:
		return bytes.HasSuffix(b, m.lit.text)
	case litWhole:
		return bytes.Equal(b, m.lit.text)
	}
	return m.lit.index(b) >= 0
}

func (m *matcher) match(b []byte) bool {
	switch {
	case m.hasByte:
		return m.offset < len(b) && b[m.offset]&m.mask == byte(m.byteVal)&m.mask
	case m.prefix != nil:
		return m.offset <= len(b) && bytes.HasPrefix(b[m.offset:], m.prefix)
	case m.lit.text != nil:
		return m.matchLit(b)
	case m.re != nil:
		return m.re.Match(b)
	case m.command != nil:
		return bytes.EqualFold(commandOf(b), m.command)
	}
	return false
}

// commandOf is the first word of a RESP array or an inline command line.
func commandOf(b []byte) []byte {
	if s := RESPStrings(b); len(s) > 0 && len(b) > 0 && (b[0] == '*' || b[0] == '>') {
		return s[0]
	}
	if len(b) > 0 && strings.IndexByte("*>+-:$_,#(!=%~|", b[0]) >= 0 {
		return nil
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) == 0 {
		return nil
	}
	return f[0]
}

// reasonRule reads a failure reason.
type reasonRule struct {
	offset, size int
	names        map[int]string
	re           *regexp.Regexp
}

// fieldRule is a compiled FieldSpec.
type fieldRule struct {
	value  []byte
	kind   int // -1: any
	offset int
	skip   []skipOp
	length int
	re     *regexp.Regexp
	// json is a JSON path in the message (a value one connection gives
	// the client's next: turncarry.go), nil for none.
	json []string
}

// skipOp moves a field's offset past a variable-length part.
type skipOp uint8

const (
	skipVarint skipOp = iota // MQTT's variable-length integer
	skipLen8                 // a string after its 1-byte length
	skipLen16                // a string after its 2-byte big-endian length
)

func compileSkips(path string, names []string) ([]skipOp, error) {
	var out []skipOp
	var errs specErrors
	for i, n := range names {
		switch n {
		case "varint":
			out = append(out, skipVarint)
		case "len8":
			out = append(out, skipLen8)
		case "len16":
			out = append(out, skipLen16)
		default:
			errs.add(oneOf(fmt.Sprintf("%s.skip[%d]", path, i), n, "varint", "len8", "len16"))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// skipFrom is off moved past the skips in b, false when b ends first.
func skipFrom(b []byte, off int, skips []skipOp) (int, bool) {
	for _, s := range skips {
		if off < 0 || off > len(b) {
			return 0, false
		}
		switch s {
		case skipVarint:
			_, n, err := ReadVarint(b[off:])
			if err != nil || n == 0 {
				return 0, false
			}
			off += n
		case skipLen8:
			if off+1 > len(b) {
				return 0, false
			}
			off += 1 + int(b[off])
		case skipLen16:
			if off+2 > len(b) {
				return 0, false
			}
			off += 2 + (int(b[off])<<8 | int(b[off+1]))
		}
	}
	return off, true
}

// take reads the field from a message of kind k, nil when it is not there.
func (f *fieldRule) take(b []byte, k int) []byte {
	if f.kind >= 0 && k != f.kind {
		return nil
	}
	if f.re != nil {
		m := f.re.FindSubmatch(b)
		if len(m) < 2 {
			return nil
		}
		return m[1]
	}
	if f.json != nil {
		return takeJSON(b, f.json)
	}
	off := f.offset
	if off < 0 {
		off += len(b)
	}
	if len(f.skip) > 0 {
		var ok bool
		if off, ok = skipFrom(b, off, f.skip); !ok {
			return nil
		}
	}
	if off < 0 || f.length <= 0 || off+f.length > len(b) {
		return nil
	}
	return b[off : off+f.length]
}

type identityRule struct {
	user, room *fieldRule
	peers      *fieldRule
	// serverID is 1 + the index of the correlation holding the
	// client's server-issued id, 0 for none; serverPeers places peers'
	// server ids.
	serverID     int
	serverPeers  *fieldRule
	format       string
	lengthBefore int
	little       bool
	// encoding is how client messages encode the strings ids sit in:
	// their length prefixes are fixed up (encoding.go).
	encoding payloadEncoding
}

type corrRule struct {
	name string
	from fieldRule
	into map[int]bool // nil: all
	wait bool
	// http is 1 + the HTTP step whose answer hands the value out (0: a
	// server message does); recorded says where the recorded client
	// carried it.
	http     int
	recorded *fieldRule
	// carried: the value is the client's previous connection's, put in
	// by the fleet before the login (turncarry.go's Carry); its from
	// takes nothing.
	carried bool
}

// handed reports whether the value comes from outside this connection's
// server messages: an HTTP step's answer, or the client's previous
// connection.
func (c *corrRule) handed() bool { return c.http > 0 || c.carried }

// hooks are the Go code a profile names (Spec.Hooks, namedHooks).
type hooks interface {
	// recorded proposes the recorded user id and room from the client
	// messages, when the spec does not place them.
	recorded(msgs []Message) (user, room []byte)
	// rewrite returns m with every old value replaced by its new one
	// (lengths may differ) and its lengths fixed up.
	rewrite(m []byte, subs []sub) []byte
	// failure names a refused login from the answer, "" when m is no
	// refusal.
	failure(m []byte) string
	// success reports whether m accepts the login.
	success(m []byte) bool
	// templated reports whether a client message differs per client
	// even where no recorded value shows (an empty MQTT client id).
	templated(m []byte) bool
}

// sub is one replacement.
type sub struct{ old, new []byte }

// Compile checks a Spec and compiles it.
func Compile(s *Spec) (*Profile, error) {
	p, err := s.compile()
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", s.Name, err)
	}
	return p, nil
}

func (s *Spec) validate() error {
	_, err := s.compile()
	return err
}

func (s *Spec) compile() (*Profile, error) {
	sc := *s
	p := &Profile{Name: s.Name, Transport: Transport(s.Transport), Port: s.Port, frame: s.Framing, spec: &sc}
	var errs specErrors
	// Each part is checked whatever the others hold, unless it reads what
	// a failed one makes: a user sees every mistake at once, and no
	// mistake that only follows from another.
	if s.Name == "" {
		errs.add(bad("name", "a profile needs a name"))
	}
	transportOK := true
	switch p.Transport {
	case "":
		p.Transport = TCP
	case TCP, UDP, WebSocket:
	default:
		transportOK = false
		errs.add(oneOf("transport", s.Transport, "tcp", "udp", "websocket"))
	}
	if s.Hooks != "" {
		if h, ok := namedHooks[s.Hooks]; ok {
			p.hooks = h()
		} else {
			errs.add(hooksError(s.Hooks))
		}
	}
	// A bad transport still has its framing checked, as over WebSocket
	// (which refuses no framing the others take).
	ft := p.Transport
	if !transportOK {
		ft = WebSocket
	}
	var err error
	p.framer, err = s.Framing.compile(ft)
	errs.add(err)
	p.Raw = s.Framing.Type == "raw"
	var errC, errS error
	p.client, errC = compileKinds("kinds.client", s.Kinds.Client)
	p.server, errS = compileKinds("kinds.server", s.Kinds.Server)
	errs.add(errC)
	errs.add(errS)
	if p.fanout, err = ParseFanout(s.Fanout); err != nil {
		errs.add(oneOf("fanout", s.Fanout, fanoutNames[:]...))
	}
	p.Kinds = KindNames{"other"}
	for _, k := range p.client {
		p.Kinds = append(p.Kinds, k.name)
	}
	for _, extra := range []string{"heartbeat", "leave"} {
		if p.clientKind(extra) < 0 {
			p.Kinds = append(p.Kinds, extra)
		}
	}
	// A name extraKinds refuses is not added: what names it is checked
	// as if it had none.
	errs.add(s.extraKinds(p))
	if len(p.Kinds) > MaxKinds {
		errs.add(bad("kinds.client", "%d kinds: at most %d", len(p.Kinds), MaxKinds-3))
		return nil, errs
	}
	errLogin := s.compileLogin(p)
	errs.add(errLogin)
	errs.add(s.compileMessages(p))
	errs.add(s.compileFresh(p))
	errs.add(s.compileExpects(p))
	// A correlation, or an HTTP step's take, is a value by its name
	// whatever its mistakes: what names it is checked as well.
	errs.add(s.compileHTTP(p))
	errs.add(s.compileTurn(p))
	errs.add(s.compileIdentity(p))
	if errLogin == nil {
		errs.add(s.compileLoginSteps(p))
	}
	errs.add(s.compileReactions(p))
	errs.add(s.compileRooms(p))
	errs.add(s.compileVariants(p, len(errs) == 0))
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// KindNames are the names of the sent kinds, by index.
type KindNames []string

// Index is the index of a kind name, 0 (other) when there is none.
func (k KindNames) Index(name string) int { return k.index(name) }

func (k KindNames) index(name string) int {
	for i, n := range k {
		if n == name {
			return i
		}
	}
	return 0
}

// MaxKinds bounds a profile's sent kinds (and so the fleet's counters).
const MaxKinds = 16

// compile checks the framing's common keys and its type's, every mistake
// at once.
func (f FramingSpec) compile(t Transport) (Framer, error) {
	var errs specErrors
	switch f.Endian {
	case "", "big", "little":
	default:
		errs.add(oneOf("framing.endian", f.Endian, "big", "little"))
	}
	if f.Max < 0 {
		errs.add(bad("framing.max", "%d: must not be negative", f.Max))
	}
	if f.Offset < 0 || f.Offset > 1<<16 {
		errs.add(bad("framing.offset", "%d: out of range", f.Offset))
	}
	if f.Span && t != WebSocket {
		errs.add(bad("framing.span", "only over websocket: a datagram or a stream has no messages to span"))
	}
	fr, err := f.compileType(t, f.Endian == "little")
	errs.add(err)
	if len(errs) > 0 {
		return nil, errs
	}
	return fr, nil
}

// compileType is the framer of the framing's type, every mistake in its
// keys at once.
func (f FramingSpec) compileType(t Transport, little bool) (Framer, error) {
	var errs specErrors
	var fr Framer
	switch f.Type {
	case "length":
		if f.Size != 1 && f.Size != 2 && f.Size != 4 && f.Size != 8 {
			errs.add(bad("framing.size", "%d: 1, 2, 4 or 8", f.Size))
		}
		whole := false
		switch f.Counts {
		case "", "after":
		case "whole":
			whole = true
		default:
			errs.add(oneOf("framing.counts", f.Counts, "after", "whole"))
		}
		fr = LengthField{Offset: f.Offset, Size: f.Size, LittleEnd: little, CountsWhole: whole, Adjust: f.Adjust, Max: f.Max}
	case "varint":
		fr = Varint{Offset: f.Offset, Max: f.Max}
	case "delimiter":
		if f.Delimiter == "" {
			errs.add(bad("framing.delimiter", "a delimiter framing needs a delimiter"))
		}
		fr = Delimiter{Delim: []byte(f.Delimiter), BulkPrefix: []byte(f.Bulk), Max: f.Max}
	case "counted":
		d := f.Delimiter
		if d == "" {
			d = "\r\n"
		}
		var re *regexp.Regexp
		if f.Count == "" {
			errs.add(bad("framing.count", "a counted framing needs count: a regular expression for the lines that announce a payload"))
		} else {
			var err error
			if re, err = regexp.Compile(f.Count); err != nil {
				errs.add(bad("framing.count", "%v", err))
			}
		}
		fr = Counted{Delim: []byte(d), Count: re, Max: f.Max}
	case "resp":
		fr = RESP{Max: f.Max}
	case "message", "raw":
		fr = Whole{}
	case "":
		if t != UDP && t != WebSocket {
			errs.add(bad("framing.type", "missing: %s", orList(framingTypes)))
		}
		fr = Whole{}
	default:
		errs.add(oneOf("framing.type", f.Type, framingTypes...))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return fr, nil
}

func compileKinds(path string, ks []KindSpec) ([]kind, error) {
	out := make([]kind, 0, len(ks))
	seen := map[string]bool{}
	var errs specErrors
	for i, k := range ks {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case !validName.MatchString(k.Name):
			errs.add(bad(p+".name", "%q: a kind name is lower case letters, digits and _ (up to 32)", k.Name))
		case seen[k.Name]:
			errs.add(bad(p+".name", "%q is named twice", k.Name))
		}
		m, err := compileMatch(p+".match", k.Match)
		if err != nil {
			errs.add(err)
			m = &matcher{}
		}
		if !seen[k.Name] {
			out = append(out, kind{k.Name, *m})
		}
		seen[k.Name] = true
	}
	if len(errs) > 0 {
		// Every kind named, whatever its mistakes: what names one is
		// checked as well, and not refused for them again.
		return out, errs
	}
	return out, nil
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// literalOf is the text a regexp matches when it is nothing but that
// text (perhaps in a group), perhaps anchored at the message's start or
// end, and where; ok false otherwise: case folding, a line anchor or any
// operator make it a regexp. (Not regexp.LiteralPrefix: it calls `^abc$`
// wholly literal, as if unanchored.) A U+FFFD in the text stays a
// regexp, which matches it against invalid UTF-8 in a message as a
// comparison of bytes would not.
func literalOf(expr string) (text []byte, at litAnchor, ok bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, 0, false
	}
	re = uncaptured(re.Simplify())
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	begin := len(subs) > 1 && subs[0].Op == syntax.OpBeginText
	if begin {
		subs = subs[1:]
	}
	end := len(subs) > 1 && subs[len(subs)-1].Op == syntax.OpEndText
	if end {
		subs = subs[:len(subs)-1]
	}
	if len(subs) != 1 {
		return nil, 0, false
	}
	lit := uncaptured(subs[0])
	if lit.Op != syntax.OpLiteral || lit.Flags&syntax.FoldCase != 0 || len(lit.Rune) == 0 || slices.Contains(lit.Rune, utf8.RuneError) {
		return nil, 0, false
	}
	switch {
	case begin && end:
		at = litWhole
	case begin:
		at = litPrefix
	case end:
		at = litSuffix
	}
	return []byte(string(lit.Rune)), at, true
}

// uncaptured is re without the groups around it.
func uncaptured(re *syntax.Regexp) *syntax.Regexp {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	return re
}

func compileMatch(path string, s MatchSpec) (*matcher, error) {
	var errs specErrors
	m := &matcher{offset: s.Offset, mask: 0xff}
	if s.Offset < 0 || s.Offset > 1<<16 {
		errs.add(bad(path+".offset", "%d: out of range", s.Offset))
	}
	n := 0
	if s.Byte != nil {
		n++
		if *s.Byte < 0 || *s.Byte > 255 {
			errs.add(bad(path+".byte", "%d: a byte is 0 to 255", *s.Byte))
		}
		m.hasByte, m.byteVal = true, *s.Byte
	}
	if s.Mask != nil {
		if s.Byte == nil || *s.Mask < 0 || *s.Mask > 255 {
			errs.add(bad(path+".mask", "a mask (0 to 255) goes with a byte"))
		}
		m.mask = byte(*s.Mask)
	}
	if s.Prefix != "" || s.anyPrefix {
		n++
		m.prefix = []byte(s.Prefix)
	}
	if s.Hex != "" {
		n++
		b, err := hex.DecodeString(strings.Join(strings.Fields(s.Hex), ""))
		if err != nil || len(b) == 0 {
			errs.add(bad(path+".hex", "%q is not hex", s.Hex))
		}
		m.prefix = b
	}
	if s.Regexp != "" {
		n++
		re, err := regexp.Compile(s.Regexp)
		if err != nil {
			errs.add(bad(path+".regexp", "%v", err))
		}
		m.re = re
		if re != nil {
			if lit, at, ok := literalOf(s.Regexp); ok {
				m.lit, m.litAt = newFinder(lit), at
			}
		}
	}
	if s.Command != "" {
		n++
		m.command = []byte(s.Command)
	}
	if n != 1 {
		errs.add(bad(path, "give exactly one of byte, prefix, hex, regexp or command (%d given)", n))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return m, nil
}

// MinHeartbeat is the shortest heartbeat interval a profile or the
// command line may ask for.
const MinHeartbeat = 10 * time.Millisecond

// HeartbeatInterval is the profile's heartbeat.interval: how often a
// receive-only client heartbeats when the command line does not say; 0
// when the profile gives none.
func (p *Profile) HeartbeatInterval() time.Duration { return p.hbInterval }

func (p *Profile) clientKind(name string) int {
	for i, k := range p.Kinds {
		if k == name {
			return i
		}
	}
	return -1
}

func (p *Profile) serverKind(name string) int {
	for i, k := range p.server {
		if k.name == name {
			return i
		}
	}
	return -1
}

func (p *Profile) kindList(path string, names []string, server bool) (map[int]bool, error) {
	out := map[int]bool{}
	var errs specErrors
	for i, n := range names {
		k := p.clientKind(n)
		if server {
			k = p.serverKind(n)
		}
		if k < 0 || (!server && k == 0) {
			errs.add(bad(fmt.Sprintf("%s[%d]", path, i), "%q is not a %s kind%s", n, side(server), p.kindHint(n, server)))
			continue
		}
		out[k] = true
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

func side(server bool) string {
	if server {
		return "server"
	}
	return "client"
}

func (s *Spec) compileLogin(p *Profile) error {
	var errs specErrors
	var err error
	p.loginSend, err = p.kindList("login.send", s.Login.Send, false)
	errs.add(err)
	p.success, p.failure = -1, -1
	if s.Login.Success != "" {
		if p.success = p.serverKind(s.Login.Success); p.success < 0 {
			errs.add(bad("login.success", "%q is not a server kind%s", s.Login.Success, p.kindHint(s.Login.Success, true)))
		}
	}
	if s.Login.When != nil {
		p.successWhen, err = compileMatch("login.when", *s.Login.When)
		errs.add(err)
	}
	if s.Login.Failure != "" {
		if p.failure = p.serverKind(s.Login.Failure); p.failure < 0 {
			errs.add(bad("login.failure", "%q is not a server kind%s", s.Login.Failure, p.kindHint(s.Login.Failure, true)))
		}
	}
	if r := s.Login.Reason; r != nil {
		rr, err := compileReason(r)
		errs.add(err)
		p.reason = rr
	}
	return errs.err()
}

// compileReason compiles login.reason, every mistake at once.
func compileReason(r *ReasonSpec) (*reasonRule, error) {
	var errs specErrors
	rr := &reasonRule{offset: r.Offset, size: r.Size, names: map[int]string{}}
	switch {
	case r.Regexp != "":
		re, err := regexp.Compile(r.Regexp)
		if err != nil || re.NumSubexp() < 1 {
			errs.add(bad("login.reason.regexp", "%q: a regular expression with one group", r.Regexp))
		}
		rr.re = re
	default:
		if r.Size != 1 && r.Size != 2 && r.Size != 4 {
			errs.add(bad("login.reason.size", "%d: 1, 2 or 4 (or give a regexp)", r.Size))
		}
		if r.Offset < 0 {
			errs.add(bad("login.reason.offset", "%d: must not be negative", r.Offset))
		}
	}
	codes := make([]int, 0, len(r.Names))
	for code := range r.Names {
		codes = append(codes, code)
	}
	slices.Sort(codes) // the mistakes in a stable order
	for _, code := range codes {
		name := r.Names[code]
		if !validName.MatchString(name) {
			errs.add(bad("login.reason.names", "%q: a reason is lower case letters, digits and _", name))
			continue
		}
		rr.names[code] = name
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rr, nil
}

func (s *Spec) compileMessages(p *Profile) error {
	var errs specErrors
	var err error
	if s.Heartbeat != nil {
		if p.heartbeat, err = fixedBytes(s.Heartbeat.Template); err != nil {
			errs.add(bad("heartbeat.template", "%v", err))
		} else if len(p.heartbeat) == 0 {
			errs.add(bad("heartbeat.template", "empty"))
		}
		p.hbInterval = time.Duration(s.Heartbeat.Interval)
		if p.hbInterval != 0 && p.hbInterval < MinHeartbeat {
			errs.add(bad("heartbeat.interval", "%v: at least %v (a shorter one floods the server with pings)", p.hbInterval, MinHeartbeat))
		}
	}
	if s.Leave != nil {
		if p.leave, err = fixedBytes(*s.Leave); err != nil {
			errs.add(bad("leave", "%v", err))
		}
	}
	p.delivery, err = p.kindList("delivery", s.Delivery, true)
	deliveryOK := err == nil
	errs.add(err)
	p.sends, err = p.kindList("sends", s.Sends, false)
	errs.add(err)
	if l := s.Latency; l != nil {
		p.stamp, err = p.compileStamp(l, deliveryOK)
		errs.add(err)
	}
	for i, c := range s.Correlation {
		cr, err := p.compileCorrelation(fmt.Sprintf("correlation[%d]", i), c)
		errs.add(err)
		if err != nil {
			// Still a value by its name: what names it is checked as
			// well, and not refused for this correlation's mistakes.
			cr = &corrRule{name: c.Name, from: fieldRule{kind: -1}}
		}
		p.corrs = append(p.corrs, *cr)
	}
	return errs.err()
}

// fixedBytes are a heartbeat's or a leave's bytes: sent as written, so a
// ${...} in its text, which would go out as written, is refused.
func fixedBytes(t TemplateSpec) ([]byte, error) {
	if i := strings.Index(t.Text, "${"); i >= 0 {
		end := strings.IndexByte(t.Text[i:], '}')
		ref := t.Text[i:]
		if end >= 0 {
			ref = ref[:end+1]
		}
		return nil, fmt.Errorf("%s: sent as written, not filled in (only a send, a login step or a reaction is a template)", ref)
	}
	return t.Bytes()
}

// compileCorrelation compiles one correlation, every mistake at once.
func (p *Profile) compileCorrelation(path string, c CorrelationSpec) (*corrRule, error) {
	var errs specErrors
	if !validName.MatchString(c.Name) {
		errs.add(bad(path+".name", "%q: lower case letters, digits and _", c.Name))
	}
	f, err := p.compileField(path+".from", &c.From, true)
	errs.add(err)
	if err == nil && f.value != nil {
		errs.add(bad(path+".from", "a correlation is taken from a server message: give kind with offset and length, or a regexp"))
	}
	into, err := p.kindList(path+".into", c.Into, false)
	errs.add(err)
	if len(errs) > 0 {
		return nil, errs
	}
	if len(into) == 0 {
		into = nil
	}
	return &corrRule{name: c.Name, from: *f, into: into, wait: c.Wait}, nil
}

// compileStamp compiles latency, every mistake at once; deliveryOK says
// the delivery list compiled (else whether latency.delivery is in it is
// not asked).
func (p *Profile) compileStamp(l *LatencySpec, deliveryOK bool) (*stampRule, error) {
	var errs specErrors
	st := &stampRule{send: p.clientKind(l.Send), delivery: p.serverKind(l.Delivery), sendOffset: l.SendOffset, deliveryOffset: l.DeliveryOffset}
	if st.send <= 0 {
		errs.add(bad("latency.send", "%q is not a client kind%s", l.Send, p.kindHint(l.Send, false)))
	}
	switch {
	case st.delivery < 0:
		errs.add(bad("latency.delivery", "%q is not a server kind%s", l.Delivery, p.kindHint(l.Delivery, true)))
	case deliveryOK && !p.delivery[st.delivery]:
		errs.add(bad("latency.delivery", "%q is not a delivery kind (list it in delivery): its stamps would never be read", l.Delivery))
	}
	encOK := true
	if l.Encoding != "" {
		e, ok := encodingNames[l.Encoding]
		if !ok {
			encOK = false
			errs.add(oneOf("latency.encoding", l.Encoding, "binary", "decimal", "hex", "base64"))
		}
		st.enc = e
	}
	places := 0
	if l.Regexp != "" {
		places++
		re, err := regexp.Compile(l.Regexp)
		if err != nil || re.NumSubexp() < 1 {
			errs.add(bad("latency.regexp", "%q: a regular expression with one group (the stamp's place)", l.Regexp))
		}
		st.re = re
	}
	if l.JSON != "" {
		places++
		st.key = newFinder(strconv.AppendQuote(nil, l.JSON))
	}
	if l.Add && l.JSON == "" {
		errs.add(bad("latency.add", "adds a JSON field: give latency.json"))
	}
	st.add = l.Add
	if places > 1 || (places == 1 && (l.SendOffset != 0 || l.DeliveryOffset != 0)) {
		errs.add(bad("latency", "give one place: send_offset and delivery_offset, regexp, or json"))
	}
	if places == 1 && encOK && st.enc == encBinary {
		errs.add(bad("latency.encoding", "a stamp in a regexp group or a JSON string is text: give decimal, hex or base64"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return st, nil
}

func (p *Profile) compileField(path string, f *FieldSpec, server bool) (*fieldRule, error) {
	var errs specErrors
	r := &fieldRule{kind: -1, offset: f.Offset, length: f.Length}
	var err error
	r.skip, err = compileSkips(path, f.Skip)
	errs.add(err)
	if len(r.skip) > 0 && f.Offset < 0 {
		errs.add(bad(path+".offset", "%d: an offset with skips counts from the start", f.Offset))
	}
	if f.Kind != "" {
		r.kind = p.clientKind(f.Kind)
		if server {
			r.kind = p.serverKind(f.Kind)
		}
		if r.kind < 0 {
			errs.add(bad(path+".kind", "%q is not a %s kind%s", f.Kind, side(server), p.kindHint(f.Kind, server)))
		}
	}
	switch {
	case f.Value != "":
		if f.Regexp != "" || f.Length != 0 {
			errs.add(bad(path, "give a value, or a place (offset and length, or regexp), not both"))
		}
		r.value = []byte(f.Value)
	case f.Regexp != "":
		re, err := regexp.Compile(f.Regexp)
		if err != nil || re.NumSubexp() < 1 {
			errs.add(bad(path+".regexp", "%q: a regular expression with one group", f.Regexp))
		}
		r.re = re
	case f.Length > 0 && f.Length <= 1024:
		if f.Kind == "" {
			errs.add(bad(path+".kind", "a field at an offset needs the kind of message it is in"))
		}
	default:
		errs.add(bad(path+".length", "%d: give a length from 1 to 1024 with an offset, a regexp, or a value", f.Length))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// compileIdentity compiles identity, every mistake at once.
func (s *Spec) compileIdentity(p *Profile) error {
	id := s.Identity
	var errs specErrors
	var err error
	if id.User != nil {
		p.identity.user, err = p.compileField("identity.user", id.User, false)
		errs.add(err)
	}
	if id.Room != nil {
		p.identity.room, err = p.compileField("identity.room", id.Room, false)
		errs.add(err)
	}
	if id.Peers != nil {
		p.identity.peers, err = p.compileField("identity.peers", id.Peers, false)
		errs.add(err)
		if err == nil && p.identity.peers.value != nil {
			errs.add(bad("identity.peers", "peers are found in the messages: give a regexp, or kind with offset and length"))
		}
	}
	errs.add(p.compileServerIDs(id))
	if id.Format != "" {
		if !idVerb.MatchString(id.Format) {
			errs.add(bad("identity.format", "%q: exactly one %%d (or a padded one up to %%099d) and no other verb", id.Format))
		}
	}
	p.identity.format = id.Format
	switch id.LengthBefore {
	case 0, 1, 2, 4:
	default:
		errs.add(bad("identity.length_before", "%d: 0, 1, 2 or 4", id.LengthBefore))
	}
	p.identity.lengthBefore = id.LengthBefore
	enc, ok := parsePayloadEncoding(id.Encoding)
	switch {
	case !ok:
		errs.add(oneOf("identity.encoding", id.Encoding, "json", "msgpack", "protobuf"))
	case enc != encodingBytes && id.LengthBefore > 0:
		errs.add(bad("identity.encoding", "give encoding or length_before, not both"))
	}
	p.identity.encoding = enc
	switch id.Endian {
	case "", "big":
	case "little":
		p.identity.little = true
	default:
		errs.add(oneOf("identity.endian", id.Endian, "big", "little"))
	}
	return errs.err()
}

// idVerb is identity.format: one %d, padded to at most 99 digits (a
// wider pad allocates its width per id, and fmt writes a width past its
// limit as %!(NOVERB)), and no other verb; as the fleet's
// --user-id-format.
var idVerb = regexp.MustCompile(`^[^%]*%(0?[1-9][0-9]?)?d[^%]*$`)

// compileServerIDs compiles identity.server_id and identity.server_peers
// (after the correlations, which server_id names).
func (p *Profile) compileServerIDs(id IdentitySpec) error {
	var errs specErrors
	if id.ServerID != "" {
		for i, c := range p.corrs {
			if c.name == id.ServerID {
				p.identity.serverID = i + 1
			}
		}
		if p.identity.serverID == 0 {
			errs.add(bad("identity.server_id", "%q is not a correlation's name: the client's server id is a value the server hands out (correlation)%s", id.ServerID, p.corrHint(id.ServerID)))
		}
	}
	if id.ServerPeers == nil {
		return errs.err()
	}
	if id.ServerID == "" {
		errs.add(bad("identity.server_peers", "peers' server ids need identity.server_id: the correlation each client's own arrives in"))
	}
	f, err := p.compileField("identity.server_peers", id.ServerPeers, false)
	switch {
	case err != nil:
		errs.add(err)
	case f.value != nil:
		errs.add(bad("identity.server_peers", "peers are found in the messages: give a regexp, or kind with offset and length"))
	}
	if len(errs) > 0 {
		return errs
	}
	p.identity.serverPeers = f
	return nil
}

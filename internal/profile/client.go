package profile

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// NewClient implements Player.
func (s *Script) NewClient(id Identity) (Client, error) {
	c := &client{s: s, vals: make([]atomic.Pointer[[]byte], len(s.corrs)), index: id.Index, clients: id.Clients,
		fresh: make([]atomic.Int64, len(s.p.fresh)), serverIDs: id.ServerIDs, peerIdx: id.PeerIndexes}
	subs, err := s.subs(id)
	if err != nil {
		return nil, err
	}
	c.user, c.room = s.user, s.room
	for _, sb := range subs {
		switch {
		case bytes.Equal(sb.old, s.user):
			c.user = sb.new
		case bytes.Equal(sb.old, s.room):
			c.room = sb.new
		}
	}
	if c.user == nil {
		c.user = []byte(id.User)
	}
	if c.room == nil {
		c.room = []byte(id.Room)
	}
	c.own = make([][]byte, 0, s.templates)
	for i := range s.msgs {
		if st := &s.msgs[i]; st.template {
			c.own = append(c.own, s.rewrite(st.bytes, subs))
		}
	}
	if s.upgrade != nil {
		c.upgrade = replaceAll(s.upgrade, subs)
	}
	return c, nil
}

// subs are the replacements for one client: its user id and room.
func (s *Script) subs(id Identity) ([]sub, error) {
	var out []sub
	if s.user != nil {
		u, err := s.idFor(s.user, id)
		if err != nil {
			return nil, err
		}
		out = append(out, sub{s.user, u})
	}
	if s.room != nil && id.Room != "" && id.Room != string(s.room) {
		if s.p.hooks == nil && s.p.identity.lengthBefore == 0 && s.p.identity.encoding == encodingBytes && len(id.Room) != len(s.room) && !s.framedLength() {
			return nil, fmt.Errorf("profile %s: room %q is %d bytes, the recorded %q %d: without length fix-ups (identity.length_before or encoding) the length must stay", s.p.Name, id.Room, len(id.Room), s.room, len(s.room))
		}
		out = append(out, sub{s.room, []byte(id.Room)})
	}
	for k, o := range s.others {
		if k >= len(id.Peers) {
			break
		}
		pid := Identity{Index: k, Clients: id.Clients, User: id.Peers[k]}
		if k < len(id.PeerIndexes) {
			pid.Index = id.PeerIndexes[k]
		}
		v, err := s.idFor(o, pid) // derived from the peer's own recorded id
		if err != nil {
			return nil, err
		}
		out = append(out, sub{o, v})
	}
	return out, nil
}

// framedLength reports whether the profile's only length is its framing's
// (a text protocol in one-line messages): changing a value's length then
// needs no other fix-up.
func (s *Script) framedLength() bool {
	switch s.p.framer.(type) {
	case Delimiter, Counted, Whole:
		return true
	}
	return false
}

// idFor is the id of the client id names, recorded as rec: the
// profile's format, the fleet's id when the protocol fixes lengths up,
// else rec with its tail replaced by the client's index (same length).
func (s *Script) idFor(rec []byte, id Identity) ([]byte, error) {
	switch {
	case s.p.identity.format != "":
		return []byte(fmt.Sprintf(s.p.identity.format, id.Index)), nil
	case s.p.hooks != nil || s.p.identity.lengthBefore > 0 || s.p.identity.encoding != encodingBytes || s.framedLength() || len(id.User) == len(rec):
		return []byte(id.User), nil
	}
	return SameLength(rec, id.Index, id.Clients)
}

// SameLength is recorded with its tail replaced by index, zero padded to
// the digits of clients-1, so the id keeps its length.
func SameLength(recorded []byte, index, clients int) ([]byte, error) {
	w := len(strconv.Itoa(max(clients-1, index, 1)))
	if w > len(recorded) {
		return nil, fmt.Errorf("recorded id %q is too short for %d clients: give identity.format with length fix-ups", recorded, clients)
	}
	out := append([]byte(nil), recorded[:len(recorded)-w]...)
	return fmt.Appendf(out, "%0*d", w, index), nil
}

// rewrite replaces the values in m, fixing lengths up.
func (s *Script) rewrite(m []byte, subs []sub) []byte {
	if s.p.hooks != nil {
		return s.p.hooks.rewrite(m, subs)
	}
	return s.p.replaceFix(m, subs)
}

// replaceAll replaces every occurrence of the subs' old values, longest
// first so a value inside another is not rewritten twice.
func replaceAll(m []byte, subs []sub) []byte {
	pairs := make([]string, 0, 2*len(subs))
	for _, sb := range sortedSubs(subs) {
		pairs = append(pairs, string(sb.old), string(sb.new))
	}
	if len(pairs) == 0 {
		return append([]byte(nil), m...)
	}
	return []byte(strings.NewReplacer(pairs...).Replace(string(m)))
}

func sortedSubs(subs []sub) []sub {
	out := append([]sub(nil), subs...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j].old) > len(out[j-1].old); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// replaceFix replaces values and fixes the lengths up: the length field
// right before each value (identity.length_before) and the framing's.
func (p *Profile) replaceFix(m []byte, subs []sub) []byte {
	if p.identity.encoding != encodingBytes {
		if out, ok := p.identity.encoding.replace(m, subs); ok {
			return p.fixFraming(out)
		}
	}
	out := append([]byte(nil), m...)
	for _, sb := range sortedSubs(subs) {
		if len(sb.old) == 0 {
			continue
		}
		var b []byte
		rest := out
		for {
			i := bytes.Index(rest, sb.old)
			if i < 0 {
				b = append(b, rest...)
				break
			}
			b = append(b, rest[:i]...)
			if lb := p.identity.lengthBefore; lb > 0 && len(sb.new) != len(sb.old) && len(b) >= lb {
				f := b[len(b)-lb:]
				v, _ := readUint(f, p.identity.little)
				putUint(f, v+uint64(len(sb.new))-uint64(len(sb.old)), p.identity.little)
			}
			b = append(b, sb.new...)
			rest = rest[i+len(sb.old):]
		}
		out = b
	}
	return p.fixFraming(out)
}

// fixFraming rewrites the framing's length field for m's length.
func (p *Profile) fixFraming(m []byte) []byte {
	switch f := p.framer.(type) {
	case LengthField:
		end := f.Offset + f.Size
		if len(m) < end {
			return m
		}
		v := len(m) - f.Adjust
		if !f.CountsWhole {
			v -= end
		}
		putUint(m[f.Offset:end], uint64(max(v, 0)), f.LittleEnd)
	case Varint:
		_, n, err := ReadVarint(m[min(f.Offset, len(m)):])
		if err != nil || n == 0 {
			return m
		}
		body := m[f.Offset+n:]
		out := append([]byte(nil), m[:f.Offset]...)
		out = AppendVarint(out, len(body))
		return append(out, body...)
	case Counted:
		return f.fix(m)
	}
	return m
}

// client is one client of a Script.
type client struct {
	s *Script
	// Owned by the reader, and with s the line a read touches first
	// (HotLines).
	rest     []byte
	okSeen   bool
	loggedIn bool
	stage    int // the login step awaited

	own     [][]byte
	upgrade []byte
	// vals are the correlated values the server handed this client,
	// written by the reader, read by the sender.
	vals []atomic.Pointer[[]byte]
	// user, room and index are the client's own values, for templates.
	user, room     []byte
	index, clients int
	// fresh are the fresh fields' counters (the sender's, and the
	// reader's while it sends the later login steps).
	fresh []atomic.Int64
	// serverIDs are the fleet's server-issued ids; peerIdx the fleet
	// indexes of the mates standing in for the recorded peers.
	serverIDs *ServerIDs
	peerIdx   []int
	// unanswered is 1 + the index of the expect whose server message
	// waits for its answer, 0 for none (set by the reader, cleared by
	// whoever sends the answer).
	unanswered atomic.Int32
	// instance is the room instance the server put the client in
	// (rooms.assigned_by: server), written once by the reader.
	instance atomic.Pointer[string]

	caps [][]byte // a reaction's captures (scratch: the reader's)
}

// HotLines implements HotLines: the first line, the script and the
// reader's state (the rest are the sender's, or a reaction's).
func (c *client) HotLines(dst []uintptr) []uintptr {
	return append(dst, uintptr(unsafe.Pointer(c)))
}

// UpgradeRequest implements Client.
func (c *client) UpgradeRequest() []byte {
	req := c.upgrade
	if len(c.s.p.http) > 0 || c.s.p.turnTakes {
		req = c.withTaken(req)
	}
	if len(c.s.p.upgradeQuery) > 0 {
		req = c.withQuery(req)
	}
	return req
}

// AppendStep implements Client.
func (c *client) AppendStep(dst []byte, i int, now int64) ([]byte, int) {
	st := &c.s.msgs[i]
	b := st.bytes
	if st.template {
		b = c.own[st.tmpl]
	}
	start := len(dst)
	dst = append(dst, b...)
	for _, k := range st.corr {
		v := c.vals[k].Load()
		if v == nil {
			continue
		}
		dst = c.substitute(dst, start, c.s.corrs[k], *v)
	}
	if len(st.peers) > 0 {
		dst = c.putServerPeers(dst, start, st.peers)
	}
	for _, k := range st.fresh {
		dst = c.freshen(dst, start, k)
	}
	if st.stamp >= 0 {
		c.s.p.writeStamp(dst[start:], now)
	}
	if len(c.s.p.expects) > 0 {
		c.answered(st.kind)
	}
	return dst, st.kind
}

// substitute puts the server's value where the recorded one was in the
// message at dst[start:]: in place when the lengths match, else through
// the rewrite with its fix-ups.
func (c *client) substitute(dst []byte, start int, old, v []byte) []byte {
	m := dst[start:]
	if len(v) == len(old) {
		for off := 0; ; {
			i := bytes.Index(m[off:], old)
			if i < 0 {
				return dst
			}
			copy(m[off+i:], v)
			off += i + len(v)
		}
	}
	out := c.s.rewrite(m, []sub{{old, v}})
	return append(dst[:start], out...)
}

// AppendHeartbeat implements Client.
func (c *client) AppendHeartbeat(dst []byte, now int64) []byte {
	if len(c.s.p.expects) > 0 && len(c.s.p.heartbeat) > 0 {
		c.answered(c.s.p.HeartbeatKind())
	}
	return append(dst, c.s.p.heartbeat...)
}

// AppendLeave implements Client.
func (c *client) AppendLeave(dst []byte) []byte {
	if c.s.leave.Bytes != nil {
		dst, _ = c.AppendStep(dst, len(c.s.msgs)-1, 0)
		return dst
	}
	return append(dst, c.s.p.leave...)
}

// Feed implements Client.
func (c *client) Feed(b []byte, now int64, ev *Events) error {
	if c.s.p.unit() {
		return c.feedUnit(b, now, ev)
	}
	data := b
	if len(c.rest) > 0 {
		c.rest = append(c.rest, b...)
		data = c.rest
	}
	off := 0
	for off < len(data) {
		n, err := c.s.p.framer.Next(data[off:])
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		c.handle(data[off:off+n], now, ev)
		off += n
	}
	switch {
	case off == len(data):
		c.rest = c.rest[:0]
	case len(c.rest) > 0:
		c.rest = c.rest[:copy(c.rest, data[off:])]
	default:
		c.rest = append(c.rest, data[off:]...)
	}
	return nil
}

// feedUnit takes one whole WebSocket message or datagram: the messages in
// it end with it.
func (c *client) feedUnit(b []byte, now int64, ev *Events) error {
	for len(b) > 0 {
		n, err := c.s.p.framer.Next(b)
		if err != nil {
			return err
		}
		if n == 0 {
			last, err := endUnit(c.s.p.framer, b)
			if err != nil {
				return err
			}
			c.handle(last, now, ev)
			return nil
		}
		c.handle(b[:n], now, ev)
		b = b[n:]
	}
	return nil
}

// maxStampAge bounds a plausible latency: a stamp further off is payload
// that happens to sit where stamps go.
const maxStampAge = int64(time.Hour)

func (c *client) handle(m []byte, now int64, ev *Events) {
	p := c.s.p
	ev.Frames++
	k := p.ServerKind(m)
	for i := range p.corrs {
		if p.corrs[i].http > 0 {
			continue
		}
		if v := p.corrs[i].from.take(m, k); len(v) > 0 {
			if cur := c.vals[i].Load(); cur == nil || !bytes.Equal(*cur, v) {
				cp := append([]byte(nil), v...)
				c.vals[i].Store(&cp)
				c.publishServerID(i, cp)
			}
		}
	}
	if p.rooms != nil {
		c.learnInstance(m, k)
	}
	if reason := p.refusal(m, k); reason != "" {
		if !c.loggedIn {
			ev.Failed = reason
		} else {
			ev.Error = reason
		}
		return
	}
	if len(p.expects) > 0 {
		c.expectArrived(k)
	}
	c.react(m, k, ev)
	if !c.loggedIn {
		c.loginAnswer(m, k, now, ev)
		if c.okSeen && c.awaitedArrived() {
			c.loggedIn, ev.LoggedIn = true, true
		}
	}
	if p.delivery[k] && k >= 0 {
		ev.Messages++
		if p.fanout.Known() {
			ev.Casts++
		}
		if r := p.stamp; r != nil && r.delivery == k {
			if at, ok := p.readStamp(m); ok {
				if age := now - at; age >= 0 && age < maxStampAge {
					ev.latency(age / 1000)
				}
			}
		}
	}
}

func (c *client) awaitedArrived() bool {
	if c.s.p.rooms != nil && !c.hasInstance() {
		return false
	}
	for i := range c.s.p.corrs {
		if c.s.p.corrs[i].wait && c.s.corrs[i] != nil && c.vals[i].Load() == nil {
			return false
		}
	}
	return true
}

// accepts reports whether server message m (of kind k) accepts a login.
func (p *Profile) accepts(m []byte, k int) bool {
	switch {
	case p.success >= 0:
		return k == p.success && (p.successWhen == nil || p.successWhen.match(m))
	case p.hooks != nil:
		return p.hooks.success(m)
	}
	return true // the first answer that is no refusal
}

// refusal names the refusal m is, "" when it is none.
func (p *Profile) refusal(m []byte, k int) string {
	if p.failure >= 0 && k == p.failure {
		return p.reasonOf(m)
	}
	if p.success >= 0 && k == p.success && p.successWhen != nil && !p.successWhen.match(m) {
		return p.reasonOf(m)
	}
	if p.hooks != nil {
		return p.hooks.failure(m)
	}
	return ""
}

// reasonOf reads a refusal's reason, a bounded label.
func (p *Profile) reasonOf(m []byte) string {
	r := p.reason
	if r == nil {
		return "refused"
	}
	if r.re != nil {
		g := r.re.FindSubmatch(m)
		if len(g) < 2 {
			return "refused"
		}
		return p.labels.bound(Label(string(g[1])))
	}
	if r.offset+r.size > len(m) {
		return "refused"
	}
	v, _ := readUint(m[r.offset:r.offset+r.size], false)
	if name, ok := r.names[int(v)]; ok {
		return name
	}
	return p.labels.bound("code_" + strconv.FormatUint(v, 10))
}

// Label turns free text into a reason label: lower case letters, digits
// and _, at most 32.
func Label(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && r != '_':
			b.WriteByte('_')
		}
		if b.Len() >= 32 {
			break
		}
	}
	out := strings.Trim(b.String(), "_")
	if out == "" {
		return "refused"
	}
	return out
}

// labelSet bounds the distinct reasons read from the wire.
type labelSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

// maxLabels bounds the reasons a profile can name from free text.
const maxLabels = 32

func (l *labelSet) bound(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[s] {
		return s
	}
	if len(l.seen) >= maxLabels {
		return "other"
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[s] = true
	return s
}

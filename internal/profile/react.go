package profile

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
)

// Reactions are a protocol's answers: "when the server sends a message of
// kind K (matching a condition), send T", T a template filled in from
// that message and the client. Every client answers, sender or
// receive-only, during the login and after it; the fleet sends the
// answers it gets back from Feed (Events.Reply) and counts them by kind.

// reaction is a compiled ReactionSpec.
type reaction struct {
	on   int // server kind
	when *matcher
	caps []fieldRule
	send *template
	as   int // client kind it counts under, -1: the kind it matches
}

// maxReactions bounds a profile's reactions.
const maxReactions = 32

// extraKinds adds the kinds named only by a reaction's or a login
// template's "as" to the sent kinds, after the declared ones; a name
// that is no kind name is named, every one, and not added.
func (s *Spec) extraKinds(p *Profile) error {
	var errs specErrors
	add := func(path, name string) {
		if name == "" || p.clientKind(name) >= 0 {
			return
		}
		if !validName.MatchString(name) {
			errs.add(bad(path, "%q: a kind name is lower case letters, digits and _ (up to 32)", name))
			return
		}
		p.Kinds = append(p.Kinds, name)
	}
	for i, r := range s.Reactions {
		add(fmt.Sprintf("reactions[%d].as", i), r.As)
	}
	for i, st := range s.Login.Steps {
		for j, it := range st.Send {
			add(fmt.Sprintf("login.steps[%d].send[%d].as", i, j), it.As)
		}
	}
	return errs.err()
}

// compileReactions compiles the reactions, every mistake at once.
func (s *Spec) compileReactions(p *Profile) error {
	var errs specErrors
	if len(s.Reactions) > maxReactions {
		errs.add(bad("reactions", "%d reactions: at most %d", len(s.Reactions), maxReactions))
	}
	p.reactOn = make([][]int, len(p.server))
	p.reactAs = map[int]bool{}
	for i, rs := range s.Reactions {
		r, err := p.compileReaction(fmt.Sprintf("reactions[%d]", i), rs)
		if err != nil {
			errs.add(err)
			continue
		}
		p.reactOn[r.on] = append(p.reactOn[r.on], len(p.reacts))
		p.reacts = append(p.reacts, r)
	}
	return errs.err()
}

// compileReaction compiles one reaction at path, every mistake at once.
func (p *Profile) compileReaction(path string, rs ReactionSpec) (reaction, error) {
	var errs specErrors
	r := reaction{on: p.serverKind(rs.On), as: -1}
	if r.on < 0 {
		errs.add(bad(path+".on", "%q is not a server kind%s", rs.On, p.kindHint(rs.On, true)))
	}
	whenOK := true
	if rs.When != nil {
		m, err := compileMatch(path+".when", *rs.When)
		errs.add(err)
		r.when, whenOK = m, err == nil
	}
	names := make([]string, 0, len(rs.Capture))
	for n := range rs.Capture {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cp := fmt.Sprintf("%s.capture.%s", path, n)
		if !validName.MatchString(n) || reservedValue(n) {
			errs.add(bad(cp, "%q: a capture name is lower case letters, digits and _, and not user, room or index", n))
		}
		f, err := p.compileCapture(cp, rs.Capture[n])
		if err != nil {
			errs.add(err)
			f = &fieldRule{kind: -1}
		}
		r.caps = append(r.caps, *f)
	}
	resolve := func(name string) (valueSrc, int, error) {
		if n, err := strconv.Atoi(name); err == nil {
			if r.when == nil || r.when.re == nil || n < 0 || n > r.when.re.NumSubexp() {
				return 0, 0, fmt.Errorf("no group %d in when.regexp", n)
			}
			return srcGroup, n, nil
		}
		if r.when != nil && r.when.re != nil {
			if g := r.when.re.SubexpIndex(name); g > 0 {
				return srcGroup, g, nil
			}
		}
		for j, n := range names {
			if n == name {
				return srcCapture, j, nil
			}
		}
		return p.clientResolver(name)
	}
	// A send naming a group of a when that failed follows from that
	// mistake: it waits.
	if whenOK {
		t, err := parseTemplate(rs.Send, resolve)
		if err != nil {
			errs.add(bad(path+".send", "%v", err))
		}
		r.send = t
	}
	if rs.As != "" {
		r.as = p.clientKind(rs.As) // added by extraKinds
		if r.as >= 0 && !p.declaredClient(rs.As) {
			p.reactAs[r.as] = true
		}
	}
	if len(errs) > 0 {
		return r, errs
	}
	return r, nil
}

func reservedValue(n string) bool { return n == "user" || n == "room" || n == "index" }

// declaredClient reports whether name is one of the spec's client kinds.
func (p *Profile) declaredClient(name string) bool {
	for _, k := range p.client {
		if k.name == name {
			return true
		}
	}
	return false
}

// compileCapture compiles a value a reaction takes from the message it
// answers: at an offset (after skips) with a length, or a regexp's
// first group.
func (p *Profile) compileCapture(path string, f FieldSpec) (*fieldRule, error) {
	var errs specErrors
	if f.Kind != "" || f.Value != "" {
		errs.add(bad(path, "a capture is taken from the message answered: give offset and length, or a regexp"))
		if f.Regexp == "" && f.Length == 0 && len(f.Skip) == 0 {
			return nil, errs // nothing else given to check
		}
	}
	r := &fieldRule{kind: -1, offset: f.Offset, length: f.Length}
	var err error
	r.skip, err = compileSkips(path, f.Skip)
	errs.add(err)
	switch {
	case f.Regexp != "":
		if f.Length != 0 || len(f.Skip) > 0 {
			errs.add(bad(path, "give offset and length, or a regexp, not both"))
		}
		re, err := regexp.Compile(f.Regexp)
		if err != nil || re.NumSubexp() < 1 {
			errs.add(bad(path+".regexp", "%q: a regular expression with one group", f.Regexp))
		}
		r.re = re
	case f.Length < 1 || f.Length > 1024:
		errs.add(bad(path+".length", "%d: give a length from 1 to 1024 with an offset, or a regexp", f.Length))
	case len(f.Skip) > 0 && f.Offset < 0:
		errs.add(bad(path+".offset", "%d: an offset with skips counts from the start", f.Offset))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// react appends the answers to server message m of kind k.
func (c *client) react(m []byte, k int, ev *Events) {
	p := c.s.p
	if k < 0 || k >= len(p.reactOn) {
		return
	}
	for _, ri := range p.reactOn[k] {
		r := &p.reacts[ri]
		v := tvalues{msg: m, c: c}
		switch {
		case r.when == nil:
		case r.when.re != nil:
			if v.groups = r.when.re.FindSubmatchIndex(m); v.groups == nil {
				continue
			}
		case !r.when.match(m):
			continue
		}
		if len(r.caps) > 0 {
			v.caps = c.caps[:0]
			ok := true
			for i := range r.caps {
				b := r.caps[i].take(m, -1)
				if b == nil {
					ok = false
					break
				}
				v.caps = append(v.caps, b)
			}
			c.caps = v.caps[:0]
			if !ok {
				continue
			}
		}
		start := len(ev.Reply)
		ev.Reply = r.send.render(ev.Reply, &v)
		kind := r.as
		if kind < 0 {
			kind = p.ClientKind(ev.Reply[start:])
		}
		c.answered(kind)
		ev.Replies = append(ev.Replies, Reply{End: len(ev.Reply), Kind: kind})
	}
}

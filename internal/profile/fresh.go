package profile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
)

// Fresh ids: a field declared fresh (a per-connection request id, a
// message id the server must not have seen) is rewritten at every send
// with the client's next value, so a loop never repeats one.

// freshRule is a compiled FreshSpec.
type freshRule struct {
	into   map[int]bool // nil: all kinds
	re     *regexp.Regexp
	offset int
	length int
	unique bool
}

// maxFresh bounds a profile's fresh fields.
const maxFresh = 8

func (s *Spec) compileFresh(p *Profile) error {
	var errs specErrors
	if len(s.Fresh) > maxFresh {
		errs.add(bad("fresh", "%d fresh fields: at most %d", len(s.Fresh), maxFresh))
	}
	for i, f := range s.Fresh {
		r, err := p.compileFreshField(fmt.Sprintf("fresh[%d]", i), f)
		errs.add(err)
		if err == nil {
			p.fresh = append(p.fresh, r)
		}
	}
	return errs.err()
}

// compileFreshField compiles one fresh field, every mistake at once.
func (p *Profile) compileFreshField(path string, f FreshSpec) (freshRule, error) {
	var errs specErrors
	r := freshRule{offset: f.Offset, length: f.Length}
	into, err := p.kindList(path+".into", f.Into, false)
	errs.add(err)
	if len(into) > 0 {
		r.into = into
	}
	switch f.Value {
	case "", "counter":
	case "unique":
		r.unique = true
	default:
		errs.add(oneOf(path+".value", f.Value, "counter", "unique"))
	}
	switch {
	case f.Regexp != "":
		if f.Length != 0 {
			errs.add(bad(path, "give a regexp, or offset and length, not both"))
		}
		re, err := regexp.Compile(f.Regexp)
		switch {
		case err != nil || re.NumSubexp() < 1:
			errs.add(bad(path+".regexp", "%q: a regular expression with one group", f.Regexp))
		case groupMatchesEmpty(f.Regexp):
			errs.add(bad(path+".regexp", "%q: its group matches the empty string: a fresh value needs at least one digit to replace (say [0-9]+, not [0-9]*)", f.Regexp))
		}
		r.re = re
	case f.Length < 1 || f.Length > 20:
		errs.add(bad(path+".length", "%d: give a length from 1 to 20 with an offset, or a regexp", f.Length))
	}
	if len(errs) > 0 {
		return r, errs
	}
	return r, nil
}

// groupMatchesEmpty reports whether the first group of the regular
// expression expr (which compiles) can match the empty string.
func groupMatchesEmpty(expr string) bool {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return false
	}
	var group *syntax.Regexp
	var find func(r *syntax.Regexp)
	find = func(r *syntax.Regexp) {
		if group != nil {
			return
		}
		if r.Op == syntax.OpCapture {
			group = r
			return
		}
		for _, sub := range r.Sub {
			find(sub)
		}
	}
	find(re)
	if group == nil || len(group.Sub) == 0 {
		return false
	}
	whole, err := regexp.Compile(`^(?:` + group.Sub[0].String() + `)$`)
	return err == nil && whole.MatchString("")
}

// place is where the field is in m, false when m does not hold it.
func (r *freshRule) place(m []byte) (int, int, bool) {
	if r.re != nil {
		loc := r.re.FindSubmatchIndex(m)
		if loc == nil || loc[2] < 0 {
			return 0, 0, false
		}
		return loc[2], loc[3], true
	}
	off := r.offset
	if off < 0 {
		off += len(m)
	}
	if off < 0 || off+r.length > len(m) {
		return 0, 0, false
	}
	return off, off + r.length, true
}

// applies reports whether the rule rewrites recorded message m of kind k.
func (r *freshRule) applies(m []byte, k int) bool {
	if r.into != nil && !r.into[k] {
		return false
	}
	_, _, ok := r.place(m)
	return ok
}

// freshen writes the next value of fresh field i into the message at
// dst[start:], returning dst (longer or shorter when a decimal value's
// width changed, with the framing's length fixed up).
func (c *client) freshen(dst []byte, start, i int) []byte {
	r := &c.s.p.fresh[i]
	m := dst[start:]
	a, b, ok := r.place(m)
	if !ok {
		return dst
	}
	v := c.fresh[i].Add(1)
	if r.unique {
		v = v*int64(max(c.clients, 1)) + int64(c.index)
	}
	if r.re == nil {
		f := m[a:b]
		if !allDigits(f) {
			putUintN(f, uint64(v))
			return dst
		}
		// Zero-padded to the recorded width, the lowest digits kept.
		d := strconv.AppendInt(make([]byte, 0, 20), v, 10)
		for j := range f {
			f[j] = '0'
		}
		copy(f[max(0, len(f)-len(d)):], d[max(0, len(d)-len(f)):])
		return dst
	}
	var buf [20]byte
	d := strconv.AppendInt(buf[:0], v, 10)
	if len(d) == b-a {
		copy(m[a:], d)
		return dst
	}
	out := make([]byte, 0, len(m)+len(d))
	out = append(append(append(out, m[:a]...), d...), m[b:]...)
	return append(dst[:start], c.s.p.fixFraming(out)...)
}

func allDigits(b []byte) bool {
	return len(b) > 0 && bytes.IndexFunc(b, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// putUintN writes v big-endian into f (its low bytes when f is longer
// than 8).
func putUintN(f []byte, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	for j := range f {
		f[j] = 0
	}
	n := min(len(f), 8)
	copy(f[len(f)-n:], b[8-n:])
}

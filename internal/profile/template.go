package profile

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// A template is a message a client composes itself (a reaction's answer,
// a login step's message): literal bytes with ${name} values filled in
// when it is sent. Names are a regexp group of the message answered
// (${1}, or a named group), a capture of the reaction, the client's
// ${user}, ${room} and ${index}, or a correlation's name. $${ writes a
// literal "${"; any other $ is itself.

// valueSrc is where a template value comes from.
type valueSrc uint8

const (
	srcGroup   valueSrc = iota // a regexp group of the answered message
	srcCapture                 // a reaction's capture
	srcUser
	srcRoom
	srcIndex
	srcCorr   // a correlation's current value
	srcRandom // 16 fresh hex digits
)

// tpart is a literal (ref false) or a value.
type tpart struct {
	lit []byte
	ref bool
	src valueSrc
	n   int
}

// template is a compiled TemplateSpec.
type template struct {
	parts []tpart
	// fixed is the whole message when it has no values.
	fixed []byte
}

// maxTemplateParts bounds a template's values and literals.
const maxTemplateParts = 64

// resolver names a template value: its source and index.
type resolver func(name string) (valueSrc, int, error)

// parseTemplate compiles t; resolve names its values.
func parseTemplate(t TemplateSpec, resolve resolver) (*template, error) {
	if t.Text != "" && t.Hex != "" {
		return nil, errors.New("give text or hex, not both")
	}
	src, isHex := t.Text, false
	if t.Hex != "" {
		src, isHex = t.Hex, true
	}
	if src == "" {
		return nil, errors.New("empty: give text or hex")
	}
	out := &template{}
	var lit []byte
	flush := func() error {
		if len(lit) == 0 {
			return nil
		}
		b := lit
		if isHex {
			var err error
			if b, err = hex.DecodeString(strings.Join(strings.Fields(string(lit)), "")); err != nil {
				return fmt.Errorf("hex %q: %s", lit, hexWords(err))
			}
		}
		out.parts = append(out.parts, tpart{lit: append([]byte(nil), b...)})
		lit = lit[:0]
		return nil
	}
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "$${"):
			lit = append(lit, "${"...)
			i += 3
		case strings.HasPrefix(src[i:], "${"):
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: ${ without }", src[i:min(len(src), i+16)])
			}
			name := src[i+2 : i+end]
			s, n, err := resolve(name)
			if err != nil {
				return nil, fmt.Errorf("${%s}: %v", name, err)
			}
			if err := flush(); err != nil {
				return nil, err
			}
			out.parts = append(out.parts, tpart{ref: true, src: s, n: n})
			i += end + 1
		default:
			lit = append(lit, src[i])
			i++
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out.parts) > maxTemplateParts {
		return nil, fmt.Errorf("%d values and literals: at most %d", len(out.parts), maxTemplateParts)
	}
	if len(out.parts) == 1 && !out.parts[0].ref {
		out.fixed = out.parts[0].lit
	}
	return out, nil
}

// clientResolver names the values every template may use: the client's
// own and the correlations.
func (p *Profile) clientResolver(name string) (valueSrc, int, error) {
	switch name {
	case "user":
		return srcUser, 0, nil
	case "room":
		return srcRoom, 0, nil
	case "index":
		return srcIndex, 0, nil
	case "random":
		return srcRandom, 0, nil
	}
	names := []string{"user", "room", "index", "random"}
	for i, c := range p.corrs {
		if c.name == name {
			return srcCorr, i, nil
		}
		names = append(names, c.name)
	}
	msg := "not user, room, index, random or a correlation's name"
	if s := suggest(name, names); s != "" {
		msg += " (did you mean " + s + "?)"
	}
	return 0, 0, errors.New(msg)
}

// tvalues are the values a template is rendered with.
type tvalues struct {
	msg    []byte // the answered message
	groups []int  // its regexp groups (FindSubmatchIndex), nil for none
	caps   [][]byte
	c      *client
	// url escapes each value for where it lands in a URL: a query's
	// value after the ?, a path segment before it.
	url bool
}

// render appends the template filled in with v.
func (t *template) render(dst []byte, v *tvalues) []byte {
	if t.fixed != nil {
		return append(dst, t.fixed...)
	}
	start := len(dst)
	for i := range t.parts {
		pt := &t.parts[i]
		if !pt.ref {
			dst = append(dst, pt.lit...)
			continue
		}
		mark := len(dst)
		dst = t.value(dst, pt, v)
		if v.url {
			dst = escapeURLValue(dst, start, mark)
		}
	}
	return dst
}

// escapeURLValue escapes dst[mark:], a value rendered into the URL that
// starts at dst[start]: for a query when a ? came before it (a + or &
// in a value would change it), else for a path segment (a host:port
// stays as it is).
func escapeURLValue(dst []byte, start, mark int) []byte {
	v := string(dst[mark:])
	if bytes.IndexByte(dst[start:mark], '?') >= 0 {
		v = url.QueryEscape(v)
	} else {
		v = url.PathEscape(v)
	}
	return append(dst[:mark], v...)
}

// value appends the value of ref part pt.
func (t *template) value(dst []byte, pt *tpart, v *tvalues) []byte {
	switch pt.src {
	case srcGroup:
		if g := v.groups; 2*pt.n+1 < len(g) && g[2*pt.n] >= 0 {
			dst = append(dst, v.msg[g[2*pt.n]:g[2*pt.n+1]]...)
		}
	case srcCapture:
		if pt.n < len(v.caps) {
			dst = append(dst, v.caps[pt.n]...)
		}
	case srcUser:
		if v.c != nil {
			dst = append(dst, v.c.user...)
		}
	case srcRoom:
		if v.c != nil {
			dst = append(dst, v.c.room...)
		}
	case srcIndex:
		if v.c != nil {
			dst = strconv.AppendInt(dst, int64(v.c.index), 10)
		}
	case srcRandom:
		dst = newRandom(dst)
	case srcCorr:
		if v.c != nil {
			if cur := v.c.vals[pt.n].Load(); cur != nil {
				dst = append(dst, *cur...)
			} else if rec := v.c.s.corrs[pt.n]; rec != nil {
				dst = append(dst, rec...)
			}
		}
	}
	return dst
}

package profile

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestRegexpMatchLiteral checks that a kind's regexp which is plain
// text, anchored or not, is matched without the regexp package
// (matcher.lit), that any other regexp still goes through it, and that
// both agree with regexp.Match on every input.
func TestRegexpMatchLiteral(t *testing.T) {
	inputs := []string{
		``, `{"type":"msg","ts":"1"}`, `{"type":"joined"}`, `"type":"msg"`, `xx"type":"ms`,
		`abc`, `ABC`, `zabc`, `abcz`, "a\nabc", "abc\n", "\nabc", `a.b`, `axb`, `ab`, `a b`, `b`, `ba`,
		`42["chat","hi"]`, `421["chat"]`, `3probe`, `3probex`, `PING`, `PING\r\n`,
	}
	for _, tc := range []struct {
		re  string
		lit bool
	}{
		{`"type":"msg"`, true},
		{`abc`, true},
		{`a\.b`, true},  // an escaped dot is a literal dot
		{`(abc)`, true}, // a group around a literal matches where it does
		{`(?s)abc`, true},
		{`^abc`, true}, // anchored: a prefix
		{`abc$`, true}, // a suffix (Go's $ is the text's end, never before a final newline)
		{`^abc$`, true},
		{`^\{\}$`, true},
		{`^(abc)`, true},
		{`(^abc)$`, false}, // an anchor inside a group: left to the regexp package
		{`^42\["chat"`, true},
		{`^3probe$`, true},
		{`\Aabc\z`, true},
		{`\x{FFFD}`, false}, // matches invalid UTF-8 too
		{`héllo`, true},
		{`(?m)^abc`, false}, // a line's start, not the message's
		{`(?m)abc$`, false},
		{`^a|b`, false},
		{`^`, false},
		{`^$`, false},
		{`(?i)abc`, false}, // case-folded
		{`a.b`, false},
		{`a|b`, false},
		{`abc\b`, false},
	} {
		m, err := compileMatch("kinds.server[0].match", MatchSpec{Regexp: tc.re})
		if err != nil {
			t.Fatalf("%q: %v", tc.re, err)
		}
		if got := m.lit.text != nil; got != tc.lit {
			t.Errorf("%q: literal %v, want %v", tc.re, got, tc.lit)
		}
		re := regexp.MustCompile(tc.re)
		for _, in := range inputs {
			if got, want := m.match([]byte(in)), re.MatchString(in); got != want {
				t.Errorf("%q on %q: %v, regexp says %v", tc.re, in, got, want)
			}
		}
	}
}

// BenchmarkKindMatch is one delivery tested against a profile's server
// kinds in order: the k6 comparison's (bench/wsroom.yaml: joined, then
// msg, unanchored JSON text), and anchored ones as nats' are (PING, PONG,
// then MSG).
func BenchmarkKindMatch(b *testing.B) {
	for _, bc := range []struct {
		name  string
		kinds []string
		msg   string
	}{
		{"wsroom", []string{`"type":"joined"`, `"type":"msg"`},
			`{"type":"msg","room":"lobby","user":"alice01","seq":"000123","ts":"1795932699108398867","pad":"` +
				strings.Repeat("x", 110) + `"}`},
		{"anchored", []string{`^PING$`, `^PONG$`, `^MSG `}, "MSG room.lobby 1 24\r\n" + strings.Repeat("y", 24)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var ks []kind
			for _, re := range bc.kinds {
				m, err := compileMatch("kinds", MatchSpec{Regexp: re})
				if err != nil {
					b.Fatal(err)
				}
				ks = append(ks, kind{name: re, m: *m})
			}
			msg := []byte(bc.msg)
			b.ReportAllocs()
			for b.Loop() {
				if firstMatch(ks, msg) != len(ks)-1 {
					b.Fatal("no match")
				}
			}
		})
	}
}

// TestFinder checks finder.index against bytes.Index, the rare byte's
// misses (many, then the fallback) included.
func TestFinder(t *testing.T) {
	many := strings.Repeat("j", 300) + `"type":"joined"`
	for _, tc := range []struct{ text, s string }{
		{`"type":"joined"`, `{"type":"msg"}`},
		{`"type":"joined"`, `{"type":"joined"}`},
		{`"type":"joined"`, many},
		{`"type":"joined"`, many[:200]},
		{`"type":"msg"`, `"type":"msg"`},
		{`"type":"msg"`, `"type":"ms`},
		{`ab`, `xxab`},
		{`a`, `xxa`},
		{`abc`, ``},
		{`jj`, strings.Repeat("j", 50)},
		{`xj`, strings.Repeat("j", 500) + "xj"},
	} {
		f := newFinder([]byte(tc.text))
		if got, want := f.index([]byte(tc.s)), strings.Index(tc.s, tc.text); got != want {
			t.Errorf("%q in %.40q: %d, want %d", tc.text, tc.s, got, want)
		}
	}
}

// FuzzFinder: finder.index is bytes.Index, whatever the text and input.
func FuzzFinder(f *testing.F) {
	f.Add([]byte(`"type":"joined"`), []byte(`{"type":"msg","ts":"1"}`))
	f.Add([]byte(`jj`), []byte(`jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj`))
	f.Fuzz(func(t *testing.T, text, s []byte) {
		if len(text) == 0 {
			return
		}
		fd := newFinder(text)
		if got, want := fd.index(s), bytes.Index(s, text); got != want {
			t.Fatalf("%q in %q: %d, want %d", text, s, got, want)
		}
	})
}

// FuzzKindRegexp: a kind's regexp matches as the regexp package says,
// whether it is matched as text (literalOf) or by the package.
func FuzzKindRegexp(f *testing.F) {
	f.Add(`^42\["chat"`, []byte(`42["chat","hi"]`))
	f.Add(`"type":"msg"$`, []byte("{\"type\":\"msg\"\n"))
	f.Fuzz(func(t *testing.T, expr string, msg []byte) {
		re, err := regexp.Compile(expr)
		if err != nil || expr == "" { // "": no regexp given
			return
		}
		m, err := compileMatch("kinds", MatchSpec{Regexp: expr})
		if err != nil {
			t.Fatalf("%q compiles in regexp but not as a kind: %v", expr, err)
		}
		if got, want := m.match(msg), re.Match(msg); got != want {
			t.Fatalf("%q on %q: %v, regexp says %v (literal %v)", expr, msg, got, want, m.lit.text != nil)
		}
	})
}

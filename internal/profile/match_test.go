package profile

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestRegexpMatchLiteral checks that a kind's regexp which is a plain
// literal is matched as a substring (matcher.lit), that any other regexp
// still goes through the regexp package, and that both agree with
// regexp.Match on every input.
func TestRegexpMatchLiteral(t *testing.T) {
	inputs := []string{
		``, `{"type":"msg","ts":"1"}`, `{"type":"joined"}`, `"type":"msg"`, `xx"type":"ms`,
		`abc`, `ABC`, `zabc`, `abcz`, "a\nabc", `a.b`, `axb`, `ab`, `a b`,
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
		{`^abc`, false}, // anchored: not a substring test
		{`abc$`, false},
		{`^abc$`, false}, // regexp.LiteralPrefix calls this one whole
		{`^\{\}$`, false},
		{`\x{FFFD}`, false}, // matches invalid UTF-8 too
		{`héllo`, true},
		{`\Aabc`, false},
		{`(?m)^abc`, false},
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

// BenchmarkKindMatch is one delivery of the k6 comparison's profile
// (bench/wsroom.yaml) tested against its server kinds, joined then msg.
func BenchmarkKindMatch(b *testing.B) {
	msg := []byte(`{"type":"msg","room":"lobby","user":"alice01","seq":"000123","ts":"1795932699108398867","pad":"` +
		`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	var ks []kind
	for _, re := range []string{`"type":"joined"`, `"type":"msg"`} {
		m, err := compileMatch("kinds", MatchSpec{Regexp: re})
		if err != nil {
			b.Fatal(err)
		}
		ks = append(ks, kind{name: re, m: *m})
	}
	b.ReportAllocs()
	for b.Loop() {
		if firstMatch(ks, msg) != 1 {
			b.Fatal("no match")
		}
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

package session

import (
	"testing"
)

// FuzzParseLoop checks that any --loop text parses or errors, never panics,
// and that a parsed loop has B after A when both are of one kind.
func FuzzParseLoop(f *testing.F) {
	for _, s := range []string{"12s,48s", "#120,#900", "1m30s,#5", ",", "#-1,2s", "1h,1ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, ok, err := ParseLoop(s)
		if err != nil || !ok {
			return
		}
		if l.A.IsIndex == l.B.IsIndex && (l.B.Offset < l.A.Offset || l.B.Index < l.A.Index) {
			t.Fatalf("ParseLoop(%q) = %+v: B before A", s, l)
		}
	})
}

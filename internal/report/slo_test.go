package report

import (
	"strings"
	"testing"
	"time"
)

func TestSLOSet(t *testing.T) {
	def := DefaultSLO()
	tests := []struct {
		in   string
		want func(*SLO)
		err  string
	}{
		{"", func(*SLO) {}, ""},
		{"p99<100ms,drops=0,login_fail<1%,idle>10%", func(*SLO) {}, ""},
		{"p99<40ms", func(s *SLO) { s.P99 = 40 * time.Millisecond }, ""},
		{" p99 <= 2s , drops<5", func(s *SLO) { s.P99, s.MaxDrops = 2*time.Second, 4 }, ""},
		{"drops<=3,login_fail<=0.5%", func(s *SLO) { s.MaxDrops, s.MaxLoginFailPct = 3, 0.5 }, ""},
		{"idle>=25,fleet_idle>5%,lag<10ms", func(s *SLO) { s.MinIdlePct, s.MinFleetIdlePct, s.MaxLagP99 = 25, 5, 10*time.Millisecond }, ""},
		{"p99=off,drops=off,login_fail=off,idle=off,fleet_idle=off,lag=off", func(s *SLO) {
			s.P99, s.MaxDrops, s.MaxLoginFailPct, s.MinIdlePct, s.MinFleetIdlePct, s.MaxLagP99 = 0, -1, -1, -1, 0, 0
		}, ""},
		{"p99>100ms", nil, "upper bound"},
		{"idle<10%", nil, "lower bound"},
		{"p99<fast", nil, "duration"},
		{"drops=-1", nil, "count"},
		{"drops<0", nil, "allows nothing"},
		{"login_fail<150%", nil, "percentage"},
		{"cpu>10%", nil, "unknown objective"},
		{"p99", nil, "want KEY<VALUE"},
		{"bogus=off", nil, "unknown objective"},
	}
	for _, tt := range tests {
		s := DefaultSLO()
		err := s.Set(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Set(%q) = %v, want an error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Set(%q): %v", tt.in, err)
			continue
		}
		want := def
		tt.want(&want)
		if s != want {
			t.Errorf("Set(%q) = %+v, want %+v", tt.in, s, want)
		}
	}
}

// TestSLORoundTrip: what String writes, Set reads back to the same
// objectives, objectives turned off included.
func TestSLORoundTrip(t *testing.T) {
	for _, in := range []string{"", "p99<7ms,drops=2", "idle=off,fleet_idle=off,lag=off", "p99=off,login_fail<0.25%"} {
		a := DefaultSLO()
		if err := a.Set(in); err != nil {
			t.Fatal(err)
		}
		b := DefaultSLO()
		if err := b.Set(a.String()); err != nil {
			t.Fatalf("Set(%q): %v", a.String(), err)
		}
		// Terms turned off are left out of String: start b from nothing.
		for _, k := range sloKeys {
			if a.term(k) == "" {
				if err := b.off(k); err != nil {
					t.Fatal(err)
				}
			}
		}
		if a != b {
			t.Errorf("%q: String %q read back as %+v, want %+v", in, a.String(), b, a)
		}
	}
}

// FuzzSLOSet: Set never panics, and what it accepts survives String.
func FuzzSLOSet(f *testing.F) {
	for _, s := range []string{"p99<100ms,drops=0,login_fail<1%,idle>10%", "lag<5ms", "drops<3", "p99=off", "idle>=0.5%", ",,", "p99<<1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s := DefaultSLO()
		if err := s.Set(in); err != nil {
			return
		}
		again := DefaultSLO()
		if err := again.Set(s.String()); err != nil {
			t.Fatalf("Set(%q) accepted, its String %q is refused: %v", in, s.String(), err)
		}
	})
}

func TestReasonText(t *testing.T) {
	for r := ReasonAllHeld; r <= ReasonLoss; r++ {
		b, _ := r.MarshalText()
		var back Reason
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("%v: round trip %q -> %v, %v", r, b, back, err)
		}
	}
	if Reason(99).String() != "reason(99)" {
		t.Errorf("unknown reason: %s", Reason(99))
	}
}

// TestParseSLORoundTrip: objectives written by String read back the same
// with ParseSLO, those turned off included.
func TestParseSLORoundTrip(t *testing.T) {
	for _, text := range []string{"", "idle=off", "p99=off,drops=off", "fleet_idle=off,lag=off,login_fail=off", "p99<250ms,idle>5%"} {
		s := DefaultSLO()
		if err := s.Set(text); err != nil {
			t.Fatal(err)
		}
		back, err := ParseSLO(s.String())
		if err != nil || back != s {
			t.Errorf("%q: String %q read back as %+v (%v), want %+v", text, s.String(), back, err, s)
		}
	}
}

package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Reason is why a scenario or a capacity search stopped where it did: the
// headline's "held N users (reason)". Its String is the words of the
// headline and the value in summary.json.
type Reason int

// Reasons, in the order a capacity search checks them at one level.
const (
	ReasonAllHeld       Reason = iota // every requested client held
	ReasonPlateau                     // logged-in flat while attempts went on
	ReasonDisconnects                 // logged-in clients lost (slow consumer or other)
	ReasonLoginFailures               // logins refused or timed out
	ReasonLatency                     // delivery latency over the objective
	ReasonCPUIdle                     // relay host CPU idle under the objective
	ReasonSaturated                   // the load generator could not keep up
	// ReasonLoss is deliveries owed that never arrived: judged only by a
	// run without a series (replay, replay merge; TotalsCard).
	ReasonLoss
)

var reasonNames = [...]string{"all requested held", "plateau", "disconnects", "login failures", "latency", "relay CPU idle", "load generator saturated", "deliveries lost"}

func (r Reason) String() string {
	if r < 0 || int(r) >= len(reasonNames) {
		return "reason(" + strconv.Itoa(int(r)) + ")"
	}
	return reasonNames[r]
}

// MarshalText writes the reason's words (summary.json).
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads them back.
func (r *Reason) UnmarshalText(b []byte) error {
	for i, n := range reasonNames {
		if n == string(b) {
			*r = Reason(i)
			return nil
		}
	}
	return fmt.Errorf("unknown reason %q", b)
}

// SLO is the service-level objectives a capacity search holds every level
// to. A zero limit of a duration or a negative percentage means the
// objective is off. It is a pflag.Value: Set parses `--slo` when given.
type SLO struct {
	// P99 bounds the delivery latency p99 over a level's hold.
	P99 time.Duration
	// MaxDrops is the most logged-in clients a level may lose (slow
	// consumer or any other disconnect); negative: off.
	MaxDrops int
	// MaxLoginFailPct bounds the level's failed logins, % of its attempts
	// (logins still pending at the end of the hold count as failed);
	// negative: off.
	MaxLoginFailPct float64
	// MinIdlePct is the least relay host CPU idle % (mean over the hold);
	// negative: off.
	MinIdlePct float64
	// MinFleetIdlePct and MaxLagP99 are the load generator's own limits:
	// under that host CPU idle % or over that schedule lag p99 it is
	// saturated and the level's figures understate the server. Negative
	// or zero: off.
	MinFleetIdlePct float64
	MaxLagP99       time.Duration
}

// DefaultSLO is `--slo`'s default.
func DefaultSLO() SLO {
	return SLO{
		P99:             100 * time.Millisecond,
		MaxDrops:        0,
		MaxLoginFailPct: 1,
		MinIdlePct:      10,
		MinFleetIdlePct: saturatedCPUIdlePct,
		MaxLagP99:       saturatedLagP99,
	}
}

// ParseSLO reads objectives as String wrote them: the keys not in text
// are off (String leaves out the objectives that are off), where Set
// would keep their defaults.
func ParseSLO(text string) (SLO, error) {
	s := SLO{MaxDrops: -1, MaxLoginFailPct: -1, MinIdlePct: -1}
	err := s.Set(text)
	return s, err
}

// sloKeys are the keys of `--slo`, in the order String writes them.
var sloKeys = []string{"p99", "drops", "login_fail", "idle", "fleet_idle", "lag"}

// Type is the pflag type name.
func (s *SLO) Type() string { return "slo" }

// String writes the objectives as Set reads them.
func (s *SLO) String() string {
	var parts []string
	for _, k := range sloKeys {
		if v := s.term(k); v != "" {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, ",")
}

func (s *SLO) term(key string) string {
	switch key {
	case "p99":
		if s.P99 > 0 {
			return "p99<" + s.P99.String()
		}
	case "drops":
		if s.MaxDrops >= 0 {
			return "drops<=" + strconv.Itoa(s.MaxDrops)
		}
	case "login_fail":
		if s.MaxLoginFailPct >= 0 {
			return "login_fail<" + fmtPct(s.MaxLoginFailPct)
		}
	case "idle":
		if s.MinIdlePct >= 0 {
			return "idle>" + fmtPct(s.MinIdlePct)
		}
	case "fleet_idle":
		if s.MinFleetIdlePct > 0 {
			return "fleet_idle>" + fmtPct(s.MinFleetIdlePct)
		}
	case "lag":
		if s.MaxLagP99 > 0 {
			return "lag<" + s.MaxLagP99.String()
		}
	}
	return ""
}

func fmtPct(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "%" }

// Set parses a comma-separated list of objectives, each KEY<VALUE,
// KEY>VALUE, KEY<=VALUE or KEY=VALUE, or KEY=off: p99 (a duration), drops
// (a count: drops=0 allows none, drops<5 up to 4), login_fail and idle
// and fleet_idle (percentages), lag (a duration). Keys not given keep
// their defaults.
func (s *SLO) Set(text string) error {
	for _, term := range strings.Split(text, ",") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		if err := s.setTerm(term); err != nil {
			return fmt.Errorf("--slo %q: %w", term, err)
		}
	}
	return nil
}

func (s *SLO) setTerm(term string) error {
	i := strings.IndexAny(term, "<>=")
	if i <= 0 {
		return fmt.Errorf("want KEY<VALUE, KEY>VALUE or KEY=VALUE with KEY one of %s", strings.Join(sloKeys, ", "))
	}
	key, op, val := term[:i], term[i:i+1], term[i+1:]
	if strings.HasPrefix(val, "=") {
		op, val = op+"=", val[1:]
	}
	key, val = strings.TrimSpace(key), strings.TrimSpace(val)
	if val == "off" && op == "=" {
		return s.off(key)
	}
	switch key {
	case "p99", "lag":
		if op != "<" && op != "<=" {
			return fmt.Errorf("%s is an upper bound: %s<DURATION", key, key)
		}
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration like 100ms")
		}
		if key == "p99" {
			s.P99 = d
		} else {
			s.MaxLagP99 = d
		}
	case "drops":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return fmt.Errorf("want a count like drops=0")
		}
		switch op {
		case "=", "<=":
			s.MaxDrops = n
		case "<":
			if n == 0 {
				return fmt.Errorf("drops<0 allows nothing; drops=0 allows no drop")
			}
			s.MaxDrops = n - 1
		default:
			return fmt.Errorf("drops is an upper bound: drops=N or drops<N")
		}
	case "login_fail":
		if op != "<" && op != "<=" {
			return fmt.Errorf("login_fail is an upper bound: login_fail<1%%")
		}
		v, err := parsePct(val)
		if err != nil {
			return err
		}
		s.MaxLoginFailPct = v
	case "idle", "fleet_idle":
		if op != ">" && op != ">=" {
			return fmt.Errorf("%s is a lower bound: %s>10%%", key, key)
		}
		v, err := parsePct(val)
		if err != nil {
			return err
		}
		if key == "idle" {
			s.MinIdlePct = v
		} else {
			s.MinFleetIdlePct = v
		}
	default:
		return fmt.Errorf("unknown objective %q (known: %s)", key, strings.Join(sloKeys, ", "))
	}
	return nil
}

func (s *SLO) off(key string) error {
	switch key {
	case "p99":
		s.P99 = 0
	case "lag":
		s.MaxLagP99 = 0
	case "drops":
		s.MaxDrops = -1
	case "login_fail":
		s.MaxLoginFailPct = -1
	case "idle":
		s.MinIdlePct = -1
	case "fleet_idle":
		s.MinFleetIdlePct = 0
	default:
		return fmt.Errorf("unknown objective %q (known: %s)", key, strings.Join(sloKeys, ", "))
	}
	return nil
}

func parsePct(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || f < 0 || f > 100 || math.IsNaN(f) {
		return 0, fmt.Errorf("want a percentage from 0 to 100 like 10%%")
	}
	return f, nil
}

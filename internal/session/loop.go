package session

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Point is a loop point: an offset from the flow's start ("12s", "1m30s")
// or a frame index into the flow's client frames ("#120").
type Point struct {
	Offset  time.Duration
	Index   int
	IsIndex bool
}

func (p Point) String() string {
	if p.IsIndex {
		return "#" + strconv.Itoa(p.Index)
	}
	return p.Offset.String()
}

// ParsePoint parses one loop point.
func ParsePoint(s string) (Point, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "#"); ok {
		i, err := strconv.Atoi(rest)
		if err != nil || i < 0 {
			return Point{}, fmt.Errorf("loop point %q: a frame index is # and a number ≥ 0", s)
		}
		return Point{Index: i, IsIndex: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Point{}, fmt.Errorf("loop point %q: want an offset like 12s or 1m30s, or a frame index like #120", s)
	}
	if d < 0 {
		return Point{}, fmt.Errorf("loop point %q: offset is negative", s)
	}
	return Point{Offset: d}, nil
}

// Loop is the range [A, B) of a --loop=A,B flag.
type Loop struct {
	A, B Point
}

// ParseLoop parses "A,B". The empty string means no loop (ok false).
func ParseLoop(s string) (l Loop, ok bool, err error) {
	if strings.TrimSpace(s) == "" {
		return Loop{}, false, nil
	}
	a, b, found := strings.Cut(s, ",")
	if !found {
		return Loop{}, false, fmt.Errorf("loop %q: want A,B (for example 12s,48s or #120,#900)", s)
	}
	if l.A, err = ParsePoint(a); err != nil {
		return Loop{}, false, err
	}
	if l.B, err = ParsePoint(b); err != nil {
		return Loop{}, false, err
	}
	if !l.A.IsIndex && !l.B.IsIndex && l.B.Offset <= l.A.Offset {
		return Loop{}, false, fmt.Errorf("loop %q: B must come after A", s)
	}
	if l.A.IsIndex && l.B.IsIndex && l.B.Index <= l.A.Index {
		return Loop{}, false, fmt.Errorf("loop %q: B must come after A", s)
	}
	return l, true, nil
}

// LoopValue is a --loop flag (a pflag.Value): it parses "A,B" when set,
// so a bad loop is a flag error and the rest of the program gets points.
// Text keeps the flag's text; Points is nil for an empty one.
type LoopValue struct {
	Text   *string
	Points **Loop
}

// Set parses s.
func (v LoopValue) Set(s string) error {
	l, ok, err := ParseLoop(s)
	if err != nil {
		return err
	}
	*v.Text, *v.Points = s, nil
	if ok {
		*v.Points = &l
	}
	return nil
}

// String is the flag's text.
func (v LoopValue) String() string {
	if v.Text == nil {
		return ""
	}
	return *v.Text
}

// Type names the value in help.
func (LoopValue) Type() string { return "A,B" }

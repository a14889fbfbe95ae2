package report

import (
	"encoding/json"
	"math"
	"strconv"
)

// Num is a float64 that encodes NaN and ±Inf as JSON null (encoding/json
// refuses them), so "not measured" survives into summary.json.
type Num float64

// A latency or schedule lag past the fleet's histograms' last finite
// bound (60 s: internal/fleet's latency and lag buckets) is +Inf: its rank
// fell in the +Inf bucket, so all that is known is that it is larger.
// Text prints it as PastRangeText, never as a number; JSON as null, with
// the field's name in the figures' past_range list (pastRange).
const (
	HistogramTopMs = 60000
	PastRangeText  = "> 60 s"
)

// PastRange reports whether n is a figure past the histograms' range.
func (n Num) PastRange() bool { return math.IsInf(float64(n), 1) }

// fmtMs prints a latency or lag in milliseconds with its unit: "12.3 ms",
// "> 60 s" past the range, "-" when not measured.
func fmtMs(n Num, digits int) string {
	if n.PastRange() || math.IsNaN(float64(n)) {
		return fmtMsCell(n, digits)
	}
	return fmtNum(n, digits) + " ms"
}

// fmtMsCell is fmtMs for a column whose header says ms: the number alone,
// or "> 60 s", or "-".
func fmtMsCell(n Num, digits int) string {
	if n.PastRange() {
		return PastRangeText
	}
	return fmtNum(n, digits)
}

// namedNum is a figure and its JSON name, for pastRange.
type namedNum struct {
	name string
	v    Num
}

// pastRange names the figures past the histograms' range (JSON null
// there): nil when none is.
func pastRange(figs ...namedNum) []string {
	var out []string
	for _, f := range figs {
		if f.v.PastRange() {
			out = append(out, f.name)
		}
	}
	return out
}

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler; null reads back as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Num(f)
	return nil
}

package report

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// Fit is a least-squares polynomial fit of y against x. Coeffs are
// highest degree first: a, b, c for a·x²+b·x+c; slope, intercept for a line.
type Fit struct {
	Kind   string `json:"kind"` // "quadratic" or "linear"
	Coeffs []Num  `json:"coeffs"`
	R2     Num    `json:"r2"`
	N      int    `json:"n"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"` // why there is no fit
	// Over is what the fit covers: "1–21 s, before latency p99 broke at
	// 22 s".
	Over string `json:"over,omitempty"`
}

// Eval is the fitted value at x.
func (f Fit) Eval(x float64) float64 {
	y := 0.0
	for _, c := range f.Coeffs {
		y = y*x + float64(c)
	}
	return y
}

// String writes the fitted formula with its R².
func (f Fit) String() string {
	if !f.OK {
		return fmt.Sprintf("%s: no fit (%s)", f.Kind, f.Reason)
	}
	if f.Kind == "quadratic" {
		return fmt.Sprintf("%.4g·n² %+.4g·n %+.4g (R²=%.4f)", float64(f.Coeffs[0]), float64(f.Coeffs[1]), float64(f.Coeffs[2]), float64(f.R2))
	}
	return fmt.Sprintf("%.4g·n %+.4g (R²=%.4f)", float64(f.Coeffs[0]), float64(f.Coeffs[1]), float64(f.R2))
}

// FitLinear fits y = slope·x + intercept with gonum's simple regression.
func FitLinear(x, y []float64) Fit {
	f := Fit{Kind: "linear", N: len(x)}
	if reason := fitnessProblem(x, y, 2); reason != "" {
		f.Reason = reason
		return f
	}
	alpha, beta := stat.LinearRegression(x, y, nil, false)
	f.Coeffs = []Num{Num(beta), Num(alpha)}
	f.R2 = Num(rSquared(x, y, f.Eval))
	f.OK = true
	return f
}

// FitQuadratic fits y = a·x² + b·x + c by least squares (QR through
// gonum's mat). Columns are scaled to a maximum of 1 before solving,
// because x² of a few thousand clients next to a column of ones would
// otherwise make the system badly conditioned.
func FitQuadratic(x, y []float64) Fit {
	f := Fit{Kind: "quadratic", N: len(x)}
	if reason := fitnessProblem(x, y, 3); reason != "" {
		f.Reason = reason
		return f
	}
	maxX := 0.0
	for _, v := range x {
		maxX = math.Max(maxX, math.Abs(v))
	}
	scale := []float64{maxX * maxX, maxX, 1}
	a := mat.NewDense(len(x), 3, nil)
	for i, v := range x {
		a.Set(i, 0, v*v/scale[0])
		a.Set(i, 1, v/scale[1])
		a.Set(i, 2, 1)
	}
	var beta mat.Dense
	if err := beta.Solve(a, mat.NewVecDense(len(y), append([]float64(nil), y...))); err != nil {
		f.Reason = "least squares: " + err.Error()
		return f
	}
	f.Coeffs = []Num{Num(beta.At(0, 0) / scale[0]), Num(beta.At(1, 0) / scale[1]), Num(beta.At(2, 0))}
	f.R2 = Num(rSquared(x, y, f.Eval))
	f.OK = true
	return f
}

// fitnessProblem says why x, y can't carry a fit with k coefficients, or
// "" when they can.
func fitnessProblem(x, y []float64, k int) string {
	if len(x) != len(y) {
		return "x and y differ in length"
	}
	distinct := map[float64]bool{}
	for _, v := range x {
		distinct[v] = true
	}
	if len(distinct) < k {
		return fmt.Sprintf("%d distinct client counts, need %d", len(distinct), k)
	}
	return ""
}

// rSquared is 1 - SSres/SStot; 1 when y is constant and fitted exactly.
func rSquared(x, y []float64, f func(float64) float64) float64 {
	mean := stat.Mean(y, nil)
	var res, tot float64
	for i := range x {
		d := y[i] - f(x[i])
		res += d * d
		t := y[i] - mean
		tot += t * t
	}
	if tot == 0 {
		if res < 1e-18 {
			return 1
		}
		return 0
	}
	return 1 - res/tot
}

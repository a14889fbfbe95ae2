package dashboards

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// prom is a client for the few Prometheus HTTP API calls the end-to-end
// test makes.
type prom struct{ base string }

// sample is one element of an instant vector.
type sample struct {
	Labels map[string]string
	Value  float64
}

func (s sample) String() string {
	var ls []string
	for k, v := range s.Labels {
		ls = append(ls, k+"="+strconv.Quote(v))
	}
	return fmt.Sprintf("{%s} %g", strings.Join(ls, ", "), s.Value)
}

// query evaluates expr at time at through /api/v1/query. A scalar result
// comes back as one sample without labels.
func (p prom) query(ctx context.Context, expr string, at time.Time) ([]sample, error) {
	q := url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	var resp struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     any    `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(ctx, p.base+"/api/v1/query?"+q.Encode(), &resp); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", expr, resp.ErrorType, resp.Error)
	}
	switch resp.Data.ResultType {
	case "vector":
		items, _ := resp.Data.Result.([]any)
		out := make([]sample, 0, len(items))
		for _, it := range items {
			m, _ := it.(map[string]any)
			s, err := parseSample(m["metric"], m["value"])
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", expr, err)
			}
			out = append(out, s)
		}
		return out, nil
	case "scalar":
		s, err := parseSample(nil, resp.Data.Result)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", expr, err)
		}
		return []sample{s}, nil
	default:
		return nil, fmt.Errorf("query %q: result type %q, want vector or scalar", expr, resp.Data.ResultType)
	}
}

// parseSample decodes the API's {"metric": {...}, "value": [ts, "v"]}.
func parseSample(metric, value any) (sample, error) {
	s := sample{Labels: map[string]string{}}
	if m, ok := metric.(map[string]any); ok {
		for k, v := range m {
			s.Labels[k], _ = v.(string)
		}
	}
	pair, ok := value.([]any)
	if !ok || len(pair) != 2 {
		return s, fmt.Errorf("value %v is not [time, value]", value)
	}
	str, ok := pair[1].(string)
	if !ok {
		return s, fmt.Errorf("value %v is not a string", pair[1])
	}
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return s, fmt.Errorf("value %q: %w", str, err)
	}
	s.Value = v
	return s, nil
}

// one evaluates expr and wants exactly one finite value.
func (p prom) one(ctx context.Context, expr string, at time.Time) (float64, error) {
	ss, err := p.query(ctx, expr, at)
	if err != nil {
		return 0, err
	}
	if len(ss) != 1 || math.IsNaN(ss[0].Value) || math.IsInf(ss[0].Value, 0) {
		return 0, fmt.Errorf("query %q: got %v, want one finite value", expr, ss)
	}
	return ss[0].Value, nil
}

// seriesInstances lists the instance label of every series matching sel,
// as Grafana's label_values(sel, instance) does for the dashboard variables.
func (p prom) seriesInstances(ctx context.Context, sel string) ([]string, error) {
	var resp struct {
		Data []map[string]string `json:"data"`
	}
	if err := getJSON(ctx, p.base+"/api/v1/series?"+url.Values{"match[]": {sel}}.Encode(), &resp); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range resp.Data {
		if i := s["instance"]; !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}

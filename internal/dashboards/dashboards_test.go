package dashboards

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"__rate_interval": "10s", "instance": "127.0.0.1:9400", "fleet": ".+"}
	tests := []struct {
		name, in, want, err string
	}{
		{"plain", `up`, `up`, ""},
		{"dollar", `rate(x{instance=~"$instance"}[$__rate_interval])`, `rate(x{instance=~"127.0.0.1:9400"}[10s])`, ""},
		{"braces", `x{instance=~"${instance}"}`, `x{instance=~"127.0.0.1:9400"}`, ""},
		{"braces with format", `x{instance=~"${instance:regex}"}`, `x{instance=~"127.0.0.1:9400"}`, ""},
		{"brackets", `x{instance=~"[[fleet]]"}`, `x{instance=~".+"}`, ""},
		{"regex anchor is not a variable", `x{device=~"eth.*$"}`, `x{device=~"eth.*$"}`, ""},
		{"unknown", `x{a="$nope"}`, "", "no value for variable nope"},
		{"two unknown", `x{a="$nope", b="${other}"}`, "", "nope, other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Substitute(tc.in, vars)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Substitute(%q) error = %v, want one containing %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Substitute(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []Selector
		err        string
	}{
		{"rate", `sum(rate(relay_sent_bytes_total{job="relay"}[1m])) * 8 / 1e9`,
			[]Selector{{Metric: "relay_sent_bytes_total", Labels: map[string]string{"job": "relay"}}}, ""},
		{"ratio keeps order", `a_total{job="x"} / b_total{job="y", mode=~"idle|iowait"}`,
			[]Selector{
				{Metric: "a_total", Labels: map[string]string{"job": "x"}},
				{Metric: "b_total", Labels: map[string]string{"job": "y", "mode": "idle|iowait"}},
			}, ""},
		{"histogram", `histogram_quantile(0.99, sum by (le) (rate(lat_seconds_bucket[1m])))`,
			[]Selector{{Metric: "lat_seconds_bucket", Labels: map[string]string{}}}, ""},
		{"vector literal has no selector", `x{job="a"} or on() vector(0)`,
			[]Selector{{Metric: "x", Labels: map[string]string{"job": "a"}}}, ""},
		{"no name", `{__name__=~"relay_.*"}`, nil, "has no metric name"},
		{"bad promql", `rate(x[1m]`, nil, "parse"},
		{"unsubstituted variable", `rate(x[$__rate_interval])`, nil, "parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Selectors(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Selectors(%q) error = %v, want one containing %q", tc.expr, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Selectors(%q): %v", tc.expr, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Selectors(%q) = %+v, want %+v", tc.expr, got, tc.want)
			}
		})
	}
}

func TestDocumentedMetrics(t *testing.T) {
	doc := []byte("# Metrics\n\n| `relay_rooms` | gauge |\n| `relay_joins_total{result}` | counter |\n" +
		"The histogram `replay_delivery_latency_seconds` has buckets.\n")
	got := DocumentedMetrics(doc)
	tests := []struct {
		metric string
		want   bool
	}{
		{"relay_rooms", true},
		{"relay_joins_total", true},
		{"replay_delivery_latency_seconds", true},
		{"replay_delivery_latency_seconds_bucket", true},
		{"replay_delivery_latency_seconds_count", true},
		// The doc does not say which names are histograms, so the suffix rule
		// lets this through; the end-to-end test catches series that don't exist.
		{"relay_rooms_bucket", true},
		{"relay_connections", false},
		{"Metrics", false},
	}
	for _, tc := range tests {
		if IsDocumented(tc.metric, got) != tc.want {
			t.Errorf("IsDocumented(%q) = %v, want %v", tc.metric, !tc.want, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "no dashboards") {
		t.Fatalf("LoadDir(empty) error = %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"uid": "x", "panels": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("LoadDir(bad json) error = %v, want one naming the file", err)
	}
}

func TestAllPanelsIncludesCollapsedRows(t *testing.T) {
	d := &Dashboard{Panels: []Panel{
		{ID: 1, Type: "row", Panels: []Panel{{ID: 2, Targets: []Target{{RefID: "A", Expr: "a"}}}}},
		{ID: 3, Targets: []Target{{RefID: "A", Expr: "b"}, {RefID: "B", Expr: "c"}}},
	}}
	var ids []int
	for _, p := range d.AllPanels() {
		ids = append(ids, p.ID)
	}
	if !reflect.DeepEqual(ids, []int{1, 2, 3}) {
		t.Fatalf("AllPanels ids = %v, want [1 2 3]", ids)
	}
	var exprs []string
	for _, q := range d.Queries() {
		exprs = append(exprs, q.Expr)
	}
	if !reflect.DeepEqual(exprs, []string{"a", "b", "c"}) {
		t.Fatalf("Queries exprs = %v", exprs)
	}
}

// Package dashboards holds checks over the observability files reprise ships:
// the Grafana dashboards in grafana/dashboards, their provisioning in
// grafana/provisioning and the Prometheus configuration in prometheus/. It
// reads dashboard JSON, lists every PromQL query in it, fills in Grafana's
// template variables and names the metrics each query reads, so that its
// tests can lint the dashboards against docs/metrics.md and run every query
// against a real Prometheus scraping the real relay and fleet.
//
// It is not a Grafana client, and nothing in relay, record or replay uses it
// at run time.
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// Datasource is a panel's or a query's reference to a Grafana datasource.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *Datasource `json:"datasource"`
}

// Panel is a dashboard panel, or a row holding panels.
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Datasource  *Datasource `json:"datasource"`
	GridPos     GridPos     `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string   `json:"unit"`
			Min  *float64 `json:"min"`
			Max  *float64 `json:"max"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"` // a collapsed row keeps its panels here
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Variable is a dashboard template variable.
type Variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Datasource *Datasource `json:"datasource"`
	Definition string      `json:"definition"`
	AllValue   string      `json:"allValue"`
}

// Dashboard is the part of a Grafana dashboard JSON model these checks read.
type Dashboard struct {
	File    string `json:"-"`
	UID     string `json:"uid"`
	Title   string `json:"title"`
	Refresh string `json:"refresh"`
	Time    struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Load reads one dashboard JSON file.
func Load(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dashboard: %w", err)
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", path, err)
	}
	d.File = path
	return &d, nil
}

// LoadDir reads every *.json dashboard in dir, in name order.
func LoadDir(dir string) ([]*Dashboard, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", dir)
	}
	sort.Strings(files)
	out := make([]*Dashboard, 0, len(files))
	for _, f := range files {
		d, err := Load(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// AllPanels returns every panel, rows included, with the panels of
// collapsed rows after their row.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// Query is one PromQL expression of a dashboard, with where it came from.
type Query struct {
	Dashboard string // dashboard uid
	Panel     string // panel title
	PanelID   int
	RefID     string
	Expr      string
}

func (q Query) String() string {
	return fmt.Sprintf("%s panel %d %q query %s", q.Dashboard, q.PanelID, q.Panel, q.RefID)
}

// Queries lists the expression of every target of every panel.
func (d *Dashboard) Queries() []Query {
	var out []Query
	for _, p := range d.AllPanels() {
		for _, t := range p.Targets {
			out = append(out, Query{Dashboard: d.UID, Panel: p.Title, PanelID: p.ID, RefID: t.RefID, Expr: t.Expr})
		}
	}
	return out
}

// varRef matches Grafana's three variable syntaxes: $name, ${name} or
// ${name:format}, and the deprecated [[name]].
var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// Substitute replaces Grafana variables in expr with the values in vars, the
// way Grafana would before sending the query to Prometheus. A variable with
// no value in vars is an error, so a typo in a dashboard can't hide.
func Substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for variable %s in %q", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// Selector is one series selector of a query: the metric name and the label
// names it matches on.
type Selector struct {
	Metric string
	Labels map[string]string // label name -> matched value, as written
}

// Selectors parses expr as PromQL and returns its series selectors in
// order. A selector without a literal metric name (e.g. {__name__=~"..."})
// is an error: the checks need to know which metrics a query reads.
func Selectors(expr string) ([]Selector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var out []Selector
	var inspectErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			inspectErr = fmt.Errorf("selector %s in %q has no metric name", vs, expr)
			return nil
		}
		s := Selector{Metric: vs.Name, Labels: map[string]string{}}
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" {
				s.Labels[m.Name] = m.Value
			}
		}
		out = append(out, s)
		return nil
	})
	if inspectErr != nil {
		return nil, inspectErr
	}
	return out, nil
}

// metricName is a Prometheus metric name as docs/metrics.md writes one,
// inside a code span.
var metricName = regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)")

// DocumentedMetrics returns the metric names written in code spans of a
// markdown document (`relay_rooms`, `relay_joins_total{result}`). Every
// code span that starts with a word counts; the caller asks only about
// names its queries use, so extra words are harmless.
func DocumentedMetrics(markdown []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range metricName.FindAllSubmatch(markdown, -1) {
		out[string(m[1])] = true
	}
	return out
}

// histogramSuffixes are the series a histogram named h exposes beside h.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// IsDocumented reports whether metric, or the histogram it is a series of,
// is in documented.
func IsDocumented(metric string, documented map[string]bool) bool {
	if documented[metric] {
		return true
	}
	for _, s := range histogramSuffixes {
		if base, ok := strings.CutSuffix(metric, s); ok && documented[base] {
			return true
		}
	}
	return false
}

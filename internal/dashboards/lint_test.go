package dashboards

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// provisionedUID reads the uid of the datasource in grafana/provisioning.
// A line scan is enough for the one short file we ship; the test fails if
// it finds no uid or more than one.
func provisionedUID(t testing.TB, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "grafana", "provisioning", "datasources", "reprise.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*uid:\s*["']?([\w.-]+)["']?\s*$`).FindAllStringSubmatch(string(b), -1)
	if len(m) != 1 {
		t.Fatalf("want exactly one datasource uid in provisioning, found %d", len(m))
	}
	return m[0][1]
}

func loadDashboards(t testing.TB, root string) []*Dashboard {
	t.Helper()
	ds, err := LoadDir(filepath.Join(root, "grafana", "dashboards"))
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func documented(t testing.TB, root string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatalf("docs/metrics.md lists the metrics dashboards may use: %v", err)
	}
	return DocumentedMetrics(b)
}

// knownUnits are Grafana unit ids the dashboards may use. Grafana shows an
// unknown id as a bare number with the id appended, so a typo here would
// silently mislabel a panel.
var knownUnits = map[string]bool{
	"Gbits": true, "Mbits": true, "bps": true, "Bps": true, "bytes": true,
	"percent": true, "percentunit": true, "ms": true, "s": true, "µs": true,
	"short": true, "none": true, "cps": true, "cpm": true, "ops": true,
}

// markers stand for template variables while linting: valid in PromQL
// strings and recognisable afterwards.
func markers(d *Dashboard) map[string]string {
	m := map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
	for _, v := range d.Templating.List {
		m[v.Name] = "__var_" + v.Name
	}
	return m
}

func TestDashboardFilesAreJSON(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "grafana", "dashboards", "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want the relay and fleet dashboards, found %v (%v)", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("%s: invalid JSON: %v", f, err)
		}
		// Grafana assigns its own numeric id on import; a fixed one in the
		// file collides with whatever the target Grafana already has.
		if id, ok := v["id"]; ok && id != nil {
			t.Errorf("%s: has \"id\": %v; provisioned dashboards must leave it out or null", f, id)
		}
	}
}

func TestDashboardsLint(t *testing.T) {
	root := repoRoot(t)
	uid := provisionedUID(t, root)
	docs := documented(t, root)
	uids := map[string]string{}
	for _, d := range loadDashboards(t, root) {
		name := filepath.Base(d.File)
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: uid %q title %q: both must be set (links and provisioning use the uid)", name, d.UID, d.Title)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q already used by %s", name, d.UID, other)
		}
		uids[d.UID] = name
		lintTimeRange(t, name, d)
		instanceVar := lintVariables(t, name, d, uid, docs)
		lintPanels(t, name, d, uid)
		lintQueries(t, name, d, docs, instanceVar)
	}
}

// lintTimeRange wants a window that holds a whole 90-minute ramp and a
// refresh that keeps up with it.
func lintTimeRange(t *testing.T, name string, d *Dashboard) {
	t.Helper()
	span, err := time.ParseDuration(strings.TrimPrefix(d.Time.From, "now-"))
	if err != nil || d.Time.To != "now" || span < 90*time.Minute {
		t.Errorf("%s: time range %s..%s; want now-X..now with X >= 90m", name, d.Time.From, d.Time.To)
	}
	if r, err := time.ParseDuration(d.Refresh); err != nil || r > 30*time.Second {
		t.Errorf("%s: refresh %q; want a few seconds", name, d.Refresh)
	}
}

// lintVariables checks the query variables and returns the name of the one
// that picks instances ("" if none).
func lintVariables(t *testing.T, name string, d *Dashboard, uid string, docs map[string]bool) string {
	t.Helper()
	instanceVar := ""
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*instance\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if v.Datasource == nil || v.Datasource.UID != uid {
			t.Errorf("%s: variable %s: datasource %+v, want uid %q", name, v.Name, v.Datasource, uid)
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("%s: variable %s: definition %q; want label_values(<selector>, instance)", name, v.Name, v.Definition)
			continue
		}
		sels, err := Selectors(m[1])
		if err != nil || len(sels) != 1 || !IsDocumented(sels[0].Metric, docs) {
			t.Errorf("%s: variable %s: selector %q: %v (want one documented metric)", name, v.Name, m[1], err)
		}
		instanceVar = v.Name
	}
	if instanceVar == "" {
		t.Errorf("%s: no variable to pick the instance", name)
	}
	return instanceVar
}

func lintPanels(t *testing.T, name string, d *Dashboard, uid string) {
	t.Helper()
	ids := map[int]string{}
	for _, p := range d.AllPanels() {
		where := name + " panel " + p.Title
		if p.ID <= 0 {
			t.Errorf("%s: id %d; want a positive id", where, p.ID)
		}
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id %d already used by panel %q", where, p.ID, other)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24-column grid", where, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("%s (id %d): no title", name, p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != uid || p.Datasource.Type != "prometheus" {
			t.Errorf("%s: datasource %+v; want prometheus uid %q", where, p.Datasource, uid)
		}
		if u := p.FieldConfig.Defaults.Unit; !knownUnits[u] {
			t.Errorf("%s: unit %q; want one of the known Grafana unit ids", where, u)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != uid {
				t.Errorf("%s query %s: datasource %+v; want uid %q", where, tg.RefID, tg.Datasource, uid)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q empty or repeated", where, tg.RefID)
			}
			refs[tg.RefID] = true
		}
	}
}

// lintQueries parses every query and checks the metrics it reads: each is
// documented, each selector names its job (process_* and go_* exist in both
// jobs), and each follows the dashboard's instance variable so that picking a
// relay or fleet machine changes every panel.
func lintQueries(t *testing.T, name string, d *Dashboard, docs map[string]bool, instanceVar string) {
	t.Helper()
	vars := markers(d)
	for _, q := range d.Queries() {
		expr, err := Substitute(q.Expr, vars)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		sels, err := Selectors(expr)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q reads no metric", q, q.Expr)
		}
		for _, s := range sels {
			if !IsDocumented(s.Metric, docs) {
				t.Errorf("%s: metric %s is not in docs/metrics.md", q, s.Metric)
			}
			if job := s.Labels["job"]; job != "relay" && job != "fleet" {
				t.Errorf("%s: selector of %s has job %q; want job=\"relay\" or job=\"fleet\"", q, s.Metric, job)
			}
			if instanceVar != "" && s.Labels["instance"] != vars[instanceVar] {
				t.Errorf("%s: selector of %s does not match instance=~\"$%s\"", q, s.Metric, instanceVar)
			}
		}
	}
}

package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPromtoolCheckConfig(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	root := repoRoot(t)
	out, err := exec.Command(promtool, "check", "config", filepath.Join(root, "prometheus", "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// TestPrometheusConfigTargets pins what the end-to-end test and the README
// rely on: two jobs named relay and fleet, each default target written once.
func TestPrometheusConfigTargets(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{"job_name: relay", "job_name: fleet", "scrape_interval: 1s"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("prometheus.yml lacks %q", want)
		}
	}
	for _, target := range []string{`"127.0.0.1:9400"`, `"127.0.0.1:9401"`} {
		if n := strings.Count(cfg, target); n != 1 {
			t.Errorf("prometheus.yml has target %s %d times; want exactly once", target, n)
		}
	}
}

// TestGrafanaProvisioning checks that the dashboard provider points where
// scripts/observe.sh says the dashboards are.
func TestGrafanaProvisioning(t *testing.T) {
	root := repoRoot(t)
	prov, err := os.ReadFile(filepath.Join(root, "grafana", "provisioning", "dashboards", "reprise.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prov), "path: ${REPRISE_GRAFANA_DASHBOARDS}") {
		t.Errorf("dashboard provider path must be ${REPRISE_GRAFANA_DASHBOARDS}")
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts", "observe.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REPRISE_GRAFANA_DASHBOARDS=", "GF_PATHS_PROVISIONING=", "grafana/provisioning", "grafana/dashboards"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("scripts/observe.sh lacks %q", want)
		}
	}
}

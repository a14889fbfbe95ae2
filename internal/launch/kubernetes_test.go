package launch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
)

// TestSummaryFromLog: a shard pod's log is its progress lines and its
// summary as the last JSON line (--summary -); the summary is found
// after any other line, and a log without one says so.
func TestSummaryFromLog(t *testing.T) {
	sum, err := os.ReadFile("../fleet/testdata/shard-summary.json")
	if err != nil {
		t.Fatal(err)
	}
	var line bytes.Buffer
	for _, l := range strings.Split(string(sum), "\n") {
		line.WriteString(strings.TrimSpace(l))
	}
	progress := "5s logged in 10 / attempted 10 / failed 0 | clients sent 1 msg/s\n"
	for _, tc := range []struct {
		name, log string
		ok        bool
	}{
		{"summary last", progress + line.String() + "\n", true},
		{"summary then a line", progress + line.String() + "\nreplay: stopped\n", true},
		{"no newline at the end", line.String(), true},
		{"cut short", progress + line.String()[:200] + "\n", false},
		{"none", progress, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SummaryFromLog([]byte(tc.log))
			if tc.ok != (err == nil) {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (s.ClientsRequested != 10 || s.LoginsSucceeded != 10) {
				t.Errorf("read %d/%d clients, want 10/10", s.LoginsSucceeded, s.ClientsRequested)
			}
		})
	}
}

// TestOpenKubernetesRefusesFirst: a setup the flags got wrong is refused
// as bad configuration (a usage error) before kubectl is asked anything:
// the kubectl here does not exist, and no error names it.
func TestOpenKubernetesRefusesFirst(t *testing.T) {
	kc := &k8s.Kubectl{Program: filepath.Join(t.TempDir(), "no-kubectl")}
	args := func(fleet.Config) []string { return nil }
	ok := k8s.DefaultParams()
	ok.CaptureInImage = "/captures/x.pcap"
	for _, tc := range []struct {
		name string
		edit func(*KubernetesSetup)
		want string
	}{
		{"cpu", func(s *KubernetesSetup) { s.Params.CPU = "lots" }, "--cpu"},
		{"relay cpu", func(s *KubernetesSetup) { s.Params.Relay, s.Params.RelayCPU = true, "x" }, "--relay-cpu"},
		{"target with relay", func(s *KubernetesSetup) {
			s.Params.Relay, s.Params.RunArgs = true, []string{"--target", "a:1"}
		}, "--target with --relay"},
		{"reserved flag", func(s *KubernetesSetup) { s.Params.RunArgs = []string{"--shard=0/2"} }, "--shard"},
		{"no capture file", func(s *KubernetesSetup) {
			s.Params.CaptureInImage, s.Capture = "", filepath.Join(t.TempDir(), "none.pcap")
		}, "--capture"},
		{"capture over a ConfigMap", func(s *KubernetesSetup) {
			s.Params.CaptureInImage, s.Capture = "", bigFile(t)
		}, "over a ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := KubernetesSetup{Kubectl: kc, Params: ok, Args: args, Dir: t.TempDir(), Single: true}
			tc.edit(&s)
			_, err := OpenKubernetes(context.Background(), s)
			if !errors.Is(err, fleet.ErrBadConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "no-kubectl") {
				t.Fatalf("err %v, want bad configuration naming %q, kubectl not run", err, tc.want)
			}
		})
	}
}

// bigFile is a file over a ConfigMap's capture limit.
func bigFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "big.pcap")
	if err := os.WriteFile(p, make([]byte, k8s.MaxConfigMapCapture+1), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

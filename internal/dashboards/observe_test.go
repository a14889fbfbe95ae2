package dashboards

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestObserveScript runs `make observe`'s script the way a user does (with
// Grafana left out and a free port), checks that Prometheus serves the
// project's two scrape jobs, and that Ctrl-C stops everything it started.
func TestObserveScript(t *testing.T) {
	requireTool(t, "prometheus", "prometheus")
	root := repoRoot(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "observe.sh"))
	cmd.Env = append(os.Environ(), "OBSERVE_PROM_ADDR="+addr, "OBSERVE_NO_GRAFANA=1", "OBSERVE_OUT="+t.TempDir())
	cmd.Stderr = os.Stderr
	// Its own process group, so a leftover child could be found and killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()

	// The script prints the URLs once Prometheus accepts connections.
	sc := bufio.NewScanner(stdout)
	var printed []string
	for sc.Scan() {
		printed = append(printed, sc.Text())
		if strings.HasPrefix(sc.Text(), "Scraping") {
			break
		}
	}
	if !strings.Contains(strings.Join(printed, "\n"), "http://"+addr) {
		t.Fatalf("observe.sh printed %q; want the Prometheus URL http://%s", printed, addr)
	}
	base := "http://" + addr
	if err := waitReady(ctx, base); err != nil {
		t.Fatal(err)
	}
	// Prometheus loads its targets shortly after it reports ready.
	want := map[string]string{"relay": "http://127.0.0.1:9400/metrics", "fleet": "http://127.0.0.1:9401/metrics"}
	var got map[string]string
	for {
		got, err = scrapeTargets(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= len(want) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for job, url := range want {
		if got[job] != url {
			t.Errorf("target of job %s = %q, want %q (all: %v)", job, got[job], url, got)
		}
	}

	// Ctrl-C: the script and Prometheus stop, and the port is free again.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("observe.sh did not stop on Ctrl-C: %v", err)
	}
	t.Logf("observe.sh stopped %v after Ctrl-C (%v)", time.Since(start).Round(time.Millisecond), err)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s after Ctrl-C", addr)
	}
}

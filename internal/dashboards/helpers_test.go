package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root %s: %v", root, err)
	}
	return root
}

// requireTool returns the path of a program the test needs. Outside CI a
// missing program skips the test with how to install it; in CI (CI=true,
// where .ci/run installs it) it fails, so a broken install can't pass as a
// skip.
func requireTool(t testing.TB, name, pkg string) string {
	t.Helper()
	return testproc.NeedTool(t, name, pkg)
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. Programs under test take addresses as flags, so the port has to be
// chosen before they start.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// startReplayOn starts replay with args serving /metrics on the inherited
// listener f (testproc.Inherit) and, given barrier, shard 0's start
// barrier on it (one listener at most).
func startReplayOn(t testing.TB, f *os.File, barrier []*os.File, args ...string) *testproc.Proc {
	t.Helper()
	cmd := exec.Command(bins["replay"], args...)
	cmd.Args = append(cmd.Args, "--metrics-fd", testproc.InheritArg(cmd, f))
	for _, b := range barrier {
		cmd.Args = append(cmd.Args, "--barrier-fd", testproc.InheritArg(cmd, b))
	}
	return testproc.StartCmd(t, cmd)
}

// getJSON fetches url and decodes its JSON body into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decode: %w", url, err)
	}
	return nil
}

// waitReady polls a Prometheus /-/ready until it answers 200 or ctx ends.
func waitReady(ctx context.Context, base string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prometheus at %s not ready: %w", base, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrapeTargets returns the scrape URL of each active target by job.
func scrapeTargets(ctx context.Context, base string) (map[string]string, error) {
	var targets struct {
		Data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				ScrapeURL  string `json:"scrapeUrl"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := getJSON(ctx, base+"/api/v1/targets", &targets); err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, tg := range targets.Data.ActiveTargets {
		got[tg.ScrapePool] = tg.ScrapeURL
	}
	return got, nil
}

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var bins map[string]string

func TestMain(m *testing.M) { os.Exit(testproc.Main(m, &bins, testproc.Options{}, "relay")) }

// relayProc is a running relay binary on 127.0.0.1 with free ports.
type relayProc struct{ *testproc.Relay }

// startRelay starts the relay binary with args (after the loopback
// addresses) and stops it with SIGTERM at the end of the test.
func startRelay(t *testing.T, args ...string) relayProc {
	t.Helper()
	return relayProc{testproc.StartRelay(t, bins["relay"], append([]string{"--log-level", "debug"}, args...)...)}
}

// stop sends SIGTERM and waits for the exit; it returns how long it took.
func (p relayProc) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Errorf("relay: %v", err)
	}
	return time.Since(start)
}

// metric scrapes /metrics and returns the value of the sample whose line
// starts with series (name and labels exactly as exposed), or -1.
func (p relayProc) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// waitMetric polls until series reaches at least want.
func (p relayProc) waitMetric(t *testing.T, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.metric(t, series)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want >= %v", series, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMetricEq polls until series equals want.
func (p relayProc) waitMetricEq(t *testing.T, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.metric(t, series)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", series, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dial connects over TCP and closes at the end of the test; every read and
// write has a 5 s deadline so a broken relay fails the test instead of
// hanging it.
func dial(t *testing.T, addr string) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func dialUDP(t *testing.T, addr string) *client.Conn {
	t.Helper()
	c, err := client.DialUDP(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// join dials and joins room as user, failing the test on refusal.
func join(t *testing.T, addr, room, user string) *client.Conn {
	t.Helper()
	c := dial(t, addr)
	if _, err := c.Join(room, user, nil); err != nil {
		t.Fatalf("join %s/%s: %v", room, user, err)
	}
	return c
}

// expectError reads until an error frame and checks its code, then expects
// the relay to close the connection.
func expectError(t *testing.T, c *client.Conn, code wire.ErrorCode) {
	t.Helper()
	for {
		f, err := c.Recv()
		if err != nil {
			t.Fatalf("waiting for %s error: %v", code, err)
		}
		if f.Type != wire.TypeError {
			continue
		}
		if f.Code != code {
			t.Fatalf("error %s (%q), want %s", f.Code, f.Text, code)
		}
		break
	}
	if f, err := c.Recv(); err == nil {
		t.Fatalf("after %s: got %s frame, want the connection closed", code, f.Type)
	}
}

// nextDeliver returns the next deliver's sender and payload, skipping
// notices.
func nextDeliver(t *testing.T, c *client.Conn) (sender, payload string) {
	t.Helper()
	f, err := c.RecvType(wire.TypeDeliver)
	if err != nil {
		t.Fatalf("waiting for deliver: %v", err)
	}
	return string(f.User), string(f.Payload)
}

func send(t *testing.T, c *client.Conn, m wire.Send) {
	t.Helper()
	if err := c.Send(m); err != nil {
		t.Fatal(err)
	}
}

package relayproc

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{CheckLeaks: true}, "relay"))
}

// TestStartStop starts the real relay with a flag passed through, finds it
// listening on loopback, stops it, and finds the process gone and its log
// written.
func TestStartStop(t *testing.T) {
	var log testproc.SyncBuffer
	r, err := Start(context.Background(), Config{Bin: bins["relay"], Args: []string{"--max-room-members", "7"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.TCP, "127.0.0.1:") || !strings.HasPrefix(r.MetricsURL(), "http://127.0.0.1:") {
		t.Errorf("addresses tcp=%s metrics=%s, want loopback", r.TCP, r.MetricsURL())
	}
	c, err := net.Dial("tcp", r.TCP)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !strings.Contains(r.CommandLine(), "--max-room-members 7") {
		t.Errorf("command line %q lacks the passed flag", r.CommandLine())
	}
	pid := r.PID()
	if err := r.Stop(StopGrace); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("pid %d still exists after Stop", pid)
	}
	if !strings.Contains(log.String(), "relay stopped") {
		t.Errorf("log lacks the relay's last words:\n%s", log.String())
	}
	if err := r.Stop(StopGrace); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// TestStartFails: a flag the relay refuses ends the start with the
// relay's own message.
func TestStartFails(t *testing.T) {
	_, err := Start(context.Background(), Config{Bin: bins["relay"], Args: []string{"--no-such-flag"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("err = %v, want the relay's complaint about --no-such-flag", err)
	}
	_, err = Start(context.Background(), Config{Bin: "/nonexistent/relay"})
	if err == nil {
		t.Error("a missing binary started")
	}
}

// TestCrashReported: a relay that dies during the run is reported by
// Stop, not taken for a clean stop.
func TestCrashReported(t *testing.T) {
	r, err := Start(context.Background(), Config{Bin: bins["relay"], StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if err := r.Stop(time.Second); err == nil || !strings.Contains(err.Error(), "had exited") {
		t.Errorf("stop after a crash: %v", err)
	}
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
)

// TestUnusableCaptureExitsOne: a capture whose only flow has no join (the
// recording began after the login) exits 1 with one line saying why, from
// inspect, inspect --frames and replay alike; inspect still prints what it
// read.
func TestUnusableCaptureExitsOne(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript()[1:])
	for _, args := range [][]string{
		{"inspect", path},
		{"inspect", "--json", path},
		{"inspect", "--frames", path},
		{"inspect", "--frames", "--flow", "0", path},
		{"--capture", path, "--target", "127.0.0.1:1", "--clients", "1", "--duration", "1s"},
	} {
		cmd := exec.Command(bins["replay"], args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		last := lines[len(lines)-1]
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(last, "unusable capture") || !strings.Contains(last, "no join") {
			t.Errorf("%v: exit %d, stderr %q; want 1 and a line saying the capture is unusable for want of a join", args, code, errb.String())
		}
		if args[0] == "inspect" && !strings.Contains(out.String(), "10.0.0.1:50000") {
			t.Errorf("%v: the output does not show the flow:\n%s", args, out.String())
		}
	}
}

// TestMaxMemory: a capture of more flows than --max-memory holds stops
// inspect and replay with exit 1 and one line naming the packet, not a Go
// out-of-memory crash; a bad size is a usage error.
func TestMaxMemory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "flows.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := capturetest.WriteFlows(f, capturetest.Flows{N: 2000, Sends: 2, Payload: 20}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"inspect", "--max-memory", "1", path}, 1, "memory budget of 1 MiB"},
		{[]string{"--capture", path, "--max-memory", "1", "--target", "127.0.0.1:1", "--duration", "1s"}, 1, "memory budget of 1 MiB"},
		{[]string{"inspect", "--max-memory", "0", path}, 2, "--max-memory"},
		{[]string{"inspect", "--max-memory", "64", path}, 0, ""},
	} {
		cmd := exec.Command(bins["replay"], tt.args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Run()
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(lines[len(lines)-1], tt.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errb.String(), tt.code, tt.msg)
		}
		if tt.code == 1 && !strings.Contains(errb.String(), "capture packet ") {
			t.Errorf("%v: the error names no packet: %q", tt.args, errb.String())
		}
	}
}

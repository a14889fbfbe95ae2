package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
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

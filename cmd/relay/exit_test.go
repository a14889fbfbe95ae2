package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestUsageExitCodes: bad flags or arguments exit 2 (the exit-code table
// in the README), a failure at run time 1.
func TestUsageExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"--bogus"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"--max-frame", "many"}, 2},
		{[]string{"--listen", "256.0.0.1:0", "--metrics", "off"}, 1},
		// Addresses are host:port, refused when parsed: nothing listens.
		{[]string{"--listen", "7400"}, 2},
		{[]string{"--listen", "127.0.0.1:0", "--metrics", "9400"}, 2},
		{[]string{"--listen", "127.0.0.1:0", "--metrics", "http://127.0.0.1:9400/metrics"}, 2},
		{[]string{"--listen", "127.0.0.1:0", "--udp", "7401"}, 2},
		{[]string{"--listen", "127.0.0.1:0", "--udp", "127.0.0.1:x"}, 2},
		// A burst of 0 would be no limit or no traffic: refused.
		{[]string{"--room-rate-messages-burst", "0"}, 2},
		{[]string{"--rate-bytes-burst", "-1"}, 2},
		{[]string{"--queue-budget", "0"}, 2},
		{[]string{"--max-memory", "-1"}, 2},
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["relay"], tt.args...)
		b, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tt.code {
			t.Errorf("relay %v: exit %d, want %d:\n%s", tt.args, code, tt.code, b)
		}
		if tt.code == 2 && strings.Contains(strings.Join(tt.args, " "), ":") && !strings.Contains(string(b), "want host:port") {
			t.Errorf("relay %v: refused without saying host:port:\n%s", tt.args, b)
		}
		if strings.Contains(string(b), "listening") && tt.code == 2 {
			t.Errorf("relay %v: listened before refusing:\n%s", tt.args, b)
		}
	}
}

package main

import (
	"os/exec"
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
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["relay"], tt.args...)
		b, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tt.code {
			t.Errorf("relay %v: exit %d, want %d:\n%s", tt.args, code, tt.code, b)
		}
	}
}

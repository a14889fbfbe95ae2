package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestAuthSecretSources: the secret can come from a file or the
// environment, and then it is nowhere in /proc/PID/cmdline; given on the
// command line it works but the relay warns; given twice it refuses to
// start.
func TestAuthSecretSources(t *testing.T) {
	secret := "not-on-the-command-line"
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    string
		inArgv bool
	}{
		{"file", []string{"--auth-secret-file", file}, "", false},
		{"environment", nil, secret, false},
		{"command line", []string{"--auth-secret", secret}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(auth.EnvSecret, tt.env)
			p := startRelay(t, tt.args...)
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p.Cmd.Process.Pid) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(cmdline, []byte(secret)); got != tt.inArgv {
				t.Errorf("secret in /proc/PID/cmdline: %v, want %v", got, tt.inArgv)
			}
			c := dial(t, p.TCP)
			if _, err := c.Join("auth", "ann", auth.Sign([]byte(secret), "ann", time.Now().Add(time.Hour))); err != nil {
				t.Fatalf("join with a token of the secret: %v", err)
			}
			c = dial(t, p.TCP)
			if _, err := c.Join("auth", "bob", nil); !isCode(err, wire.ErrAuthRequired) {
				t.Fatalf("join without a token: %v, want auth_required", err)
			}
			warned := strings.Contains(p.Stderr.String(), "readable by every local user")
			if warned != tt.inArgv {
				t.Errorf("warned about argv: %v, want %v\n%s", warned, tt.inArgv, p.Stderr.String())
			}
		})
	}
	t.Run("given twice", func(t *testing.T) {
		t.Setenv(auth.EnvSecret, secret)
		cmd := exec.Command(bins["relay"], "--listen", "127.0.0.1:0", "--metrics", "off", "--auth-secret-file", file)
		var stderr testproc.SyncBuffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "more than once") {
			t.Fatalf("exit %d (%v), stderr %q; want 1 and a line saying the secret is given twice", code, err, stderr.String())
		}
	})
}

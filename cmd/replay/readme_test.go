package main

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// addressFlags take host:port (a URL only where a path is needed).
var addressFlags = []string{"target", "metrics", "relay-metrics", "barrier"}

// TestREADMEExamples takes every replay command line from the code
// blocks of the README and docs/profiles.md, as written
// (testproc.DocCommands), and checks that it names a real subcommand whose flags all parse, and
// that every address in it is host:port.
func TestREADMEExamples(t *testing.T) {
	lines := testproc.DocCommands(t, "../../README.md", "replay")
	if len(lines) < 10 {
		t.Fatalf("found %d replay examples in the README; the extraction is broken", len(lines))
	}
	lines = append(lines, testproc.DocCommands(t, "../../docs/profiles.md", "replay")...)
	// Flags that read their file when set (--tls-keylog) find the one the
	// README names: a real key log, in a folder of its own.
	keys, err := os.ReadFile(tlsKeys)
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := os.WriteFile("keys.log", keys, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range lines {
		line := strings.Join(args, " ")
		st := &state{stdout: io.Discard, stderr: io.Discard}
		root := newRunCmd(st)
		for _, sub := range subcommands {
			root.AddCommand(sub(st))
		}
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		if dash := indexOf(rest, "--"); dash >= 0 && cmd.Name() == "render" {
			rest = rest[:dash] // the run flags after -- are checked by render itself
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		if cmd.Args != nil {
			if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %v", line, err)
			}
		}
		checkAddresses(t, line, cmd)
	}
}

func checkAddresses(t *testing.T, line string, cmd *cobra.Command) {
	t.Helper()
	for _, name := range addressFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || f.Value.String() == "off" || f.Value.String() == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.Value.String()); err != nil {
			t.Errorf("%s: --%s %q is not host:port: %v", line, name, f.Value.String(), err)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/reprise-harness/reprise/internal/cli"
)

// TestUsage: --help succeeds; bad flags and values are usage errors (exit 2).
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out); err != nil {
		t.Errorf("--help: %v", err)
	}
	for _, args := range [][]string{{"--bogus"}, {"--transport", "sctp"}, {"extra"}, {"--duration", "soon"}} {
		if err := run(context.Background(), args, &out); cli.Code(err) != cli.ExitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

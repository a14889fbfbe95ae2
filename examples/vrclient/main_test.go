package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestUsage: --help succeeds; bad flags and values are usage errors (exit 2).
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out); err != nil {
		t.Errorf("--help: %v", err)
	}
	for _, args := range [][]string{{"--bogus"}, {"--transport", "sctp"}, {"extra"}, {"--duration", "soon"}} {
		var u usageError
		if err := run(context.Background(), args, &out); !errors.As(err, &u) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

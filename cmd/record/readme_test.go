package main

import (
	"context"
	"io"
	"testing"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestDocExamples: every record command line in the README and the docs runs
// as written as far as its flags: each parses (every address host:port,
// checked when set) and names a real command. --help stops it there, so
// nothing listens.
func TestDocExamples(t *testing.T) {
	testproc.CheckDocExamples(t, "record", func(args []string) error {
		return run(context.Background(), append(args, "--help"), io.Discard)
	})
}

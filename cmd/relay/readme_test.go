package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestDocExamples: every relay command line in the README and the docs runs
// as written as far as its flags: each parses (every address host:port,
// checked when set) and names a real command. --help stops it there, so
// nothing listens.
func TestDocExamples(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range append(docs, "../../README.md", "../../captures/README.md") {
		for _, args := range testproc.DocCommands(t, doc, "relay") {
			n++
			if err := run(context.Background(), append(args, "--help"), io.Discard, io.Discard); err != nil {
				t.Errorf("%s: relay %s: %v", filepath.Base(doc), strings.Join(args, " "), err)
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d relay examples in the docs; the extraction is broken", n)
	}
}

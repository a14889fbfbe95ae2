package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// benchBuild builds a program of the test-only module bench/ (its
// dependencies pinned in bench/go.mod: the nats.go client
// bench/cmd/natsrec) into the test's temporary directory. The Go build cache makes it quick
// after the first time; .ci/run needs nothing more than Go.
func benchBuild(t *testing.T, name, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..", "bench")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in bench/: %v\n%s", pkg, err, b)
	}
	return out
}

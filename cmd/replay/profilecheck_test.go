package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestProfileCheckNamesEveryMistake: `replay profile check` of a profile
// file with mistakes names every one of them on its own line,
// "file:line: key.path: what" in the profile's words with "did you mean"
// (testdata/profilecheck/everypart.yaml: one or more in each part;
// keys.yaml: keys and values the YAML decoder would refuse), and exits 2
// (a usage error) before it reads the capture, which need not exist.
// go test -update rewrites testdata/profilecheck/*.golden.
func TestProfileCheckNamesEveryMistake(t *testing.T) {
	dir := filepath.Join("testdata", "profilecheck")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*.yaml: %v", dir, err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bins["replay"], "profile", "check", name, "--capture", "no-such.pcap")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("profile check %s: %v, want exit 2\n%s", name, err, out)
			}
			if strings.Contains(string(out), "no-such.pcap") || strings.Contains(string(out), "profile.") {
				t.Errorf("the capture was read, or Go's words show:\n%s", out)
			}
			got := fmt.Sprintf("exit %d\n%s", ee.ExitCode(), out)
			testproc.Golden(t, strings.TrimSuffix(path, ".yaml")+".golden", []byte(got), *update, "-update")
		})
	}
}

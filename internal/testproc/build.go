// Package testproc holds helpers for tests that run reprise's real
// binaries; imported only from _test.go files. It builds the programs once
// (Build in TestMain), starts them with their output captured (Start),
// stops them at the end of the test whatever happened (interrupt, wait,
// kill), and starts the reference relay on free loopback ports
// (StartRelay).
//
// It is not for code under test: nothing outside a _test.go file may
// import it, and it knows nothing of the protocol.
package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Options says where and how Build builds.
type Options struct {
	// Dir receives the binaries; "" makes a temporary directory that the
	// cleanup Build returns removes.
	Dir string
	// Flags go to `go build` before -o, e.g. "-race".
	Flags []string
	// CheckLeaks makes Main fail a passing run that left goroutines
	// behind (goleak.Find).
	CheckLeaks bool
	// Env is added to go build's environment, e.g. "CGO_ENABLED=0".
	Env []string
}

// Build builds the named programs into a new temporary directory and
// returns each one's path by name. A name is a directory under cmd/
// ("relay", "record", "replay") or "vrclient" for examples/vrclient. Call
// cleanup when the tests are done (it removes the directory).
func Build(names ...string) (bins map[string]string, cleanup func(), err error) {
	return BuildWith(Options{}, names...)
}

// BuildWith is Build with build flags or a directory of the caller's.
func BuildWith(o Options, names ...string) (bins map[string]string, cleanup func(), err error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, nil, err
	}
	dir, cleanup := o.Dir, func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "reprise-bin-"); err != nil {
			return nil, nil, fmt.Errorf("build: %w", err)
		}
		// Readable by all, so a test may run a binary as another user
		// (record's permission test runs it as nobody).
		if err := os.Chmod(dir, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, nil, fmt.Errorf("build: %w", err)
		}
		cleanup = func() { os.RemoveAll(dir) }
	}
	// One go build for all: the packages they share compile once, and -o
	// names a directory so each binary is named after its package.
	args := append([]string{"build"}, o.Flags...)
	args = append(args, "-o", dir+string(filepath.Separator))
	bins = make(map[string]string, len(names))
	for _, n := range names {
		args = append(args, "./"+pkgDir(n))
		bins[n] = filepath.Join(dir, n)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bins, cleanup, nil
}

// Main is a TestMain body: it builds the named programs (with o), stores
// their paths in *bins, runs the tests and removes the binaries. With
// o.CheckLeaks a passing run fails when goroutines are left over.
//
//	func TestMain(m *testing.M) { os.Exit(testproc.Main(m, &bins, testproc.Options{}, "relay")) }
func Main(m *testing.M, bins *map[string]string, o Options, names ...string) int {
	b, cleanup, err := BuildWith(o, names...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testproc:", err)
		return 1
	}
	defer cleanup()
	*bins = b
	code := m.Run()
	if code == 0 && o.CheckLeaks {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// BuildT builds the named programs into a directory of the test's (or
// o.Dir) and fails the test if they do not build; for tests that build
// only when they run (the scale runs, which want no -race).
func BuildT(t testing.TB, o Options, names ...string) map[string]string {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	bins, _, err := BuildWith(o, names...)
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

func pkgDir(name string) string {
	if name == "vrclient" {
		return "examples/vrclient"
	}
	return "cmd/" + name
}

// ModuleRoot is the directory of the go.mod governing the working
// directory (a test's package directory).
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module (go env GOMOD = %q)", mod)
	}
	return filepath.Dir(mod), nil
}

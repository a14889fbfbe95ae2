package testproc

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (.ci/run exports CI=true, as
// most CI services do). There every program and privilege a test needs is
// installed or granted, so a test that would skip for the lack of one
// fails instead: a broken install must not pass as a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// NeedTool returns the path of a program the test runs. When it is
// missing the test skips, saying which Debian package has it, or fails in
// CI (InCI), where .ci/run installs that package.
func NeedTool(t testing.TB, name, debianPkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	Unavailable(t, "%s not installed (apt-get install %s; make test installs scripts/debian-packages)", name, debianPkg)
	return ""
}

// NeedRoot skips the test unless it runs as root, or fails in CI (InCI),
// which runs as root. why says what needs the privilege.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "%s needs root (CI runs as root)", why)
	}
}

// Unavailable skips a test whose environment lacks something it needs,
// or fails it in CI (InCI), where that thing must be there.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("in CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

package testproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ReadGolden is the golden file at path, which update first rewrites
// with got (its directory made if need be). A missing file fails the
// test naming updateFlag (the package's flag that rewrites it), with got
// to see. For a test that compares in its own way; Golden compares too.
func ReadGolden(t testing.TB, path string, got []byte, update bool, updateFlag string) []byte {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test with %s to write it)\n%s", err, updateFlag, got)
	}
	return want
}

// Golden fails the test unless got is byte for byte the golden file at
// path (ReadGolden: update rewrites it first), naming the first line
// that differs and the flag that rewrites the file after an intended
// change.
func Golden(t testing.TB, path string, got []byte, update bool, updateFlag string) {
	t.Helper()
	if want := ReadGolden(t, path, got, update, updateFlag); !bytes.Equal(got, want) {
		t.Errorf("%s differs from what was produced (go test with %s after an intended change)\n%s", path, updateFlag, FirstDiff(got, want))
	}
}

// FirstDiff shows the first line where got and want differ.
func FirstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, gl, wl)
		}
	}
	return "same lines, different bytes"
}

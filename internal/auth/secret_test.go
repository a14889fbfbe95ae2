package auth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSecretSourceLoad(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	if err := os.WriteFile(private, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.WriteFile(shared, []byte("shared\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		src     SecretSource
		env     string
		want    string
		warn    string // a substring of the one warning expected, or "" for none
		wantErr string
	}{
		{"none", SecretSource{}, "", "", "", ""},
		{"flag warns", SecretSource{Flag: "s3"}, "", "s3", "readable by every local user", ""},
		{"env", SecretSource{}, "from-env", "from-env", "", ""},
		{"file", SecretSource{File: private}, "", "from-file", "", ""},
		{"file readable by others", SecretSource{File: shared}, "", "shared", "readable by others", ""},
		{"empty file", SecretSource{File: empty}, "", "", "", "empty"},
		{"missing file", SecretSource{File: filepath.Join(dir, "nope")}, "", "", "", "no such file"},
		{"two sources", SecretSource{Flag: "a"}, "b", "", "", "more than once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvSecret {
					return tt.env
				}
				return ""
			}
			got, warns, err := tt.src.Load(getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
			if tt.warn == "" && len(warns) != 0 || tt.warn != "" && !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, tt.warn) }) {
				t.Errorf("warnings %q, want %q", warns, tt.warn)
			}
		})
	}
}

package auth

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvSecret is the environment variable the relay and replay read the
// shared secret from when no flag names it.
const EnvSecret = "REPRISE_AUTH_SECRET"

// SecretSource is where the shared secret may come from, as the commands'
// flags name it. At most one source may be set.
type SecretSource struct {
	// Flag is --auth-secret's value: on the command line, so readable by
	// every local user through /proc/PID/cmdline and ps.
	Flag string
	// File is --auth-secret-file: a file holding the secret (one trailing
	// newline is not part of it).
	File string
}

// Load returns the secret from the flag, the file or getenv(EnvSecret),
// whichever is set (nil when none is), and warnings to print: one when the
// secret came on the command line, one when its file is readable by
// others.
func (s SecretSource) Load(getenv func(string) string) (secret []byte, warnings []string, err error) {
	env := getenv(EnvSecret)
	set := 0
	for _, v := range []string{s.Flag, s.File, env} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return nil, nil, errors.New("the auth secret is given more than once: use one of --auth-secret-file, $" + EnvSecret + " or --auth-secret")
	}
	switch {
	case s.Flag != "":
		return []byte(s.Flag), []string{"--auth-secret on the command line is readable by every local user (/proc/PID/cmdline, ps): use --auth-secret-file or $" + EnvSecret}, nil
	case env != "":
		return []byte(env), nil, nil
	case s.File != "":
		return readSecretFile(s.File)
	}
	return nil, nil, nil
}

func readSecretFile(path string) ([]byte, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--auth-secret-file: %w", err)
	}
	secret := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if secret == "" {
		return nil, nil, fmt.Errorf("--auth-secret-file %s: empty", path)
	}
	var warnings []string
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warnings = append(warnings, fmt.Sprintf("--auth-secret-file %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm()))
	}
	return []byte(secret), warnings, nil
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// startMosquittoAuth starts mosquitto with two listeners: one open to
// anyone (to record through) and one that only lets in the users of a
// password file made with mosquitto_passwd, where alice's password is
// "right".
func startMosquittoAuth(t *testing.T) (open, auth int) {
	t.Helper()
	bin := needTool(t, "mosquitto")
	passwd := needTool(t, "mosquitto_passwd")
	dir := t.TempDir()
	pwfile := filepath.Join(dir, "passwd")
	if b, err := exec.Command(passwd, "-c", "-b", pwfile, "alice", "right").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, b)
	}
	// mosquitto started as root reads the password file as the user
	// mosquitto, after dropping its privileges: the test's private
	// directories must let it in.
	for _, p := range []string{filepath.Dir(dir), dir, pwfile} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, ports := startMosquittoConf(t, bin, 2, func(p []int) string {
		return fmt.Sprintf(`per_listener_settings true
listener %d 127.0.0.1
allow_anonymous true
listener %d 127.0.0.1
allow_anonymous false
password_file %s
persistence false
`, p[0], p[1], pwfile)
	})
	open, auth = ports[0], ports[1]
	return open, auth
}

// TestMQTTRefusedByReason replays sessions recorded with a user name and
// password against a mosquitto listener with a password file: the right
// password logs every client in; a wrong one is refused by mosquitto's
// CONNACK, counted by its reason. mosquitto 2.0 answers a wrong password
// not_authorized in both versions (3.1.1 return code 5, MQTT 5 reason
// code 0x87), not bad_username_or_password (4, 0x86).
func TestMQTTRefusedByReason(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	open, auth := startMosquittoAuth(t)
	py := python(t)
	client := filepath.Join("testdata", "mqttclient.py")
	for _, tc := range []struct {
		name, password, version string
		refused                 string // "": every login succeeds
	}{
		{"right password", "right", "v311", ""},
		{"wrong password", "wrong", "v311", "not_authorized"},
		{"wrong password v5", "wrong", "v5", "not_authorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", open), py, client, "LISTEN_PORT", "tcp", "3", "alice", tc.password, tc.version)
			const clients = 20
			res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", auth),
				"--clients", fmt.Sprint(clients), "--login-interval", "2ms", "--after-logins", "500ms")
			s := res.sum
			if tc.refused == "" {
				mustOK(t, res)
				if s.LoginsSucceeded != clients || len(s.LoginsFailed) != 0 {
					t.Fatalf("logins %d, refused %v\n%s%s", s.LoginsSucceeded, s.LoginsFailed, res.stdout, res.stderr)
				}
				return
			}
			if s.LoginsFailed[tc.refused] != clients || s.LoginsSucceeded != 0 || len(s.LoginsFailed) != 1 {
				t.Fatalf("refused logins by reason %v, succeeded %d, want %d %s (exit %d)\n%s%s",
					s.LoginsFailed, s.LoginsSucceeded, clients, tc.refused, res.code, res.stdout, res.stderr)
			}
		})
	}
}

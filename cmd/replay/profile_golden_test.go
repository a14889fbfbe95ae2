package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
)

var update = flag.Bool("update", false, "rewrite testdata/profiles/*.golden and testdata/profilecheck/*.golden")

// TestInspectProfileGolden: `replay inspect --profile` on a recording of
// each shipped profile (real paho-mqtt and RESP3 sessions with mosquitto
// and redis-server, socket.io-client and nats.go sessions with a
// socket.io app and nats-server, recorded with record proxy; the example file
// profile's session written here) against testdata/profiles/*.golden.
// make golden (go test -update) rewrites them.
func TestInspectProfileGolden(t *testing.T) {
	acme := writeAcmeCapture(t)
	for _, tc := range []struct{ name, profile, capture string }{
		{"mqtt", "mqtt", "testdata/profiles/mqtt.pcap"},
		{"mqtt-ws", "mqtt-ws", "testdata/profiles/mqtt-ws.pcap"},
		{"redis", "redis", "testdata/profiles/redis.pcap"},
		// socket.io-client 4.8.1 with the room app (testdata/socketio),
		// pingInterval 300 ms; nats.go 1.55.0 (bench/cmd/natsrec) with
		// nats-server 2.15.2, ping_interval 300ms.
		{"socketio", "socketio", "testdata/profiles/socketio.pcap"},
		{"nats", "nats", "testdata/profiles/nats.pcap"},
		{"acme-binary", "../../examples/profiles/acme-binary.yaml", acme},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exec.Command(bins["replay"], "inspect", "--profile", tc.profile, tc.capture).CombinedOutput()
			if err != nil {
				t.Fatalf("inspect: %v\n%s", err, got)
			}
			golden := filepath.Join("testdata", "profiles", tc.name+".golden")
			if want := testproc.ReadGolden(t, golden, got, *update, "-update"); !bytes.Equal(got, want) {
				t.Errorf("replay inspect --profile %s differs from %s:\n%s\nwant:\n%s", tc.profile, golden, got, want)
			}
		})
	}
}

// writeAcmeCapture writes a session of the example profile's made-up
// protocol at fixed times: HELLO, WELCOME with a token, chats carrying it
// (one delivered back), a ping and BYE.
func writeAcmeCapture(t *testing.T) string {
	t.Helper()
	tok := []byte("T0K3N-42")
	return writeTCPFlows(t, "acme.pcap", 9000, tcpFlow{end: time.Second, msgs: []tcpMsg{
		{0, true, acmeMsg(0x01, []byte("alice001"))},
		{ms(2), false, acmeMsg(0x81, tok)},
		{ms(100), true, acmeMsg(0x02, tok, []byte("hello 00"), make([]byte, 8))},
		{ms(101), false, acmeMsg(0x83, []byte("hello 00"), make([]byte, 8))},
		{ms(200), true, acmeMsg(0x02, tok, []byte("hello 01"), make([]byte, 8))},
		{ms(300), true, acmeMsg(0x03, tok)},
		{ms(400), true, acmeMsg(0x02, tok, []byte("hello 02"), make([]byte, 8))},
		{ms(500), true, acmeMsg(0x04, tok)},
	}})
}

// TestProfileShow: `replay profile show NAME` prints a built-in profile's
// file, which loads as a profile file of its own and reads its recording
// as the built-in does (the golden answer of TestInspectProfileGolden);
// reprise, Go code, has none.
func TestProfileShow(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"mqtt", "mqtt-ws", "redis", "socketio", "nats"} {
		out, err := exec.Command(bins["replay"], "profile", "show", name).Output()
		if err != nil {
			t.Fatalf("profile show %s: %v", name, err)
		}
		path := filepath.Join(t.TempDir(), "mine.yaml")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Lookup(path)
		if err != nil || p.Name != name {
			t.Fatalf("the printed %s does not load as a file: %v", name, err)
		}
		got, err := exec.Command(bins["replay"], "inspect", "--profile", path, filepath.Join("testdata", "profiles", name+".pcap")).CombinedOutput()
		if err != nil {
			t.Fatalf("inspect --profile (the printed %s): %v\n%s", name, err, got)
		}
		want, err := os.ReadFile(filepath.Join("testdata", "profiles", name+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("the printed %s reads its recording otherwise than the built-in:\n%s\nwant:\n%s", name, got, want)
		}
	}
	out, err := exec.Command(bins["replay"], "profile", "show", "reprise").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "Go code") {
		t.Fatalf("profile show reprise: %v\n%s", err, out)
	}
}

package main

// A real server no one here wrote behind an HTTP lobby: the recorded
// client (paho-mqtt, testdata/mqttclient.py with $MQTT_LOBBY) asks the
// app's own lobby, written here, where to play; the lobby answers only
// the broker's port ({"game":{"port":N}}: the broker is on the lobby's
// host, as many matchmakers answer), and the client speaks MQTT to
// Debian's mosquitto there. Recorded by `record live` on lo, replayed
// with the built-in mqtt profile and --flows all, nothing written by
// hand, against a lobby that hands out another broker's port.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// portLobby is the app's matchmaker: GET /v1/match answers the game
// server's port alone; n counts its answers.
type portLobby struct {
	mu   sync.Mutex
	port int
	n    int
}

func startPortLobby(t *testing.T) (*portLobby, string) {
	t.Helper()
	l := &portLobby{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/match", func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.n++
		port := l.port
		l.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"mode":%q,"game":{"port":%d}}`, r.URL.Query().Get("mode"), port)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

// set makes the lobby answer port from now on and zeroes its count.
func (l *portLobby) set(port int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.port, l.n = port, 0
}

func (l *portLobby) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// startBroker starts a mosquitto of its own (one MQTT listener, $SYS
// every second) and returns its port and process.
func startBroker(t *testing.T) (int, *testproc.Proc) {
	t.Helper()
	b, ports := startMosquittoConf(t, needTool(t, "mosquitto"), 1, func(p []int) string {
		return fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nmax_connections -1\nsys_interval 1\npersistence false\n", p[0])
	})
	port, p := ports[0], b.p
	return port, p
}

// TestLobbyThenMosquitto: inspect proposes the port link (the lobby's
// answer at $.game.port is where the MQTT flow connected) and --flows all
// with the built-in mqtt profile plays each client as the recorded one
// did: its own GET to the lobby, then MQTT to the port its own answer
// named, on the lobby's host (connect ":${port}"). The replay's lobby
// names a second mosquitto on another port (the recorded one is gone):
// every client got there, and mosquitto's own $SYS counters equal the
// fleet's: PUBLISH received = the fleet's sent, PUBLISH sent (less the
// monitor's own) = the fleet's received. The address link from a lobby
// that answers only a port (connect ":${port}", --target's host) runs
// end to end here.
func TestLobbyThenMosquitto(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	const clients, publishes = 20, 20
	py := python(t)
	lobby, lobbyAddr := startPortLobby(t)
	recPort, recBroker := startBroker(t)
	lobby.set(recPort)
	capPath := recordLive(t, lobbyAddr, fmt.Sprintf("127.0.0.1:%d", recPort), func() {
		cmd := exec.Command(py, filepath.Join("testdata", "mqttclient.py"), "0", "tcp", strconv.Itoa(publishes))
		cmd.Env = append(os.Environ(), "MQTT_LOBBY=http://"+lobbyAddr+"/v1/match?mode=pvp")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("recorded client: %v\n%s", err, b)
		}
	})
	if err := recBroker.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("the recorded broker: %v", err)
	}
	insp := inspectProfile(t, "mqtt", capPath)
	// docs/profiles.md's inspect line, with this recording's port.
	doc, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`(?m)^  link: the value "(\d+)" answered in flow 0's response body \(GET /v1/match\?mode=pvp\).*$`).FindSubmatch(doc)
	if link == nil {
		t.Fatal("docs/profiles.md shows no lobby port link")
	}
	if want := strings.ReplaceAll(string(link[0]), `"`+string(link[1])+`"`, `"`+strconv.Itoa(recPort)+`"`); !strings.Contains(insp, want) {
		t.Fatalf("inspect does not propose the port link as docs/profiles.md shows it:\n%s\nwant\n%s", insp, want)
	}

	port, _ := startBroker(t)
	lobby.set(port)
	mon := startSysMonitor(t, port)
	// From a settled start: the monitor's own $SYS messages count as
	// sent, and whether a tick's last ones are in its count depends on
	// their order; a difference of two settled readings does not.
	received0, sent0, own0 := mon.settled(t)
	// No --loop: each client plays the recorded session once (its 20
	// PUBLISH 50 ms apart), then heartbeats; the run lasts long past the
	// last PUBLISH, so every delivery is in before the drain.
	res := replay(t, "--profile", "mqtt", "--capture", capPath, "--flows", "all", "--target", lobbyAddr,
		"--clients", strconv.Itoa(clients), "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "4s", "--drain-deliveries", "30s")
	mustOK(t, res)
	received1, sent1, own1 := mon.settled(t)
	received, toFleet := received1-received0, sent1-sent0-float64(own1-own0)
	s := res.sum
	if s.LoginsSucceeded != clients || len(s.LoginsFailed) != 0 || lobby.answered() != clients || s.FramesSent["connect"] != clients {
		t.Fatalf("logins %d failed %v, CONNECT sent %d; the lobby answered %d; want %d each\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.FramesSent["connect"], lobby.answered(), clients, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stdout+res.stderr, `connect ":${port}"`) {
		t.Errorf("the notes do not say where the MQTT connection goes:\n%s%s", res.stdout, res.stderr)
	}
	if st := s.HTTPSteps; len(st) != 1 || st[0].Step != "v1" || st[0].Answered != clients {
		t.Errorf("http steps %+v; want v1 (the lobby) answered %d", st, clients)
	}
	if s.MessagesSent != clients*publishes || received != float64(s.MessagesSent) || s.MessagesReceived == 0 || toFleet != float64(s.MessagesReceived) {
		t.Errorf("the fleet sent %d PUBLISH (want %d) and received %d; mosquitto received %v and sent %v to the fleet", s.MessagesSent, clients*publishes, s.MessagesReceived, received, toFleet)
	}
	t.Logf("%d clients: fleet sent %d received %d; mosquitto received %v, sent the fleet %v", clients, s.MessagesSent, s.MessagesReceived, received, toFleet)
}

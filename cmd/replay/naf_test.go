package main

// networked-aframe, a real server no one here wrote: the socket.io server
// the networked-aframe package ships (server/socketio-server.js, run as
// it is by Debian's nodejs; npm packages locked in testdata/naf), which
// puts the joiners of a room into instances of 50 in join order. A
// client running NAF's own socket.io adapter is recorded through `record
// proxy` and replayed with testdata/naf/naf.yaml, whose rooms say the
// server assigns the instance; testdata/naf/count.js counts, inside the
// server's process, each instance's joins, broadcasts and deliveries.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/testproc"
)

var nafDir = filepath.Join("testdata", "naf")

// nafInstance is count.js's count of one instance the server made.
type nafInstance struct {
	First      string `json:"first"` // its first joiner's socket id
	Joins      int    `json:"joins"`
	Broadcasts int64  `json:"broadcasts"`
	Delivered  int64  `json:"delivered"`
}

type nafStats struct {
	Connected int                    `json:"connected"`
	Instances map[string]nafInstance `json:"instances"`
}

// startNAF starts networked-aframe's socket.io server with count.js and
// returns its port and count.js's.
func startNAF(t *testing.T, node string) (port, stats int) {
	t.Helper()
	ports := startServer(t, 2, func(p []int) *exec.Cmd {
		cmd := exec.Command(node, "-r", "./count.js", filepath.Join("node_modules", "networked-aframe", "server", "socketio-server.js"))
		cmd.Dir = nafDir
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(p[0]), "STATS_PORT="+strconv.Itoa(p[1]))
		return cmd
	})
	return ports[0], ports[1]
}

// nafSettled waits until the server holds no connection and returns
// count.js's counts.
func nafSettled(t *testing.T, stats int) nafStats {
	t.Helper()
	deadline := time.Now().Add(testproc.Patience(t))
	for {
		var s nafStats
		getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/stats", stats), &s)
		if s.Connected == 0 || time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nafReset(t *testing.T, stats int) {
	t.Helper()
	var ok string
	if err := fetchText(fmt.Sprintf("http://127.0.0.1:%d/reset", stats), &ok); err != nil {
		t.Fatal(err)
	}
}

// TestNAF: 120 clients ask for room "lobby" and the server puts them in
// lobby (50), lobby--2 (50) and lobby--3 (20) in the order it saw their
// joins. The fleet learns each client's instance from the occupant
// list the server sends it (its first occupant names it), gives each
// instance its 2 of the 6 senders, and counts per instance exactly the
// joins, broadcasts and deliveries the server counted; every delivery
// carries the latency stamp the fleet added as a new JSON field (NAF's
// updates have no spare one), so the latency samples equal the
// deliveries. With one sender for 60 clients the second instance holds
// listeners and no sender: the fleet says so, and the server delivered
// nothing there.
func TestNAF(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	npmCIIn(t, nafDir)
	port, stats := startNAF(t, node)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	capPath := recordThrough(t, target, node, filepath.Join(nafDir, "client.js"), "LISTEN_PORT", strconv.Itoa(port), "lobby", "20")
	prof := filepath.Join(nafDir, "naf.yaml")
	docExampleIs(t, "# networked-aframe over socket.io", prof)
	insp := inspectProfile(t, prof, capPath)
	for _, want := range []string{`room: "lobby"`, "broadcast 20", "rooms: assigned by the server: the recorded client was put in instance"} {
		if !strings.Contains(insp, want) {
			t.Fatalf("inspect --profile naf.yaml lacks %q:\n%s", want, insp)
		}
	}

	t.Run("instances", func(t *testing.T) {
		nafReset(t, stats)
		res := replay(t, "--profile", prof, "--capture", capPath, "--target", target,
			"--clients", "120", "--senders", "6", "--room-size", "50", "--login-interval", "5ms", "--login-timeout", "30s",
			"--after-logins", "4s", "--drain-deliveries", "30s")
		mustOK(t, res)
		s := res.sum
		srv := nafSettled(t, stats)
		if s.LoginsSucceeded != 120 || len(s.Disconnects) != 0 {
			t.Fatalf("logins %d failed %v disconnects %v\n%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, res.stdout)
		}
		checkNAFInstances(t, s, srv, map[string]int{"lobby": 50, "lobby--2": 50, "lobby--3": 20})
		for _, in := range s.Instances {
			if in.Senders != 2 {
				t.Errorf("instance %s: %d senders, want 2 (6 over 3)", in.Name, in.Senders)
			}
		}
		if strings.Contains(strings.Join(s.Warnings, "\n"), "no sender") {
			t.Errorf("a warning of an instance with no sender: %q", s.Warnings)
		}
		if s.MessagesSent != 120 || s.Deliveries.Lost != 0 || s.Deliveries.Received != s.MessagesReceived {
			t.Errorf("sent %d (want 6 x 20), deliveries %+v, received %d", s.MessagesSent, s.Deliveries, s.MessagesReceived)
		}
		h, err := hdrhistogram.Decode([]byte(s.Histograms.LatencyUS))
		if err != nil {
			t.Fatal(err)
		}
		if h.TotalCount() == 0 || h.TotalCount() != s.MessagesReceived {
			t.Errorf("%d latency samples for %d stamped deliveries (latency.add: every delivery carries the added ts)", h.TotalCount(), s.MessagesReceived)
		}
		t.Logf("naf: instances %+v; server %+v; latency samples %d, p50 %.2f p99 %.2f ms; took %v",
			s.Instances, srv.Instances, h.TotalCount(), s.LatencyMS.P50, s.LatencyMS.P99, res.took.Round(time.Millisecond))
	})

	t.Run("silent instance", func(t *testing.T) {
		nafReset(t, stats)
		res := replay(t, "--profile", prof, "--capture", capPath, "--target", target,
			"--clients", "60", "--senders", "1", "--room-size", "50", "--login-interval", "5ms", "--login-timeout", "30s",
			"--after-logins", "3s", "--drain-deliveries", "30s")
		s := res.sum
		srv := nafSettled(t, stats)
		if s.LoginsSucceeded != 60 {
			t.Fatalf("logins %d failed %v (exit %d)\n%s%s", s.LoginsSucceeded, s.LoginsFailed, res.code, res.stdout, res.stderr)
		}
		checkNAFInstances(t, s, srv, map[string]int{"lobby": 50, "lobby--2": 10})
		const want = "WARNING: 1 of 2 room instances the server assigned hold listeners but no sender"
		if !strings.Contains(res.stdout, want) || !strings.Contains(strings.Join(s.Warnings, "\n"), want) {
			t.Errorf("no %q in the output or the summary's warnings %q:\n%s", want, s.Warnings, res.stdout)
		}
		if in := srv.Instances["lobby--2"]; in.Broadcasts != 0 || in.Delivered != 0 {
			t.Errorf("the server's lobby--2: %+v, want no broadcast", in)
		}
	})
}

// checkNAFInstances holds the fleet's instances to the server's: the
// same instances (each named by its first joiner), each with the
// server's joins, broadcasts and deliveries, of the sizes want says.
func checkNAFInstances(t *testing.T, s fleet.Summary, srv nafStats, want map[string]int) {
	t.Helper()
	if len(s.Instances) != len(want) || len(srv.Instances) != len(want) {
		t.Fatalf("the fleet learnt %d instances %+v, the server made %d %+v; want %d", len(s.Instances), s.Instances, len(srv.Instances), srv.Instances, len(want))
	}
	byFirst := map[string]string{}
	for name, in := range srv.Instances {
		byFirst[in.First] = name
	}
	for _, in := range s.Instances {
		name, ok := byFirst[in.Name]
		if !ok {
			t.Errorf("the fleet's instance %q is no instance's first joiner on the server %+v", in.Name, srv.Instances)
			continue
		}
		sv := srv.Instances[name]
		if in.Clients != sv.Joins || in.Clients != want[name] || in.Sent != sv.Broadcasts || in.Received != sv.Delivered {
			t.Errorf("instance %s: the fleet's %+v, the server's %+v; want %d clients and equal counts", name, in, sv, want[name])
		}
	}
}

package main

// Colyseus 0.16, a real server no one here wrote: testdata/colyseus
// (@colyseus/core with @colyseus/ws-transport; the client colyseus.js),
// run by Debian's nodejs. A colyseus.js session is recorded through
// `record proxy` (the matchmaking POST, then the room's socket with the
// seat in its path and query) and replayed with the profile
// testdata/colyseus/chat.yaml: no shim, each client reserves its own seat
// in the profile's HTTP step.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var colDir = filepath.Join("testdata", "colyseus")

type colStats struct {
	Rooms       int   `json:"rooms"`
	Connected   int   `json:"connected"`
	Peak        int   `json:"peak"`
	Joins       int   `json:"joins"`
	Leaves      int   `json:"leaves"`
	Messages    int64 `json:"messages"`
	Delivered   int64 `json:"delivered"`
	Patches     int64 `json:"patches"`
	PatchesSent int64 `json:"patchesSent"`
}

// TestColyseus: every seat reserved by the fleet's own HTTP step, the
// profile's (50 clients) and then, with --flows all and no step written,
// the recording's own POST (200 clients): each time the server joined
// every client and counted as many chat messages as the fleet sent, and
// the chats it passed on plus the state patches it sent to joined
// clients are exactly what the fleet received.
func TestColyseus(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	npmCIIn(t, colDir)
	port := startServer(t, 1, func(p []int) *exec.Cmd {
		return exec.Command(node, filepath.Join(colDir, "server.js"), strconv.Itoa(p[0]))
	})[0]
	target := fmt.Sprintf("127.0.0.1:%d", port)
	capPath := recordThrough(t, target, node, filepath.Join(colDir, "client.js"), "LISTEN_PORT", "rec-user-01", "20")
	prof := filepath.Join(colDir, "chat.yaml")
	docExampleIs(t, "# Colyseus 0.16", prof)
	insp := inspectProfile(t, prof, capPath)
	_, loop := socketFlow(t, insp, "GET /")
	for _, want := range []string{"http: POST /matchmake/joinOrCreate/chat -> 200 (application/json", "at $.sessionId is sent in flow 1's upgrade query sessionId", "at $.room.roomId is sent in flow 1's upgrade path segment 2", "note: flows 0, 1 are one client's (host 127.0.0.1"} {
		if !strings.Contains(insp, want) {
			t.Errorf("inspect lacks %q:\n%s", want, insp)
		}
	}
	if !strings.Contains(insp, "data 20, join_ack 1") {
		t.Fatalf("inspect:\n%s", insp)
	}
	// The profile's own http step: 50 clients in one room.
	colyseusRun(t, target, 50, "--profile", prof, "--capture", capPath, "--loop", loop)
	// The server picks the room: each client learns it from its seat.
	colyseusRooms(t, target, capPath, prof, loop)
	// --flows all with no http step written: the recording's POST is
	// each client's step, its answer's seat in the upgrade's path and query.
	res := colyseusRun(t, target, 200, "--profile", withoutSteps(t, prof), "--capture", capPath, "--flows", "all", "--loop", loop)
	for _, want := range []string{"flows 0, 1 are one client's: each client makes the recorded requests as http steps matchmake (POST /matchmake/joinOrCreate/chat, takes", "sessionid at $.sessionId", "--flows all: replaying flows 1;"} {
		if !strings.Contains(res.stdout+res.stderr, want) {
			t.Errorf("the run does not say %q:\n%s%s", want, res.stdout, res.stderr)
		}
	}
	if len(res.sum.Flows) != 1 || res.sum.Flows[0].Flow != 1 || res.sum.Flows[0].Clients != 200 {
		t.Errorf("flows played: %+v; want flow 1 by all 200 clients", res.sum.Flows)
	}
	if st := res.sum.HTTPSteps; len(st) != 1 || st[0].Step != "matchmake" || st[0].Answered != 200 {
		t.Errorf("http step times %+v; want matchmake answered 200", st)
	}
}

// colyseusRun replays clients (10 senders, rooms of 50 as the server
// fills them) for 4 s after every login has its result, however long a
// loaded host makes the ramp, and checks the server's counts against the fleet's: it
// joined every client, got every message the fleet sent, and the chats
// it passed on plus the state patches it sent are what the fleet got.
func colyseusRun(t *testing.T, target string, clients int, args ...string) result {
	t.Helper()
	var ok string
	if err := fetchText(fmt.Sprintf("http://%s/reset", target), &ok); err != nil {
		t.Fatal(err)
	}
	res := replay(t, append(args, "--target", target, "--clients", strconv.Itoa(clients), "--senders", "10", "--room-size", "50",
		"--login-interval", "5ms", "--login-timeout", "30s", "--after-logins", "4s", "--drain-deliveries", "20s")...)
	mustOK(t, res)
	s := res.sum
	var app colStats
	getJSON(t, fmt.Sprintf("http://%s/stats", target), &app)
	if s.LoginsSucceeded != int64(clients) || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 {
		t.Fatalf("logins %d failed %v disconnects %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, res.stdout, res.stderr)
	}
	if rooms := (clients + 49) / 50; app.Joins != clients || app.Rooms != rooms || app.Peak != clients {
		t.Errorf("the server joined %d clients in %d rooms, %d at once; want %d in %d, %d", app.Joins, app.Rooms, app.Peak, clients, rooms, clients)
	}
	if app.Messages != s.MessagesSent || app.Delivered+app.PatchesSent != s.MessagesReceived {
		t.Errorf("the server got %d messages, passed on %d and sent %d patches; the fleet sent %d and received %d", app.Messages, app.Delivered, app.PatchesSent, s.MessagesSent, s.MessagesReceived)
	}
	if s.LatencyMS.P50 <= 0 {
		t.Errorf("no latency: %+v", s.LatencyMS)
	}
	t.Logf("colyseus %d clients: sent %d received %d; server joins %d messages %d delivered %d patches %d (%d sent) in %d rooms; latency p50 %.2f ms",
		clients, s.MessagesSent, s.MessagesReceived, app.Joins, app.Messages, app.Delivered, app.Patches, app.PatchesSent, app.Rooms, s.LatencyMS.P50)
	return res
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// colRoom is the Colyseus test server's count of one room.
type colRoom struct {
	Joins     int   `json:"joins"`
	Messages  int64 `json:"messages"`
	Delivered int64 `json:"delivered"`
}

// colyseusRooms: Colyseus's matchmaker, not the client, picks the room
// (joinOrCreate fills a room of 50, then makes another) and answers its
// roomId; with rooms.instance naming that HTTP step value, 120 clients
// learn their rooms from the answers, each room gets its senders, and
// each room's joins, messages and deliveries on the server equal the
// fleet's for that instance. The profile is chat.yaml counting chats
// only (patches are not casts) as passed on to the room's others.
func colyseusRooms(t *testing.T, target, capPath, prof, loop string) {
	t.Helper()
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(b), "delivery: [data, patch]\n", "delivery: [data]\nfanout: others\nrooms: {assigned_by: server, instance: {correlation: room_id}}\n", 1)
	if doc == string(b) {
		t.Fatalf("chat.yaml has no delivery line to replace:\n%s", b)
	}
	path := filepath.Join(t.TempDir(), "chat-rooms.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var ok string
	if err := fetchText(fmt.Sprintf("http://%s/reset", target), &ok); err != nil {
		t.Fatal(err)
	}
	res := replay(t, "--profile", path, "--capture", capPath, "--loop", loop, "--target", target, "--clients", "120", "--senders", "6", "--room-size", "50",
		"--login-interval", "5ms", "--login-timeout", "30s", "--after-logins", "4s", "--drain-deliveries", "20s")
	mustOK(t, res)
	s := res.sum
	var app struct {
		ByRoom map[string]colRoom `json:"byRoom"`
	}
	getJSON(t, fmt.Sprintf("http://%s/stats", target), &app)
	if s.LoginsSucceeded != 120 || len(s.Disconnects) != 0 {
		t.Fatalf("logins %d failed %v disconnects %v\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, res.stdout, res.stderr)
	}
	if len(s.Instances) != len(app.ByRoom) || len(s.Instances) < 3 {
		t.Fatalf("the fleet learnt instances %+v, the server made rooms %+v; want the same, at least 3 for 120 clients in rooms of 50", s.Instances, app.ByRoom)
	}
	senders := 0
	for _, in := range s.Instances {
		r, ok := app.ByRoom[in.Name]
		if !ok || in.Clients != r.Joins || in.Sent != r.Messages || in.Received != r.Delivered {
			t.Errorf("instance %s: the fleet's %+v, the server's room %+v (found %v); want equal counts", in.Name, in, r, ok)
		}
		senders += in.Senders
	}
	if senders != 6 || s.Deliveries.Lost != 0 || s.Deliveries.Received != s.MessagesReceived {
		t.Errorf("%d senders (want 6), deliveries %+v, received %d", senders, s.Deliveries, s.MessagesReceived)
	}
	t.Logf("colyseus rooms: the fleet's instances %+v; the server's rooms %+v", s.Instances, app.ByRoom)
}

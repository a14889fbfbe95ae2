package main

// permessage-deflate (RFC 7692) against a real server no one here wrote:
// testdata/wschat/server.js, a room chat on the node ws library with
// compression on (the server keeping its context, ws's default), recorded
// from a ws client that negotiated it through `record proxy`.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWSDeflate: inspect inflates the recording (the kinds are the
// plaintext's, the compression is named); 200 clients replay it with the
// recorded offer, every connection compressed both ways, and the server's
// counts equal the fleet's exactly; --ws-deflate off strips the offer
// (the server compresses nothing) and the counts still match.
func TestWSDeflate(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	port, _ := startWSChat(t, node, "deflate", nil)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	capPath := recordThrough(t, target, node, filepath.Join(wsChatDir, "client.js"), "LISTEN_PORT", "rec-user-01", "lobby", "20", "deflate")
	prof := filepath.Join(wsChatDir, "chat.yaml")
	docExampleIs(t, "# The room chat of server.js", prof)
	insp := inspectProfile(t, prof, capPath)
	for _, want := range []string{"compression: permessage-deflate negotiated; messages inflated", "chat 20, join 1", `user id: "rec-user-01"`, "server answer: accepted"} {
		if !strings.Contains(insp, want) {
			t.Fatalf("inspect lacks %q:\n%s", want, insp)
		}
	}
	loop := suggestedLoop.FindStringSubmatch(insp)
	if loop == nil {
		t.Fatalf("inspect suggests no loop:\n%s", insp)
	}
	for _, tc := range []struct {
		name     string
		clients  int
		args     []string
		deflated int
	}{
		{"recorded offer", 200, nil, 200},
		{"off", 20, []string{"--ws-deflate", "off"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ok string
			if err := fetchText(fmt.Sprintf("http://%s/reset", target), &ok); err != nil {
				t.Fatal(err)
			}
			res := replay(t, append([]string{"--profile", prof, "--capture", capPath, "--target", target,
				"--clients", strconv.Itoa(tc.clients), "--senders", "10", "--room-size", "50", "--loop", loop[1],
				"--login-interval", "5ms", "--login-timeout", "30s", "--after-logins", "2s", "--drain-deliveries", "20s"}, tc.args...)...)
			mustOK(t, res)
			s, app := res.sum, wsChatSettled(t, port)
			if s.LoginsSucceeded != int64(tc.clients) || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 || s.MessagesReceived == 0 {
				t.Fatalf("logins %d failed %v disconnects %v sent %d received %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, s.MessagesReceived, res.stdout, res.stderr)
			}
			if app.Deflated != tc.deflated || app.Joins != tc.clients || app.Users != tc.clients || app.Errors != 0 {
				t.Errorf("the server compressed %d connections of %d joins (%d users, %d errors); want %d", app.Deflated, app.Joins, app.Users, app.Errors, tc.deflated)
			}
			if app.Chats != s.MessagesSent || app.Delivered != s.MessagesReceived {
				t.Errorf("the server got %d chats and delivered %d; the fleet sent %d and received %d", app.Chats, app.Delivered, s.MessagesSent, s.MessagesReceived)
			}
			if s.LatencyMS.P50 <= 0 {
				t.Errorf("no latency: %+v", s.LatencyMS)
			}
			if s.ClientsPolled != int64(tc.clients) {
				t.Errorf("%d of the %d WebSocket clients read by the schedulers' pollers", s.ClientsPolled, tc.clients)
			}
			t.Logf("%s: sent %d received %d, server chats %d delivered %d, deflated %d", tc.name, s.MessagesSent, s.MessagesReceived, app.Chats, app.Delivered, app.Deflated)
		})
	}
}

// docExampleIs checks that docs/profiles.md shows the file at path as the
// YAML example starting with prefix, as it is.
func docExampleIs(t *testing.T, prefix, path string) {
	t.Helper()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if block := docExample(t, prefix); block != string(file) {
		t.Fatalf("docs/profiles.md's example %q is not %s:\n%s", prefix, path, block)
	}
}

// docExample is docs/profiles.md's YAML example starting with prefix.
func docExample(t *testing.T, prefix string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(doc), "```yaml\n")[1:] {
		if block, _, _ := strings.Cut(part, "```"); strings.HasPrefix(block, prefix) {
			return block
		}
	}
	t.Fatalf("docs/profiles.md has no example starting %q", prefix)
	return ""
}

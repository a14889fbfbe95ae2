package main

// A lobby, then the game server it names: the recorded client asks the
// Nakama-kind server's lobby (GET /v2/lobby) where to play, takes a
// token over HTTP and opens its socket on the game server the lobby
// answered, another listener. Recorded by `record live` on lo (the
// client leaves the first server for the second, which no proxy in
// between would see), replayed with --flows all and no step or connect
// written: the loader takes the address from the lobby's answer.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// recordLobbyClient records, with record live on lo, the client that
// asks api's lobby for the game server, then plays there.
func recordLobbyClient(t *testing.T, api, game string) string {
	t.Helper()
	testproc.NeedRoot(t, "live capture")
	out := filepath.Join(t.TempDir(), "lobby.pcap")
	_, apiPort, _ := net.SplitHostPort(api)
	_, gamePort, _ := net.SplitHostPort(game)
	rec := testproc.StartCombined(t, bins["record"], "live", "--iface", "lo", "--out", out,
		"--filter", fmt.Sprintf("tcp port %s or tcp port %s", apiPort, gamePort))
	waitOutput(t, rec, "capturing on lo")
	resp, err := http.Get("http://" + api + "/v2/lobby")
	if err != nil {
		t.Fatal(err)
	}
	var lobby struct{ Match struct{ Addr string } }
	err = json.NewDecoder(resp.Body).Decode(&lobby)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || lobby.Match.Addr != game {
		t.Fatalf("lobby answered %+v, %v; want %s", lobby, err, game)
	}
	if err := nakamaClientAt(api, lobby.Match.Addr, "rec-user-01", "hall", 6); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the last packets into the capture
	if err := rec.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record live: %v\n%s", err, rec.Stdout.String())
	}
	return out
}

// TestLobbyThenGame: the lobby's answer names where the recorded client
// then connected; inspect proposes that link and --flows all plays the
// lobby's request, the token's, then the socket where each client's own
// lobby answer said: the server's counts equal the fleet's, every
// socket on the game server. A lobby with no match, or one naming a
// server that is not there, fails each client once with its reason.
func TestLobbyThenGame(t *testing.T) {
	srv, api := startNakama(t)
	capPath := recordLobbyClient(t, api, srv.gameAddr)
	data, err := os.ReadFile(filepath.Join("testdata", "nakama", "chat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// No step and no connect written: the recording says both.
	bare := regexp.MustCompile(`(?s)\nhttp:.*?\nkinds:`).ReplaceAllString(string(data), "\nkinds:")
	prof := filepath.Join(t.TempDir(), "no-steps.yaml")
	if err := os.WriteFile(prof, []byte(bare), 0o644); err != nil {
		t.Fatal(err)
	}
	insp := inspectProfile(t, prof, capPath)
	if !regexp.MustCompile(`link: the value "` + regexp.QuoteMeta(srv.gameAddr) + `" answered in flow \d's response body \(GET /v2/lobby\) at \$\.match\.addr is where flow \d connected \(its address\); take: \{name: addr, json: \$\.match\.addr, recorded: \{regexp: '[^']+'\}\}; connect: "\$\{addr\}"`).MatchString(insp) {
		t.Fatalf("inspect proposes no address link:\n%s", insp)
	}
	_, loop := socketFlow(t, insp, "GET /ws?")
	run := func(t *testing.T, clients int, args ...string) result {
		return replay(t, append([]string{"--profile", prof, "--capture", capPath, "--flows", "all", "--target", api, "--clients", fmt.Sprint(clients),
			"--loop", loop, "--login-interval", "2ms"}, args...)...)
	}

	t.Run("20 clients", func(t *testing.T) {
		srv.reset()
		res := run(t, 20, "--senders", "4", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		mustOK(t, res)
		s := res.sum
		issued, refused, joins, wrong, chats, delivered, up := srv.counts()
		srv.mu.Lock()
		lobbies := srv.lobbies
		srv.mu.Unlock()
		if s.LoginsSucceeded != 20 || lobbies != 20 || issued != 20 || refused != 0 || joins != 20 || wrong != 0 || up[srv.gameAddr] != 20 || up[api] != 0 ||
			chats != s.MessagesSent || delivered != s.MessagesReceived || s.MessagesSent == 0 {
			t.Fatalf("logins %d failed %v; the server answered %d lobby requests, issued %d tokens, refused %d upgrades, took %v (want 20 on the game server %s), joined %d (%d with another user's token), chats %d of %d sent, delivered %d of %d received\n%s%s",
				s.LoginsSucceeded, s.LoginsFailed, lobbies, issued, refused, up, srv.gameAddr, joins, wrong, chats, s.MessagesSent, delivered, s.MessagesReceived, res.stdout, res.stderr)
		}
		if !strings.Contains(res.stdout+res.stderr, `connect "${addr}"`) {
			t.Errorf("the notes do not say where the socket connects:\n%s%s", res.stdout, res.stderr)
		}
		if len(s.HTTPSteps) != 2 || s.HTTPSteps[0].Step != "v2" || s.HTTPSteps[0].Answered != 20 || s.HTTPSteps[1].Step != "v2_2" || s.HTTPSteps[1].Answered != 20 {
			t.Errorf("http steps %+v; want v2 (the lobby) and v2_2 (the token) answered 20 each", s.HTTPSteps)
		}
		t.Logf("20 clients: sent %d received %d; server chats %d delivered %d", s.MessagesSent, s.MessagesReceived, chats, delivered)
	})

	t.Run("bad lobby", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deadAddr := dead.Addr().String()
		dead.Close() // nothing listens there now
		for _, tc := range []struct{ answer, reason string }{
			{"none", "v2_missing_addr"},
			{deadAddr, "connect_refused"},
		} {
			srv.mu.Lock()
			srv.lobbyAddr = tc.answer
			srv.mu.Unlock()
			start := time.Now()
			res := run(t, 5, "--login-timeout", "10s", "--duration", "2s")
			if got := res.sum.LoginsFailed[tc.reason]; got != 5 || res.sum.LoginsSucceeded != 0 || res.code == 0 {
				t.Errorf("lobby answering %s: failed %v, succeeded %d, exit %d; want 5 %s and a non-zero exit\n%s", tc.answer, res.sum.LoginsFailed, res.sum.LoginsSucceeded, res.code, tc.reason, res.stderr)
			}
			if !strings.Contains(res.stderr, tc.reason) || strings.Contains(res.stderr, "goroutine ") {
				t.Errorf("lobby answering %s: stderr does not name %s in a line:\n%s", tc.answer, tc.reason, res.stderr)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("lobby answering %s: the run took %v", tc.answer, took)
			}
		}
		srv.mu.Lock()
		srv.lobbyAddr = ""
		srv.mu.Unlock()
	})
}

package main

// A lobby, then the game server it names: the recorded client asks the
// Nakama-kind server's lobby (GET /v2/lobby) where to play, takes a
// token over HTTP and opens its socket on the game server the lobby
// answered, another listener. Recorded by `record live` on lo (the
// client leaves the first server for the second, which no proxy in
// between would see), replayed with --flows all and no step or connect
// written: the loader takes the address from the lobby's answer.

import (
	"bufio"
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

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// recordLobbyClient records, with record live on lo, the client that
// asks api's lobby for the game server, then plays there.
func recordLobbyClient(t *testing.T, api, game string) string {
	t.Helper()
	return recordLive(t, api, game, func() {
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
	})
}

// recordLive records what client does towards api and game with record
// live on lo (the client leaves the first server for the second, which
// no proxy in between would see).
func recordLive(t *testing.T, api, game string, client func()) string {
	t.Helper()
	return recordLiveOn(t, "tcp", api, game, client)
}

// recordLiveOn is recordLive over transport proto (tcp or udp).
func recordLiveOn(t *testing.T, proto, api, game string, client func()) string {
	t.Helper()
	testproc.NeedRoot(t, "live capture")
	out := filepath.Join(t.TempDir(), "lobby.pcap")
	_, apiPort, _ := net.SplitHostPort(api)
	_, gamePort, _ := net.SplitHostPort(game)
	rec := testproc.StartCombined(t, bins["record"], "live", "--iface", "lo", "--out", out,
		"--filter", fmt.Sprintf("%s port %s or %s port %s", proto, apiPort, proto, gamePort))
	waitOutput(t, rec, "capturing on lo")
	client()
	time.Sleep(200 * time.Millisecond) // the last packets into the capture
	if err := rec.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record live: %v\n%s", err, rec.Stdout.String())
	}
	return out
}

// lobbyReplay replays capPath with prof (no step or connect written),
// every flow, towards api: logins 2 ms apart, the game socket looped at
// loop.
func lobbyReplay(prof, capPath, api, loop string) func(t *testing.T, clients int, args ...string) result {
	return func(t *testing.T, clients int, args ...string) result {
		return replay(t, append([]string{"--profile", prof, "--capture", capPath, "--flows", "all", "--target", api, "--clients", fmt.Sprint(clients),
			"--loop", loop, "--login-interval", "2ms"}, args...)...)
	}
}

// playedOnGame checks a lobby run of clients: each logged in, at its
// one attempt, through its own lobby answer and token, and played on
// the game server (none on the lobby's api), under its own user; the
// server's chats and deliveries equal the fleet's. It returns the
// fleet's summary.
func (n *nakama) playedOnGame(t *testing.T, res result, api string, clients int) fleet.Summary {
	t.Helper()
	mustOK(t, res)
	s := res.sum
	issued, refused, joins, wrong, chats, delivered, up := n.counts()
	n.mu.Lock()
	lobbies := n.lobbies
	n.mu.Unlock()
	c := int64(clients)
	if s.LoginsSucceeded != c || s.LoginAttempts != c || lobbies != clients || issued != clients || refused != 0 || joins != clients || wrong != 0 || up[n.gameAddr] != clients || up[api] != 0 ||
		chats != s.MessagesSent || delivered != s.MessagesReceived || s.MessagesSent == 0 {
		t.Fatalf("logins %d of %d attempts, failed %v; the lobby answered %d, the server issued %d tokens, refused %d upgrades, took %v (want %d on the game server %s), joined %d (%d with another user's token), chats %d of %d sent, delivered %d of %d received\n%s%s",
			s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, lobbies, issued, refused, up, clients, n.gameAddr, joins, wrong, chats, s.MessagesSent, delivered, s.MessagesReceived, res.stdout, res.stderr)
	}
	t.Logf("%d clients: sent %d received %d; server chats %d delivered %d", clients, s.MessagesSent, s.MessagesReceived, chats, delivered)
	return s
}

// lobbySocketClient is the recorded client of the lobby socket: it asks
// api's /lobby socket for a match, takes the game server's address and
// a token from the answer, closes, and plays on the game server.
func lobbySocketClient(api, user, room string, chats int) error {
	conn, err := net.Dial("tcp", api)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /lobby?v=2 HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: http://game.example\r\n\r\n", api, profile.NewWSNonce())
	in := bufio.NewReader(conn)
	if status, err := in.ReadString('\n'); err != nil || !strings.Contains(status, " 101 ") {
		return fmt.Errorf("lobby upgrade: %q %v", status, err)
	}
	for {
		if l, err := in.ReadString('\n'); err != nil || l == "\r\n" {
			break
		}
	}
	key := profile.NewWSKey()
	conn.Write(profile.AppendWSFrame(nil, profile.WSText, fmt.Appendf(nil, `{"find":%q,"user":%q}`, room, user), key))
	var rd profile.WSReader
	var answer struct{ Match struct{ Addr, Token string } }
	buf := make([]byte, 1024)
	for answer.Match.Token == "" {
		k, err := in.Read(buf)
		if err != nil {
			return fmt.Errorf("lobby: %v", err)
		}
		rd.Feed(buf[:k], func(m profile.WSMessage) error { return json.Unmarshal(m.Payload, &answer) })
	}
	conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 232}, key))
	conn.Close()
	return nakamaSocket(answer.Match.Addr, answer.Match.Token, user, room, chats)
}

// TestLobbyThenGame: the lobby's answer names where the recorded client
// then connected; inspect proposes that link and --flows all plays the
// lobby's request, the token's, then the socket where each client's own
// lobby answer said: the server's counts equal the fleet's, every
// socket on the game server. A lobby with no match, or one naming a
// server that is not there, fails each client once with its reason.
func TestLobbyThenGame(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	srv, api := startNakama(t)
	capPath := recordLobbyClient(t, api, srv.gameAddr)
	// No step and no connect written: the recording says both.
	prof := withoutSteps(t, filepath.Join("testdata", "nakama", "chat.yaml"))
	insp := inspectProfile(t, prof, capPath)
	if !regexp.MustCompile(`link: the value "` + regexp.QuoteMeta(srv.gameAddr) + `" answered in flow \d's response body \(GET /v2/lobby\) at \$\.match\.addr is where flow \d connected \(its address\); take: \{name: addr, json: \$\.match\.addr, recorded: \{regexp: '[^']+'\}\}; connect: "\$\{addr\}"`).MatchString(insp) {
		t.Fatalf("inspect proposes no address link:\n%s", insp)
	}
	_, loop := socketFlow(t, insp, "GET /ws?")
	run := lobbyReplay(prof, capPath, api, loop)

	t.Run("20 clients", func(t *testing.T) {
		srv.reset()
		res := run(t, 20, "--senders", "4", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		s := srv.playedOnGame(t, res, api, 20)
		if !strings.Contains(res.stdout+res.stderr, `connect "${addr}"`) {
			t.Errorf("the notes do not say where the socket connects:\n%s%s", res.stdout, res.stderr)
		}
		if len(s.HTTPSteps) != 2 || s.HTTPSteps[0].Step != "v2" || s.HTTPSteps[0].Answered != 20 || s.HTTPSteps[1].Step != "v2_2" || s.HTTPSteps[1].Answered != 20 {
			t.Errorf("http steps %+v; want v2 (the lobby) and v2_2 (the token) answered 20 each", s.HTTPSteps)
		}
	})

	t.Run("bad lobby", func(t *testing.T) {
		for _, tc := range []struct{ answer, reason string }{
			{"none", "v2_missing_addr"},
			{srv.awayAddr, "connect_refused"},
		} {
			srv.mu.Lock()
			srv.lobbyAddr = tc.answer
			srv.mu.Unlock()
			failsEach(t, "lobby answering "+tc.answer, 5, tc.reason, func() result {
				return run(t, 5, "--login-timeout", "10s", "--after-logins", "500ms")
			})
		}
		srv.mu.Lock()
		srv.lobbyAddr = ""
		srv.mu.Unlock()
	})
}

// TestLobbyHeaderThenGame: the lobby names the game server in an answer
// header only (X-Game-Server), not in its body. inspect proposes the
// header take and the connect; the profile written with them as
// printed (a lobby step before the token's) plays every client on the
// game server, and so does --flows all with no step or connect written.
// A lobby naming a server that is not there fails each client with
// connect_refused: the address is the client's own answer's, not the
// recording's.
func TestLobbyHeaderThenGame(t *testing.T) {
	srv, api := startNakama(t)
	capPath := recordLive(t, api, srv.gameAddr, func() {
		resp, err := http.Get("http://" + api + "/v2/lobby?via=header")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		addr := resp.Header.Get("X-Game-Server")
		if addr != srv.gameAddr {
			t.Fatalf("lobby answered X-Game-Server %q; want %s", addr, srv.gameAddr)
		}
		if err := nakamaClientAt(api, addr, "rec-user-01", "hall", 6); err != nil {
			t.Fatal(err)
		}
	})
	chat := filepath.Join("testdata", "nakama", "chat.yaml")
	bare := withoutSteps(t, chat)
	insp := inspectProfile(t, bare, capPath)
	m := regexp.MustCompile(`link: the value "` + regexp.QuoteMeta(srv.gameAddr) + `" answered in flow \d's response header X-Game-Server \(GET /v2/lobby\?via=header\) is where flow \d connected \(its address\); take: (\{name: x_game_server, header: X-Game-Server, recorded: \{regexp: '[^']+'\}\}); connect: ("\$\{x_game_server\}")\n`).FindStringSubmatch(insp)
	if m == nil {
		t.Fatalf("inspect proposes no header take:\n%s", insp)
	}
	// docs/profiles.md's inspect line, with this recording's address.
	doc, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`(?m)^  link: the value "([^"]+)" answered in flow 0's response header X-Game-Server .*$`).FindSubmatch(doc)
	if link == nil {
		t.Fatal("docs/profiles.md shows no header link")
	}
	want := strings.ReplaceAll(string(link[0]), string(link[1]), srv.gameAddr)
	want = strings.ReplaceAll(want, regexp.QuoteMeta(string(link[1])), regexp.QuoteMeta(srv.gameAddr))
	if !strings.Contains(insp, want) {
		t.Fatalf("inspect does not propose the header link as docs/profiles.md shows it:\n%s\nwant\n%s", insp, want)
	}
	flow, loop := socketFlow(t, insp, "GET /ws?")

	t.Run("as proposed", func(t *testing.T) {
		// chat.yaml with a lobby step before its token's, taking what
		// inspect printed, and its connect.
		data, err := os.ReadFile(chat)
		if err != nil {
			t.Fatal(err)
		}
		prof := strings.Replace(string(data), "\nhttp:\n", "\nconnect: "+m[2]+"\nhttp:\n  - name: lobby\n    method: GET\n    url: /v2/lobby?via=header\n    take:\n      - "+m[1]+"\n", 1)
		path := filepath.Join(t.TempDir(), "proposed.yaml")
		if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
			t.Fatal(err)
		}
		srv.reset()
		res := replay(t, "--profile", path, "--capture", capPath, "--flow", flow, "--target", api, "--clients", "10", "--senders", "2",
			"--loop", loop, "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "1s", "--drain-deliveries", "20s")
		srv.playedOnGame(t, res, api, 10)
	})
	run := lobbyReplay(bare, capPath, api, loop)
	t.Run("flows all", func(t *testing.T) {
		srv.reset()
		res := run(t, 10, "--senders", "2", "--login-timeout", "20s", "--after-logins", "1s", "--drain-deliveries", "20s")
		srv.playedOnGame(t, res, api, 10)
		if !strings.Contains(res.stdout+res.stderr, `takes x_game_server from header X-Game-Server`) || !strings.Contains(res.stdout+res.stderr, `connect "${x_game_server}"`) {
			t.Errorf("the notes do not say the lobby step takes the header, nor where the socket connects:\n%s%s", res.stdout, res.stderr)
		}
	})
	t.Run("away", func(t *testing.T) {
		srv.mu.Lock()
		srv.lobbyAddr = srv.awayAddr
		srv.mu.Unlock()
		defer func() {
			srv.mu.Lock()
			srv.lobbyAddr = ""
			srv.mu.Unlock()
		}()
		failsEach(t, "lobby answering "+srv.awayAddr, 5, "connect_refused", func() result {
			return run(t, 5, "--login-timeout", "10s", "--after-logins", "500ms")
		})
	})
	// A lobby hostile in its header: the value repeated (each client
	// takes the first, as net/http's Header.Get), or longer than any
	// address, or than an answer's bound: one reason a client, counted.
	t.Run("hostile header", func(t *testing.T) {
		defer func() {
			srv.mu.Lock()
			srv.lobbyHeader = nil
			srv.mu.Unlock()
		}()
		for _, tc := range []struct {
			name   string
			values []string
			reason string // "": every client plays on the game server
		}{
			{"repeated, the game's first", []string{srv.gameAddr, srv.awayAddr}, ""},
			{"repeated, the dead one's first", []string{srv.awayAddr, srv.gameAddr}, "connect_refused"},
			{"64 KiB", []string{strings.Repeat("9", 64<<10)}, "connect_bad_address"},
			{"2 MiB", []string{strings.Repeat("9", 2<<20)}, "v2_http_too_large"}, // the step of GET /v2/lobby
		} {
			srv.reset()
			srv.mu.Lock()
			srv.lobbyHeader = tc.values
			srv.mu.Unlock()
			if tc.reason == "" {
				srv.playedOnGame(t, run(t, 5, "--login-timeout", "20s", "--after-logins", "500ms", "--drain-deliveries", "20s"), api, 5)
				continue
			}
			res := failsEach(t, tc.name, 5, tc.reason, func() result {
				return run(t, 5, "--login-timeout", "10s", "--after-logins", "500ms")
			})
			t.Logf("%s: peak RSS %.1f MiB; failed %v; %s", tc.name, float64(res.sum.ProcessPeakRSSBytes)/(1<<20), res.sum.LoginsFailed, lastLine(res.stderr))
		}
	})
}

// TestLobbySocketThenGame: one fleet client plays two realtime
// connections in turn. The recorded client asked a lobby over a
// WebSocket for a match, was answered the game server's address and a
// token, closed the lobby and played on the game server with it.
// inspect proposes both links; --flows all, with no step or connect
// written, plays the lobby socket as each client's socket step (its
// recorded message, its own user), then the game socket where its own
// answer said, with its own token: one client per user, counted once,
// the server's counts equal to the fleet's. A lobby with no match, or
// one naming a server that is not there, fails each client once with
// its reason, and nothing hangs.
func TestLobbySocketThenGame(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	srv, api := startNakama(t)
	capPath := recordLive(t, api, srv.gameAddr, func() {
		if err := lobbySocketClient(api, "rec-user-01", "hall", 6); err != nil {
			t.Fatal(err)
		}
	})
	prof := withoutSteps(t, filepath.Join("testdata", "nakama", "chat.yaml"))
	insp := inspectProfile(t, prof, capPath)
	for _, re := range []string{
		`link: the value "` + regexp.QuoteMeta(srv.gameAddr) + `" answered in flow \d's socket message #0 at \$\.match\.addr is where flow \d connected \(its address\)`,
		`link: the value "\w+" answered in flow \d's socket message #0 at \$\.match\.token is sent in flow \d's upgrade query token`,
	} {
		if !regexp.MustCompile(re).MatchString(insp) {
			t.Fatalf("inspect proposes no link %s:\n%s", re, insp)
		}
	}
	_, loop := socketFlow(t, insp, "GET /ws?")
	run := lobbyReplay(prof, capPath, api, loop)
	t.Run("20 clients", func(t *testing.T) {
		srv.reset()
		res := run(t, 20, "--senders", "4", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		s := srv.playedOnGame(t, res, api, 20)
		if len(s.HTTPSteps) != 1 || s.HTTPSteps[0].Step != "lobby" || s.HTTPSteps[0].Answered != 20 {
			t.Errorf("steps %+v; want the lobby socket answered 20 times", s.HTTPSteps)
		} else {
			// The lobby socket's messages are counted, with its step, and
			// not in the game server's (above): equal to the lobby's own.
			srv.mu.Lock()
			in, out := srv.lobbyIn, srv.lobbyOut
			srv.mu.Unlock()
			if io := s.HTTPSteps[0].Socket; io == nil || io.Sent != in || io.Received != out || in != 20 || io.BytesSent == 0 || io.BytesReceived == 0 ||
				!strings.Contains(res.stdout, fmt.Sprintf("its socket sent %d / received %d messages", in, out)) {
				t.Errorf("the lobby socket's counts %+v; the lobby read %d messages and sent %d (want 20 each, equal)\n%s", io, in, out, res.stdout)
			}
		}
		if !strings.Contains(res.stdout+res.stderr, `lobby (a socket: GET /lobby?v=2, sends 1 messages, takes`) {
			t.Errorf("the notes do not say the lobby socket is a step:\n%s%s", res.stdout, res.stderr)
		}
	})
	t.Run("written step", func(t *testing.T) {
		// docs/profiles.md's example: the same, written by hand.
		written := filepath.Join("testdata", "nakama", "lobby.yaml")
		docExampleIs(t, "# A lobby socket, then the game server", written)
		srv.reset()
		flow, _ := socketFlow(t, insp, "GET /ws?")
		res := replay(t, "--profile", written, "--capture", capPath, "--flow", flow, "--target", api, "--clients", "10", "--senders", "2",
			"--loop", loop, "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		srv.playedOnGame(t, res, api, 10)
	})
	t.Run("header take", func(t *testing.T) {
		// The game server's address from the lobby's upgrade answer (its
		// X-Game-Server header), the token from its message; a header the
		// answer lacks fails each client at once with the step's reason.
		data, err := os.ReadFile(filepath.Join("testdata", "nakama", "lobby.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		flow, _ := socketFlow(t, insp, "GET /ws?")
		for _, tc := range []struct {
			header  string
			clients int
			reason  string // "" succeeds
		}{{"X-Game-Server", 5, ""}, {"X-Nowhere", 3, "lobby_missing_addr"}} {
			take := "{name: addr, header: " + tc.header + "}"
			prof := strings.Replace(string(data), "{name: addr, json: $.match.addr}", take, 1)
			if !strings.Contains(prof, take) {
				t.Fatalf("lobby.yaml takes no addr at $.match.addr:\n%s", data)
			}
			path := filepath.Join(t.TempDir(), "header.yaml")
			if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
				t.Fatal(err)
			}
			srv.reset()
			args := []string{"--profile", path, "--capture", capPath, "--flow", flow, "--target", api, "--clients", fmt.Sprint(tc.clients),
				"--loop", loop, "--login-interval", "2ms", "--login-timeout", "10s"}
			if tc.reason != "" {
				failsEach(t, tc.header, int64(tc.clients), tc.reason, func() result { return replay(t, append(args, "--after-logins", "500ms")...) })
				continue
			}
			srv.playedOnGame(t, replay(t, append(args, "--after-logins", "1s", "--drain-deliveries", "20s")...), api, tc.clients)
		}
	})
	t.Run("bad lobby", func(t *testing.T) {
		for _, tc := range []struct{ users, reason string }{
			{"nomatch-%d", "lobby_missing_"},
			{"away-%d", "connect_refused"},
		} {
			failsEach(t, "users "+tc.users, 5, tc.reason, func() result {
				return run(t, 5, "--user-id-format", tc.users, "--login-timeout", "10s", "--after-logins", "500ms")
			})
		}
	})
}

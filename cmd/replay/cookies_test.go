package main

// A session cookie across HTTP steps and the upgrade, against a real
// server no one here wrote the library of: testdata/wschat/server.js in
// cookie mode (node's http and ws), where POST /login sets a single-use
// session cookie, GET /me and the upgrade require it, and a Cookie header
// naming it twice is refused.

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCookieSession: a recorded web-app login (POST /login, GET /me with
// the cookies it set, the upgrade with them) replayed as 200 clients with
// the profile's HTTP steps: each client's jar takes its own session cookie
// and carries it to /me and the upgrade in place of the recorded one,
// never beside it; the server's counts equal the fleet's. With --flows all
// the recorded requests are the steps. A login that sets no cookie fails
// at /me as me_http_401, counted. Over https (wss:// target) the steps
// and the socket carry the cookie as well; each client's steps share one
// keep-alive connection.
func TestCookieSession(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	node := needTool(t, "node")
	pki := newTestPKI(t)
	port, secure := startWSChat(t, node, "cookie", &pki)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	capPath := recordThrough(t, target, node, filepath.Join(wsChatDir, "client.js"), "LISTEN_PORT", "rec-user-01", "lobby", "12", "cookie")
	prof := filepath.Join(wsChatDir, "cookie.yaml")
	docExampleIs(t, "# A web app's login", prof)
	insp := inspectProfile(t, prof, capPath)
	_, loop := socketFlow(t, insp, "GET /chat ")
	// The session cookie the login set links the login, /me and the socket.
	for _, want := range []string{`set in flow 0's answer (POST /login) is sent in flow 1's request header Cookie (GET /me); take: none, each client's cookie jar carries it`,
		`set in flow 0's answer (POST /login) is sent in flow 2's upgrade header Cookie`} {
		if !strings.Contains(insp, want) {
			t.Errorf("inspect lacks %q:\n%s", want, insp)
		}
	}
	run := func(t *testing.T, clients int, args ...string) (res result, app wsChatStats) {
		t.Helper()
		var ok string
		if err := fetchText(fmt.Sprintf("http://%s/reset", target), &ok); err != nil {
			t.Fatal(err)
		}
		res = replay(t, append([]string{"--capture", capPath, "--target", target, "--clients", fmt.Sprint(clients), "--senders", fmt.Sprint(min(clients, 10)),
			"--room-size", "50", "--loop", loop, "--login-interval", "2ms", "--login-timeout", "20s", "--drain-deliveries", "20s"}, args...)...)
		return res, wsChatSettled(t, port)
	}
	exact := func(t *testing.T, clients int, res result, app wsChatStats) {
		t.Helper()
		mustOK(t, res)
		s := res.sum
		// Logins that ran out of --login-timeout only on a host the fleet
		// says starved it (16 upgrades of 200 past 20 s at load 32, the
		// fleet at 0.07 of 2 cores); such a client may have reached the
		// server's steps, or not.
		late := loginTimeoutsOnlyIfStarved(t, s)
		if s.LoginsSucceeded+late != int64(clients) || len(s.Disconnects) != 0 || s.MessagesSent == 0 {
			t.Fatalf("logins %d failed %v disconnects %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, res.stdout, res.stderr)
		}
		inRange := func(n int) bool { return int64(n) >= s.LoginsSucceeded && n <= clients && (late > 0 || n == clients) }
		if !inRange(app.Logins) || !inRange(app.Me) || !inRange(app.Upgrades) || app.NoCookie != 0 || app.DupCookie != 0 || app.WrongUser != 0 || !inRange(app.Joins) || app.Errors != 0 {
			t.Errorf("the server: %d logins, %d /me, %d upgrades, %d without the cookie, %d with it twice, %d another's session, %d joins, %d errors; want %d, %d, %d, 0, 0, 0, %d, 0",
				app.Logins, app.Me, app.Upgrades, app.NoCookie, app.DupCookie, app.WrongUser, app.Joins, app.Errors, clients, clients, clients, clients)
		}
		if late == 0 && (app.Chats != s.MessagesSent || app.Delivered != s.MessagesReceived) {
			t.Errorf("the server got %d chats and delivered %d; the fleet sent %d and received %d", app.Chats, app.Delivered, s.MessagesSent, s.MessagesReceived)
		}
		steps := ""
		for _, st := range s.HTTPSteps {
			steps += fmt.Sprintf(" %s %d answered (ms p50 %.3f p99 %.3f)", st.Step, st.Answered, st.MS.P50, st.MS.P99)
		}
		t.Logf("%d clients: sent %d received %d, server chats %d delivered %d; steps%s", clients, s.MessagesSent, s.MessagesReceived, app.Chats, app.Delivered, steps)
	}
	t.Run("200 clients", func(t *testing.T) {
		res, app := run(t, 200, "--profile", prof, "--after-logins", "2s")
		exact(t, 200, res, app)
		if app.HTTPConns != app.Logins { // keep-alive: a client's steps on one connection
			t.Errorf("the steps of %d logins came on %d connections; want one a client", app.Logins, app.HTTPConns)
		}
		s := res.sum
		if st := s.HTTPSteps; len(st) != 2 || st[0].Answered < s.LoginsSucceeded || st[1].Answered < s.LoginsSucceeded || len(s.LoginsFailed) == 0 && (st[0].Answered != 200 || st[1].Answered != 200) {
			t.Errorf("http step times %+v; want login and me answered 200 each", st)
		}
	})
	t.Run("flows all", func(t *testing.T) {
		res, app := run(t, 20, "--profile", withoutSteps(t, prof), "--flows", "all", "--after-logins", "2s")
		exact(t, 20, res, app)
		if !strings.Contains(res.stderr, "flows 0, 1, 2 are one client's: each client makes the recorded requests as http steps login (POST /login); me (GET /me") {
			t.Errorf("the notes do not join the login, /me and the socket:\n%s", res.stderr)
		}
	})
	t.Run("https", func(t *testing.T) {
		// The steps over https to the target, the upgrade over wss, the
		// cookie in between: the TLS options apply to the steps too.
		res, app := run(t, 20, "--profile", prof, "--target", fmt.Sprintf("wss://127.0.0.1:%d/chat", secure), "--tls-ca", pki.ca, "--after-logins", "2s")
		exact(t, 20, res, app)
		if app.TLS != app.Upgrades || app.HTTPConns != app.Logins {
			t.Errorf("the server saw %d sockets over TLS of %d upgrades and the steps of %d logins on %d connections; want all over TLS, one connection a client", app.TLS, app.Upgrades, app.Logins, app.HTTPConns)
		}
	})
	t.Run("no cookie", func(t *testing.T) {
		var app wsChatStats
		failsEach(t, "nocookie-%d", 5, "me_http_401", func() (res result) {
			res, app = run(t, 5, "--profile", prof, "--user-id-format", "nocookie-%d", "--duration", "3s")
			return res
		})
		if app.Logins != 5 || app.NoCookie != 5 || app.Upgrades != 0 {
			t.Errorf("the server: %d logins, %d without the cookie, %d upgrades; want 5, 5, 0", app.Logins, app.NoCookie, app.Upgrades)
		}
	})
}

// TestJarAcrossTurns: a recorded client starts a cookie session over
// HTTP (POST /v2/session sets sid), then plays a socket on one server
// and, after closing it, a socket on another, each upgrade bringing the
// cookie (no token). Replayed with --flows all and the session as the
// profile's step, each client is one client playing its two sockets in
// turn, and both upgrades carry the cookie its own step was set, not the
// recorded one (the next connection's address is a port alone, ":port",
// the jar's URL the target's host): the server took every upgrade of
// both listeners by a cookie of a session it started, none refused,
// every join by the session's own user, its counts equal to the
// fleet's.
func TestJarAcrossTurns(t *testing.T) {
	srv, api := startNakama(t)
	capPath := recordLive(t, api, srv.gameAddr, func() {
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
		resp, err := hc.Post("http://"+api+"/v2/session", "application/json", strings.NewReader(`{"id":"rec-user-01"}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		u, _ := url.Parse("http://" + api + "/")
		cs := jar.Cookies(u)
		if resp.StatusCode != 200 || len(cs) != 1 {
			t.Fatalf("session: %s, cookies %v", resp.Status, cs)
		}
		cookie := "Cookie: sid=" + cs[0].Value + "\r\n"
		for _, sock := range []string{api, srv.gameAddr} {
			if err := nakamaSocketWith(sock, "lang=en", cookie, "rec-user-01", "hall", 6, true); err != nil {
				t.Fatal(err)
			}
		}
	})
	data, err := os.ReadFile(filepath.Join("testdata", "nakama", "chat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	step := "\nhttp:\n  - name: session\n    method: POST\n    url: /v2/session\n    headers: {Content-Type: application/json}\n    body: '{\"id\":\"${user}\"}'\nkinds:"
	prof := regexp.MustCompile(`(?s)\nhttp:.*?\nkinds:`).ReplaceAllLiteralString(string(data), step)
	path := filepath.Join(t.TempDir(), "session.yaml")
	if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.reset()
	const clients = 10
	res := replay(t, "--profile", path, "--capture", capPath, "--flows", "all", "--target", api, "--clients", fmt.Sprint(clients),
		"--login-interval", "5ms", "--login-timeout", "20s", "--after-logins", "1s", "--drain-deliveries", "20s")
	mustOK(t, res)
	s := res.sum
	if !strings.Contains(res.stdout+res.stderr, "are one client's connections in turn") {
		t.Fatalf("the notes do not join the sockets:\n%s%s", res.stdout, res.stderr)
	}
	n := s.NextConnections
	issued, refused, joins, wrong, chats, delivered, up := srv.counts()
	srv.mu.Lock()
	byCookie := maps.Clone(srv.cookieUps)
	srv.mu.Unlock()
	if s.LoginsSucceeded != clients || s.LoginAttempts != clients || n == nil || n.Tried != clients || n.LoggedIn != clients || len(n.Failed) != 0 ||
		issued < clients || refused != 0 || wrong != 0 || joins != 2*clients ||
		up[api] != clients || up[srv.gameAddr] != clients || byCookie[api] != clients || byCookie[srv.gameAddr] != clients ||
		chats != s.MessagesSent || delivered != s.MessagesReceived || s.MessagesSent == 0 {
		t.Fatalf("logins %d of %d, failed %v, next connections %+v; the server started %d sessions, refused %d upgrades, took %v (%v by a cookie; want %d on each), joined %d (%d by another user), chats %d of %d sent, delivered %d of %d received\n%s%s",
			s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, n, issued, refused, up, byCookie, clients, joins, wrong, chats, s.MessagesSent, delivered, s.MessagesReceived, res.stdout, res.stderr)
	}
	// issued: the next connection makes the profile's steps again
	// today (a new session, the same user's).
	t.Logf("%d clients: both sockets by their own cookie (%v); the server started %d sessions; sent %d received %d", clients, byCookie, issued, s.MessagesSent, s.MessagesReceived)
}

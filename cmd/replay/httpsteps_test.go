package main

// HTTP steps before the socket, against a server of the Nakama kind
// written here from that API's public shape: POST
// /v2/account/authenticate/custom with the server key as Basic auth
// answers a session token, single use and bound to the user; GET
// /ws?token=... upgrades with it (401 without a valid one); a lobby
// (GET /v2/lobby) answers the address of the game server, another
// listener (with ?via=header, in its X-Game-Server header only). JSON text messages: {"join":R,"user":U} answered
// {"joined":R}, {"chat":T,"ts":S} sent on to the room's others as
// {"msg":T,"ts":S}.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// nakama is the server; its counters are what the test checks.
type nakama struct {
	mu     sync.Mutex
	tokens map[string]string // unused token -> user
	// sessions are the cookie sessions POST /v2/session started (sid ->
	// user, any number of upgrades); cookieUps counts the upgrades
	// that came with one, by listener address.
	sessions  map[string]string
	cookieUps map[string]int
	issued    int
	upgrades  map[string]int // by listener address
	refused   int            // upgrades without a valid token
	joins     int
	wrongUser int
	chats     int64
	delivered int64
	rooms     map[string]map[*nkConn]bool
	gameAddr  string
	// lobbies counts the lobby's answers; lobbyAddr is the address it
	// answers ("": the game server's, "none": no match).
	lobbies   int
	lobbyAddr string
	// lobbyHeader, when set, are the values the lobby answers in its
	// X-Game-Server header (?via=header), each in a header line of its
	// own, in place of lobbyAddr's one.
	lobbyHeader []string
	// lobbyIn and lobbyOut count the lobby socket's text messages, read
	// and sent.
	lobbyIn, lobbyOut int64
	// awayAddr is where nothing listens: the lobby socket's answer to
	// users named away-*.
	awayAddr string
	conns    sync.WaitGroup
}

type nkConn struct {
	mu   sync.Mutex
	conn net.Conn
}

func (c *nkConn) send(msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.conn.Write(profile.AppendWSFrame(nil, profile.WSText, msg, nil))
}

// startNakama serves the API and the socket on one listener and the
// socket alone on a second (the game server the lobby names).
func startNakama(t *testing.T) (*nakama, string) {
	t.Helper()
	n := &nakama{tokens: map[string]string{}, upgrades: map[string]int{}, rooms: map[string]map[*nkConn]bool{}, sessions: map[string]string{}, cookieUps: map[string]int{}}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	game, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.gameAddr = game.Addr().String()
	away, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.awayAddr = away.Addr().String()
	away.Close() // nothing listens there now
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/account/authenticate/custom", n.authenticate)
	mux.HandleFunc("GET /v2/lobby", func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.lobbies++
		addr, header := n.lobbyAddr, n.lobbyHeader
		n.mu.Unlock()
		if addr == "" {
			addr = n.gameAddr
		}
		if addr == "none" { // a lobby with no match
			io.WriteString(w, `{"match":null}`)
			return
		}
		if r.URL.Query().Get("via") == "header" { // the address in a header only
			if header == nil {
				header = []string{addr}
			}
			for _, v := range header {
				w.Header().Add("X-Game-Server", v)
			}
			io.WriteString(w, `{"match":{}}`)
			return
		}
		fmt.Fprintf(w, `{"match":{"addr":%q}}`, addr)
	})
	mux.HandleFunc("POST /v2/session", n.session)
	mux.HandleFunc("GET /ws", n.socket)
	mux.HandleFunc("GET /lobby", n.lobbySocket)
	for _, ln := range []net.Listener{api, game} {
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close(); n.conns.Wait() })
	}
	return n, api.Addr().String()
}

// authenticate answers a token; a user named for a failure gets it:
// banned (403), down (503), nokey (no token in the answer), loop (redirected to
// itself), huge (a 2 MiB answer), slow (no answer for 5 s).
func (n *nakama) authenticate(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("defaultkey:")) {
		http.Error(w, `{"error":"server key invalid"}`, http.StatusUnauthorized)
		return
	}
	var body struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil || body.ID == "" {
		http.Error(w, `{"error":"id required"}`, http.StatusBadRequest)
		return
	}
	switch {
	case strings.HasPrefix(body.ID, "banned"):
		http.Error(w, `{"error":"banned"}`, http.StatusForbidden)
		return
	case strings.HasPrefix(body.ID, "down"):
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
		return
	case strings.HasPrefix(body.ID, "nokey"):
		io.WriteString(w, `{"created":true}`)
		return
	case strings.HasPrefix(body.ID, "loop"):
		http.Redirect(w, r, r.URL.String(), http.StatusTemporaryRedirect)
		return
	case strings.HasPrefix(body.ID, "huge"):
		w.Write(hugeAnswer)
		return
	case strings.HasPrefix(body.ID, "slow"):
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	fmt.Fprintf(w, `{"created":true,"token":%q,"refresh_token":"r"}`, n.issueToken(body.ID, false))
}

// issueToken makes a fresh token for user, records it and counts it
// (issued, and lobbies too when lobby is set). What else a caller counts
// it counts under its own hold of the lock.
func (n *nakama) issueToken(user string, lobby bool) string {
	tok := make([]byte, 12)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tokens[token] = user
	n.issued++
	if lobby {
		n.lobbies++
	}
	return token
}

var hugeAnswer = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)

// upgradeWS answers a WebSocket upgrade, with the extra header lines
// given ("Name: value"), and hands the connection over.
func upgradeWS(w http.ResponseWriter, r *http.Request, extra ...string) (net.Conn, *bufio.ReadWriter, bool) {
	h := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", base64.StdEncoding.EncodeToString(h[:]))
	for _, l := range extra {
		fmt.Fprintf(rw, "%s\r\n", l)
	}
	io.WriteString(rw, "\r\n")
	rw.Flush()
	return conn, rw, true
}

// lobbySocket is the lobby as a WebSocket: {"find":R,"user":U} answered
// {"match":{"addr":A,"token":T}} (a token for U, A the game server), then
// the client's close awaited. A user named for a failure gets it:
// nomatch ({"error":"no match"} and a close), away (the address of a
// server that is not there). Its upgrade's answer names the game server
// too, in a header (X-Game-Server).
func (n *nakama) lobbySocket(w http.ResponseWriter, r *http.Request) {
	conn, rw, ok := upgradeWS(w, r, "X-Game-Server: "+n.gameAddr)
	if !ok {
		return
	}
	n.conns.Add(1)
	defer n.conns.Done()
	defer conn.Close()
	c := &nkConn{conn: conn}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	readWSMessages(rw, func(m profile.WSMessage) (done bool) {
		var find struct{ Find, User string }
		if m.Opcode == profile.WSText || m.Opcode == profile.WSBinary {
			n.mu.Lock()
			n.lobbyIn++
			n.mu.Unlock()
		}
		switch {
		case m.Opcode == profile.WSClose:
			return true
		case json.Unmarshal(m.Payload, &find) != nil || find.User == "":
		case strings.HasPrefix(find.User, "nomatch"):
			n.mu.Lock()
			n.lobbyOut++ // counted before it goes: the client's count is never ahead
			n.mu.Unlock()
			c.send([]byte(`{"error":"no match"}`))
			c.mu.Lock()
			conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 232}, nil))
			c.mu.Unlock()
		default:
			token := n.issueToken(find.User, true)
			n.mu.Lock()
			n.lobbyOut++
			addr := n.gameAddr
			if strings.HasPrefix(find.User, "away") {
				addr = n.awayAddr
			}
			n.mu.Unlock()
			c.send(fmt.Appendf(nil, `{"room":%q,"match":{"addr":%q,"token":%q}}`, find.Find, addr, token))
		}
		return false
	})
}

// socket takes the token (once), upgrades and serves the chat.
func (n *nakama) socket(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	at := r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
	n.mu.Lock()
	user, ok := n.tokens[token]
	delete(n.tokens, token)
	if c, err := r.Cookie("sid"); token == "" && err == nil { // a cookie session's upgrade
		if user, ok = n.sessions[c.Value]; ok {
			n.cookieUps[at]++
		}
	}
	if !ok {
		n.refused++
	} else {
		n.upgrades[at]++
	}
	n.mu.Unlock()
	if !ok {
		http.Error(w, "token invalid", http.StatusUnauthorized)
		return
	}
	conn, rw, ok := upgradeWS(w, r)
	if !ok {
		return
	}
	n.conns.Add(1)
	defer n.conns.Done()
	defer conn.Close()
	n.serve(&nkConn{conn: conn}, rw.Reader, user)
}

// session starts a cookie session for the user {"id":U} names: its
// answer sets sid, which any number of upgrades may bring (no token).
func (n *nakama) session(w http.ResponseWriter, r *http.Request) {
	var body struct{ ID string }
	if json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body) != nil || body.ID == "" {
		http.Error(w, `{"error":"no id"}`, http.StatusBadRequest)
		return
	}
	sid := make([]byte, 12)
	rand.Read(sid)
	n.mu.Lock()
	n.sessions[hex.EncodeToString(sid)] = body.ID
	n.issued++
	n.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "sid", Value: hex.EncodeToString(sid), Path: "/", HttpOnly: true})
	io.WriteString(w, `{}`)
}

func (n *nakama) serve(c *nkConn, in *bufio.Reader, user string) {
	var room string
	defer func() {
		n.mu.Lock()
		delete(n.rooms[room], c)
		n.mu.Unlock()
	}()
	readWSMessages(in, func(m profile.WSMessage) (stop bool) {
		if m.Opcode == profile.WSClose {
			c.send(nil)
			return true
		}
		var msg struct {
			Join, User, Chat, Ts *string
		}
		if m.Opcode != profile.WSText || json.Unmarshal(m.Payload, &msg) != nil {
			return false
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		switch {
		case msg.Join != nil && msg.User != nil:
			if *msg.User != user {
				n.wrongUser++
				return true
			}
			room = *msg.Join
			if n.rooms[room] == nil {
				n.rooms[room] = map[*nkConn]bool{}
			}
			n.rooms[room][c] = true
			n.joins++
			go c.send(fmt.Appendf(nil, `{"joined":%q}`, room))
		case msg.Chat != nil && room != "":
			n.chats++
			out := fmt.Appendf(nil, `{"msg":%q,"ts":%q}`, *msg.Chat, *msg.Ts)
			for peer := range n.rooms[room] {
				if peer != c {
					n.delivered++
					peer.send(out)
				}
			}
		}
		return false
	})
}

func (n *nakama) counts() (issued, refused, joins, wrong int, chats, delivered int64, upgrades map[string]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	up := map[string]int{}
	for k, v := range n.upgrades {
		up[k] = v
	}
	return n.issued, n.refused, n.joins, n.wrongUser, n.chats, n.delivered, up
}

func (n *nakama) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cookieUps)
	n.issued, n.refused, n.joins, n.wrongUser, n.chats, n.delivered, n.lobbies, n.lobbyIn, n.lobbyOut = 0, 0, 0, 0, 0, 0, 0, 0, 0
	n.upgrades = map[string]int{}
}

// nakamaClient is the recorded client: a token over HTTP, then the
// socket with it, a join and chats 40 ms apart, then a close.
func nakamaClient(addr, user, room string, chats int) error {
	return nakamaClientAt(addr, addr, user, room, chats)
}

// nakamaClientAt is nakamaClient with its socket on sock.
func nakamaClientAt(addr, sock, user, room string, chats int) error {
	body := strings.NewReader(fmt.Sprintf(`{"id":%q}`, user))
	req, _ := http.NewRequest("POST", "http://"+addr+"/v2/account/authenticate/custom?create=true", body)
	req.SetBasicAuth("defaultkey", "")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	var session struct{ Token string }
	err = json.NewDecoder(resp.Body).Decode(&session)
	resp.Body.Close()
	if err != nil || session.Token == "" {
		return fmt.Errorf("no token: %v", err)
	}
	return nakamaSocket(sock, session.Token, user, room, chats)
}

// nakamaSocket is the recorded client's socket on sock with its token.
func nakamaSocket(sock, token, user, room string, chats int) error {
	return nakamaSocketWith(sock, "lang=en&status=true&token="+token, "", user, room, chats, false)
}

// nakamaSocketWith is nakamaSocket with the upgrade's query and extra
// header lines (each ending \r\n) given; awaitClose: after its close
// frame, it reads until the server has closed the connection (so a
// recording's next connection starts after this one ended).
func nakamaSocketWith(sock, query, header, user, room string, chats int, awaitClose bool) error {
	conn, err := net.Dial("tcp", sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /ws?%s HTTP/1.1\r\nHost: %s\r\n%sUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", query, sock, header, profile.NewWSNonce())
	in := bufio.NewReader(conn)
	status, err := in.ReadString('\n')
	if err != nil || !strings.Contains(status, " 101 ") {
		return fmt.Errorf("upgrade: %q %v", status, err)
	}
	for {
		if l, err := in.ReadString('\n'); err != nil || l == "\r\n" {
			break
		}
	}
	key := profile.NewWSKey()
	send := func(s string) { conn.Write(profile.AppendWSFrame(nil, profile.WSText, []byte(s), key)) }
	send(fmt.Sprintf(`{"join":%q,"user":%q}`, room, user))
	var rd profile.WSReader
	buf := make([]byte, 1024)
	for joined := false; !joined; {
		k, err := in.Read(buf)
		if err != nil {
			return fmt.Errorf("join: %v", err)
		}
		rd.Feed(buf[:k], func(m profile.WSMessage) error {
			joined = joined || strings.HasPrefix(string(m.Payload), `{"joined"`)
			return nil
		})
	}
	for i := range chats {
		time.Sleep(40 * time.Millisecond)
		send(fmt.Sprintf(`{"chat":"hello %d from %s","ts":""}`, i, user))
	}
	time.Sleep(100 * time.Millisecond)
	conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 232}, key))
	if awaitClose {
		if _, err := io.Copy(io.Discard, in); err != nil {
			return fmt.Errorf("awaiting the server's close: %w", err)
		}
	}
	return nil
}

// TestHTTPSteps: a recorded Nakama-kind session (token over HTTP, then
// /ws?token=) replayed as 200 clients: each takes its own token in the
// profile's HTTP step and carries it in its upgrade in place of the
// recorded one; the server issued 200 tokens, took 200 upgrades and
// refused none, and its chats and deliveries equal the fleet's. The
// lobby profile connects where the lobby's answer says. Bad answers
// count by step and reason, and nothing hangs.
func TestHTTPSteps(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	srv, api := startNakama(t)
	capPath := filepath.Join(t.TempDir(), "nakama.pcap")
	p, listen := startRecordProxy(t, api, capPath)
	if err := nakamaClient(listen, "rec-user-01", "lobby", 12); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, p.Stderr)
	}
	prof := filepath.Join("testdata", "nakama", "chat.yaml")
	if k := os.Getenv("KEEP_CAPTURE"); k != "" {
		defer func() { b, _ := os.ReadFile(capPath); os.WriteFile(k, b, 0o644) }()
	}
	docExampleIs(t, "# A server of the Nakama kind", prof)
	insp := inspectProfile(t, prof, capPath)
	for _, want := range []string{`user id: "rec-user-01"`, "chat 12, join 1", "server answer: accepted"} {
		if !strings.Contains(insp, want) {
			t.Fatalf("inspect lacks %q:\n%s", want, insp)
		}
	}
	_, loop1 := socketFlow(t, insp, "GET /ws?")
	loop := []string{"", loop1}
	if !regexp.MustCompile(`link: the value "\w+" answered in flow \d's response body \(POST /v2/account/authenticate/custom\?create=true\) at \$\.token is sent in flow \d's upgrade query token; take: \{name: token, json: \$\.token`).MatchString(insp) {
		t.Errorf("inspect proposes no link for the token:\n%s", insp)
	}
	t.Run("200 clients", func(t *testing.T) {
		srv.reset()
		res := replay(t, "--profile", prof, "--capture", capPath, "--target", api, "--clients", "200", "--senders", "10",
			"--room-size", "50", "--loop", loop[1], "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		mustOK(t, res)
		s := res.sum
		issued, refused, joins, wrong, chats, delivered, up := srv.counts()
		if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 {
			t.Fatalf("logins %d failed %v disconnects %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, res.stdout, res.stderr)
		}
		if issued != 200 || refused != 0 || joins != 200 || wrong != 0 || up[api] != 200 {
			t.Errorf("the server issued %d tokens, refused %d upgrades, took %v, joined %d (%d with another user's token); want 200, 0, 200 on %s, 200, 0", issued, refused, up, joins, wrong, api)
		}
		if chats != s.MessagesSent || delivered != s.MessagesReceived {
			t.Errorf("the server got %d chats and delivered %d; the fleet sent %d and received %d", chats, delivered, s.MessagesSent, s.MessagesReceived)
		}
		// The auth step's own times, apart from the login's.
		if len(s.HTTPSteps) != 1 || s.HTTPSteps[0].Step != "auth" || s.HTTPSteps[0].Answered != 200 || s.HTTPSteps[0].MS.P50 <= 0 || !strings.Contains(res.stdout, "http step auth") {
			t.Fatalf("http step times %+v; want auth answered 200 with a p50, and its row\n%s", s.HTTPSteps, res.stdout)
		}
		t.Logf("200 clients: sent %d received %d, server chats %d delivered %d; auth step ms p50 %.3f p99 %.3f", s.MessagesSent, s.MessagesReceived, chats, delivered, s.HTTPSteps[0].MS.P50, s.HTTPSteps[0].MS.P99)
	})
	t.Run("lobby", func(t *testing.T) {
		srv.reset()
		data, err := os.ReadFile(prof)
		if err != nil {
			t.Fatal(err)
		}
		// docs/profiles.md's lobby example, as written, after the auth step.
		lobby := strings.Replace(string(data), "kinds:", strings.TrimPrefix(docExample(t, "http:\n  - name: lobby"), "http:\n")+"kinds:", 1)
		path := filepath.Join(t.TempDir(), "lobby.yaml")
		if err := os.WriteFile(path, []byte(lobby), 0o644); err != nil {
			t.Fatal(err)
		}
		res := replay(t, "--profile", path, "--capture", capPath, "--target", api, "--clients", "20", "--senders", "4",
			"--loop", loop[1], "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "1500ms", "--drain-deliveries", "20s")
		mustOK(t, res)
		issued, _, joins, _, chats, _, up := srv.counts()
		if res.sum.LoginsSucceeded != 20 || issued != 20 || joins != 20 || up[srv.gameAddr] != 20 || chats != res.sum.MessagesSent {
			t.Fatalf("logins %d failed %v; the server issued %d tokens, took upgrades %v (want 20 on the game server %s), joined %d, chats %d of %d sent", res.sum.LoginsSucceeded, res.sum.LoginsFailed, issued, up, srv.gameAddr, joins, chats, res.sum.MessagesSent)
		}
	})
	t.Run("flows all", func(t *testing.T) {
		// No step written: the recorded POST (its Basic auth as recorded,
		// its body's user id each client's own) takes each client's
		// token, carried in its upgrade in place of the recorded one.
		srv.reset()
		res := replay(t, "--profile", withoutSteps(t, prof), "--capture", capPath, "--flows", "all", "--target", api, "--clients", "20", "--senders", "4",
			"--loop", loop[1], "--login-interval", "2ms", "--login-timeout", "20s", "--after-logins", "2s", "--drain-deliveries", "20s")
		mustOK(t, res)
		s := res.sum
		issued, refused, joins, wrong, chats, delivered, up := srv.counts()
		if s.LoginsSucceeded != 20 || issued != 20 || refused != 0 || joins != 20 || wrong != 0 || up[api] != 20 || chats != s.MessagesSent || delivered != s.MessagesReceived {
			t.Fatalf("logins %d failed %v; the server issued %d tokens, refused %d upgrades, took %v, joined %d (%d with another user's token), chats %d of %d sent, delivered %d of %d received\n%s%s",
				s.LoginsSucceeded, s.LoginsFailed, issued, refused, up, joins, wrong, chats, s.MessagesSent, delivered, s.MessagesReceived, res.stdout, res.stderr)
		}
		if st := s.HTTPSteps; len(st) != 1 || st[0].Step != "v2" || st[0].Answered != 20 {
			t.Errorf("http step times %+v; want v2 answered 20", st)
		}
	})
	t.Run("bad answers", func(t *testing.T) {
		for _, tc := range []struct {
			user, reason, timeout string
			answered              int64 // the auth step's answers (a redirect loop and a timeout get none)
		}{ // at once: each waits, mostly
			{"banned-%d", "auth_http_403", "20s", 5},
			{"down-%d", "auth_http_503", "20s", 5},
			{"nokey-%d", "auth_missing_token", "20s", 5},
			{"loop-%d", "auth_http_redirects", "20s", 0},
			{"huge-%d", "auth_http_too_large", "20s", 5},
			{"slow-%d", "auth_timeout", "1s", 0}, // the server answers after 5 s
		} {
			t.Run(tc.reason, func(t *testing.T) {
				t.Parallel()
				res := failsEach(t, tc.user, 5, tc.reason, func() result {
					return replay(t, "--profile", prof, "--capture", capPath, "--target", api, "--clients", "5",
						"--user-id-format", tc.user, "--login-interval", "1ms", "--login-timeout", tc.timeout, "--after-logins", "500ms")
				})
				// The step has its row even when it was never answered.
				if st := res.sum.HTTPSteps; len(st) != 1 || st[0].Step != "auth" || st[0].Answered != tc.answered || st[0].MS.None() != (tc.answered == 0) {
					t.Errorf("%s: http steps %+v; want auth answered %d", tc.user, st, tc.answered)
				}
			})
		}
	})
}

// socketFlow is the flow of the recorded socket (its upgrade's request
// line starts "GET /ws?", say) and its suggested loop, from inspect; it is
// the default (the HTTP flow, which the client kept alive, lasted longer,
// but is not the one to replay).
func socketFlow(t *testing.T, insp, request string) (flow, loop string) {
	t.Helper()
	re := regexp.MustCompile(`flow #(\d+) [^\n]*\n  websocket upgrade: ` + regexp.QuoteMeta(request) + `[^\n]*\n(?s:.*?)suggested --loop=(\S+)\n(?:  [^\n]*\n)*?  replay and profile check take this flow by default`)
	m := re.FindStringSubmatch(insp)
	if m == nil {
		t.Fatalf("inspect shows no socket flow (%s) with a loop, taken by default:\n%s", request, insp)
	}
	return m[1], m[2]
}

// withoutSteps is prof with its http: block cut out, written to a
// temporary file: replayed with --flows all, the recording's own
// requests are each client's steps then.
func withoutSteps(t *testing.T, prof string) string {
	t.Helper()
	data, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	bare := regexp.MustCompile(`(?s)\nhttp:.*?\nkinds:`).ReplaceAllString(string(data), "\nkinds:")
	if bare == string(data) || regexp.MustCompile(`(?m)^http:`).MatchString(bare) {
		t.Fatalf("%s: no http: block before kinds: to cut out:\n%s", prof, data)
	}
	path := filepath.Join(t.TempDir(), "no-steps.yaml")
	if err := os.WriteFile(path, []byte(bare), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// failsEach runs a replay in which each of n clients fails its login
// for reason (or for reasons starting with it: a step's missing field
// is named after it) and for nothing else: none succeeded, the run
// exited non-zero naming the reason in a line, no stack trace, and
// nothing hung (30 s).
func failsEach(t *testing.T, what string, n int64, reason string, run func() result) result {
	t.Helper()
	start := time.Now()
	res := run()
	var got int64
	for r, k := range res.sum.LoginsFailed {
		if strings.HasPrefix(r, reason) {
			got += k
		}
	}
	if got != n || len(res.sum.LoginsFailed) != 1 || res.sum.LoginsSucceeded != 0 || res.code == 0 {
		t.Errorf("%s: failed %v, succeeded %d, exit %d; want %d %s and a non-zero exit\n%s", what, res.sum.LoginsFailed, res.sum.LoginsSucceeded, res.code, n, reason, res.stderr)
	}
	if !strings.Contains(res.stderr, reason) || strings.Contains(res.stderr, "goroutine ") {
		t.Errorf("%s: stderr does not name %s in a line:\n%s", what, reason, res.stderr)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("%s: the run took %v", what, took)
	}
	return res
}

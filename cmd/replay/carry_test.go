package main

// Values carried between one client's connections in turn: a chat
// server of the "handover" kind written here, on two listeners. The
// first answers a join with a ticket made for that client
// ({"joined":R,"ticket":T}); the next takes a join only with an unused
// ticket of that user ({"join":R,"user":U,"ticket":T}), else answers
// {"error":"bad_ticket"} and closes. Chats go on to the room's others
// as {"msg":T,"ts":S}.

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// handover is the server; its counts, by listener (0 the first, 1 the
// next), are what the test checks.
type handover struct {
	mu      sync.Mutex
	tickets map[string]string // unused ticket -> user
	issued  int
	refused int
	joins   [2]int
	chats   [2]int64
	deliv   [2]int64
	rooms   [2]map[string]map[*nkConn]bool
	key     string // the joined answer's ticket key ("ticket")
	addr    [2]string
	conns   sync.WaitGroup
	forget  bool // tickets handed out are not kept (the next server refuses them)
	// answer, when set, is the first server's answer to a join of room
	// with ticket (a hostile one), in place of {"joined":R,key:T}.
	answer func(room, ticket string) []byte
}

// startHandover starts the server's two listeners, over TLS with the
// certificate and key given (PEM files), else plaintext.
func startHandover(t *testing.T, tlsFiles ...string) *handover {
	t.Helper()
	h := &handover{tickets: map[string]string{}, key: "ticket"}
	for s := range 2 {
		h.rooms[s] = map[string]map[*nkConn]bool{}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if len(tlsFiles) == 2 {
			cert, err := tls.LoadX509KeyPair(tlsFiles[0], tlsFiles[1])
			if err != nil {
				t.Fatal(err)
			}
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		h.addr[s] = ln.Addr().String()
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, rw, ok := upgradeWS(w, r)
			if !ok {
				return
			}
			h.conns.Add(1)
			defer h.conns.Done()
			defer conn.Close()
			h.serve(s, &nkConn{conn: conn}, rw.Reader)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close(); h.conns.Wait() })
	}
	return h
}

// reset forgets the counts (not the tickets) and sets the ticket's key.
func (h *handover) reset(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.issued, h.refused, h.joins, h.chats, h.deliv, h.key = 0, 0, [2]int{}, [2]int64{}, [2]int64{}, key
}

// serve is one connection to listener s.
func (h *handover) serve(s int, c *nkConn, in *bufio.Reader) {
	var room string
	leave := func() {
		h.mu.Lock()
		delete(h.rooms[s][room], c)
		h.mu.Unlock()
	}
	defer leave()
	c.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	readWSMessages(in, func(m profile.WSMessage) (stop bool) {
		if m.Opcode == profile.WSClose {
			// Out of the room before the close goes: nothing is
			// delivered to it after its close's answer.
			leave()
			c.mu.Lock()
			c.conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 232}, nil))
			c.mu.Unlock()
			return true
		}
		var msg struct{ Join, User, Ticket, Chat, Ts *string }
		if m.Opcode != profile.WSText || json.Unmarshal(m.Payload, &msg) != nil {
			return false
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		switch {
		case msg.Join != nil && msg.User != nil:
			answer := fmt.Appendf(nil, `{"joined":%q}`, *msg.Join)
			if s == 0 {
				tok := make([]byte, 12)
				rand.Read(tok)
				ticket := hex.EncodeToString(tok)
				if !h.forget {
					h.tickets[ticket] = *msg.User
				}
				h.issued++
				answer = fmt.Appendf(nil, `{"joined":%q,%q:%q}`, *msg.Join, h.key, ticket)
				if h.answer != nil {
					answer = h.answer(*msg.Join, ticket)
				}
			} else {
				if msg.Ticket == nil || h.tickets[*msg.Ticket] != *msg.User {
					h.refused++
					c.send([]byte(`{"error":"bad_ticket"}`))
					c.mu.Lock()
					c.conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 240}, nil))
					c.mu.Unlock()
					return true
				}
				delete(h.tickets, *msg.Ticket)
			}
			room = *msg.Join
			if h.rooms[s][room] == nil {
				h.rooms[s][room] = map[*nkConn]bool{}
			}
			h.rooms[s][room][c] = true
			h.joins[s]++
			c.send(answer)
		case msg.Chat != nil && msg.Ts != nil && room != "":
			h.chats[s]++
			out := fmt.Appendf(nil, `{"msg":%q,"ts":%q}`, *msg.Chat, *msg.Ts)
			for peer := range h.rooms[s][room] {
				if peer != c {
					h.deliv[s]++ // counted before it goes: the client's count is never ahead
					peer.send(out)
				}
			}
		}
		return false
	})
}

// handoverClient is the recorded client: on the first server it joins
// room hall, takes its ticket from the answer, chats, closes; on the
// next it joins arena with that ticket, chats, closes.
func handoverClient(first, next, user string, chats int) error {
	return handoverClientOver(func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }, first, next, user, chats)
}

// handoverClientOver is handoverClient connecting with dial.
func handoverClientOver(dial func(string) (net.Conn, error), first, next, user string, chats int) error {
	var ticket string
	for s, addr := range []string{first, next} {
		conn, err := dial(addr)
		if err != nil {
			return err
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(conn, "GET /play HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", addr, profile.NewWSNonce())
		in := bufio.NewReader(conn)
		if status, err := in.ReadString('\n'); err != nil || !strings.Contains(status, " 101 ") {
			conn.Close()
			return fmt.Errorf("upgrade %s: %q %v", addr, status, err)
		}
		for {
			if l, err := in.ReadString('\n'); err != nil || l == "\r\n" {
				break
			}
		}
		key := profile.NewWSKey()
		join := fmt.Sprintf(`{"join":"hall","user":%q}`, user)
		if s == 1 {
			join = fmt.Sprintf(`{"join":"arena","user":%q,"ticket":%q}`, user, ticket)
		}
		conn.Write(profile.AppendWSFrame(nil, profile.WSText, []byte(join), key))
		var answer struct{ Joined, Ticket, Error string }
		var rd profile.WSReader
		buf := make([]byte, 1024)
		for answer.Joined == "" && answer.Error == "" {
			k, err := in.Read(buf)
			if err != nil {
				conn.Close()
				return fmt.Errorf("join %s: %v", addr, err)
			}
			rd.Feed(buf[:k], func(m profile.WSMessage) error { return json.Unmarshal(m.Payload, &answer) })
		}
		if answer.Error != "" || (s == 0 && answer.Ticket == "") {
			conn.Close()
			return fmt.Errorf("join %s: %+v", addr, answer)
		}
		if s == 0 {
			ticket = answer.Ticket
		}
		for i := range chats {
			time.Sleep(40 * time.Millisecond)
			conn.Write(profile.AppendWSFrame(nil, profile.WSText, fmt.Appendf(nil, `{"chat":"hi %d","ts":"%d"}`, i, time.Now().UnixNano()), key))
		}
		conn.Write(profile.AppendWSFrame(nil, profile.WSClose, []byte{3, 232}, key))
		for { // until the server's close
			if _, err := in.Read(buf); err != nil {
				break
			}
		}
		conn.Close()
	}
	return nil
}

// TestCarriedBetweenTurns: the ticket the first server handed each
// client, recorded live, is carried to that client's next connection at
// replay as an HTTP step's take is: --flows all, nothing written, every
// client's next join accepted with its own ticket, the servers' counts
// equal the fleet's for each connection. A first server that no longer
// hands the ticket where the recording had it, or a next server that
// forgot the tickets, fails each client's next connection with one
// reason and the run with one line; so does a first server's answer
// that is not JSON, and one over the message bound stops the run.
func TestCarriedBetweenTurns(t *testing.T) {
	t.Parallel()
	h := startHandover(t)
	capPath := recordLive(t, h.addr[0], h.addr[1], func() {
		if err := handoverClient(h.addr[0], h.addr[1], "rec-user-01", 6); err != nil {
			t.Fatal(err)
		}
	})
	prof := filepath.Join("testdata", "handover", "chat.yaml")
	docExampleIs(t, "# A chat whose first server hands", prof)
	insp := inspectProfile(t, prof, capPath)
	if !strings.Contains(insp, `at $.ticket is sent in flow 1's client message #0`) {
		t.Fatalf("inspect proposes no ticket link:\n%s", insp)
	}
	run := func(clients int, args ...string) result {
		return replay(t, append([]string{"--profile", prof, "--capture", capPath, "--flows", "all", "--target", h.addr[0], "--clients", fmt.Sprint(clients),
			"--login-interval", "5ms", "--heartbeat", "0"}, args...)...)
	}

	t.Run("20 clients", func(t *testing.T) {
		h.reset("ticket")
		const clients = 20
		res := run(clients, "--login-timeout", "20s", "--after-logins", "1s", "--drain-deliveries", "20s")
		mustOK(t, res)
		s, n := res.sum, res.sum.NextConnections
		if !strings.Contains(res.stdout+res.stderr, "carries to its next connection the values its own server handed out: ticket (flow 0's socket message #0 at $.ticket, sent in flow 1's client message #0)") ||
			!strings.Contains(res.stdout+res.stderr, "are one client's connections in turn") {
			t.Fatalf("the notes do not carry the ticket in turn:\n%s%s", res.stdout, res.stderr)
		}
		h.mu.Lock()
		issued, refused, joins, chats, deliv := h.issued, h.refused, h.joins, h.chats, h.deliv
		h.mu.Unlock()
		if s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 ||
			n == nil || n.Tried != clients || n.LoggedIn != clients || len(n.Failed) != 0 ||
			issued != clients || refused != 0 || joins != [2]int{clients, clients} || len(s.Flows) != 2 {
			t.Fatalf("logins %d of %d, failed %v, disconnects %v, next %+v; the servers issued %d tickets, refused %d, joined %v\n%s%s",
				s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, s.Disconnects, n, issued, refused, joins, res.stdout, res.stderr)
		}
		for k, fc := range s.Flows {
			if fc.Logins != clients || fc.Sent != chats[k] || fc.Received != deliv[k] || fc.Sent == 0 || fc.Received == 0 {
				t.Errorf("flow %d: %d logins, sent %d, received %d; its server: chats %d, delivered %d", fc.Flow, fc.Logins, fc.Sent, fc.Received, chats[k], deliv[k])
			}
		}
	})

	t.Run("not carried", func(t *testing.T) {
		for _, tc := range []struct {
			key, reason string
			forget      bool
		}{
			// The first server hands the ticket under another key: the
			// first connections log in, the next have no ticket to send.
			{"pass", "flow1_missing_ticket", false},
			// The next server forgot the tickets: it refuses them.
			{"ticket", "flow1_badticket", true}, // the profile's reason, as labels are written
		} {
			h.reset(tc.key)
			if tc.forget {
				h.mu.Lock()
				h.forget = true
				h.mu.Unlock()
			}
			res := run(5, "--login-timeout", "10s", "--after-logins", "300ms")
			s, n := res.sum, res.sum.NextConnections
			if res.code == 0 || s.LoginsSucceeded != 5 || n == nil || n.Failed[tc.reason] != 5 || len(n.Failed) != 1 || n.LoggedIn != 0 ||
				!strings.Contains(res.stderr, tc.reason) || strings.Contains(res.stderr, "goroutine ") {
				t.Errorf("%s: exit %d, logins %d, next %+v; want 5 logins, 5 × %s next, a non-zero exit with one line\n%s%s", tc.reason, res.code, s.LoginsSucceeded, n, tc.reason, res.stdout, res.stderr)
			}
			h.mu.Lock()
			h.forget = false
			h.mu.Unlock()
		}
	})

	// The first server's answer hostile to the value carried. Not JSON:
	// each client logs in, and its next connection fails as missing the
	// value, one reason a client, the run non-zero with one line. A
	// ticket of 1 MiB: the answer is over the profile's message bound,
	// refused as it arrives (never held); at the first login the run
	// stops with one line saying so.
	hostile := func(t *testing.T, answer func(room, ticket string) []byte) result {
		h.reset("ticket")
		h.mu.Lock()
		h.answer = answer
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.answer = nil
			h.mu.Unlock()
		}()
		return run(5, "--login-timeout", "10s", "--after-logins", "300ms")
	}
	t.Run("not JSON", func(t *testing.T) {
		// The joined answer still matches its kind; its JSON is cut.
		res := hostile(t, func(room, ticket string) []byte { return fmt.Appendf(nil, `{"joined":%q,"ticket":"%s`, room, ticket) })
		s, n := res.sum, res.sum.NextConnections
		const want = "flow1_missing_ticket"
		if res.code == 0 || s.LoginsSucceeded != 5 || n == nil || n.Failed[want] != 5 || len(n.Failed) != 1 || n.LoggedIn != 0 ||
			!strings.Contains(lastLine(res.stderr), want) || strings.Contains(res.stderr, "goroutine ") {
			t.Errorf("exit %d, logins %d, next %+v; want 5 logins, 5 × %s next, a non-zero exit with one line\n%s%s", res.code, s.LoginsSucceeded, n, want, res.stdout, res.stderr)
		}
	})
	t.Run("1 MiB ticket", func(t *testing.T) {
		big := strings.Repeat("t", profile.DefaultMaxMessage)
		res := hostile(t, func(room, _ string) []byte { return fmt.Appendf(nil, `{"joined":%q,"ticket":%q}`, room, big) })
		want := fmt.Sprintf("over the maximum %d), which is not the handover-chat protocol", profile.DefaultMaxMessage)
		if l := lastLine(res.stderr); res.code == 0 || !strings.Contains(l, want) || !strings.Contains(l, "answered the first login with") || strings.Contains(res.stderr, "goroutine ") {
			t.Errorf("exit %d; want a non-zero exit and one line ending %q\n%s%s", res.code, want, res.stdout, res.stderr)
		}
	})
}

// TestCarriedBetweenTurnsTLS: the same over TLS on both servers, the
// recorded client's session keys in a key log: the fleet decrypts the
// recording, makes its own TLS connection to each server in turn
// (--tls), and carries each client's ticket: every next join accepted,
// each server's counts equal the fleet's, a handshake per connection.
func TestCarriedBetweenTurnsTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	h := startHandover(t, pki.cert, pki.key)
	caPEM, err := os.ReadFile(pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	keys := filepath.Join(t.TempDir(), "keys.log")
	keyLog, err := os.Create(keys)
	if err != nil {
		t.Fatal(err)
	}
	capPath := recordLive(t, h.addr[0], h.addr[1], func() {
		dial := func(addr string) (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", KeyLogWriter: keyLog})
		}
		if err := handoverClientOver(dial, h.addr[0], h.addr[1], "rec-user-01", 6); err != nil {
			t.Fatal(err)
		}
	})
	keyLog.Close()
	const clients = 10
	res := replay(t, "--profile", filepath.Join("testdata", "handover", "chat.yaml"), "--capture", capPath, "--tls-keylog", keys, "--flows", "all",
		"--target", h.addr[0], "--tls", "--tls-ca", pki.ca, "--clients", fmt.Sprint(clients),
		"--login-interval", "5ms", "--heartbeat", "0", "--login-timeout", "20s", "--after-logins", "1s", "--drain-deliveries", "20s")
	mustOK(t, res)
	s, n := res.sum, res.sum.NextConnections
	h.mu.Lock()
	issued, refused, joins, chats, deliv := h.issued, h.refused, h.joins, h.chats, h.deliv
	h.mu.Unlock()
	if s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 ||
		n == nil || n.Tried != clients || n.LoggedIn != clients || len(n.Failed) != 0 || len(s.Flows) != 2 ||
		issued != clients+1 || refused != 0 || joins != [2]int{clients + 1, clients + 1} || s.TLS == nil || s.TLS.Handshakes != 2*clients {
		t.Fatalf("logins %d of %d, failed %v, disconnects %v, next %+v, tls %+v; the servers issued %d tickets, refused %d, joined %v (the recorded client's included)\n%s%s",
			s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, s.Disconnects, n, s.TLS, issued, refused, joins, res.stdout, res.stderr)
	}
	for k, fc := range s.Flows {
		// The recorded client's own chats and deliveries (it was alone in
		// each room: none) are the servers' too.
		if fc.Logins != clients || fc.Sent != chats[k]-6 || fc.Received != deliv[k] || fc.Received == 0 {
			t.Errorf("flow %d: %d logins, sent %d, received %d; its server: chats %d (6 recorded), delivered %d", fc.Flow, fc.Logins, fc.Sent, fc.Received, chats[k], deliv[k])
		}
	}
}

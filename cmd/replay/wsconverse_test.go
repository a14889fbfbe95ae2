package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jsonWSServer is a small JSON chat over WebSocket written for this test
// (its frames by hand, not internal/profile's): it pings every client
// with {"type":"ping","id":N} every 200 ms and closes the connection with
// status 4000 "pong late" when a ping is 700 ms without its pong, or
// 4001 for a pong it did not ask for. It answers a join with a welcome
// and counts chats and distinct users.
type jsonWSServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	stop chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]bool
	users map[string]bool
	chats atomic.Int64
}

func startJSONWS(t *testing.T) *jsonWSServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &jsonWSServer{ln: ln, stop: make(chan struct{}), conns: map[net.Conn]bool{}, users: map[string]bool{}}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		close(s.stop)
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *jsonWSServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(c) })
	}
}

// wsConn is one server connection: writes under mu, pings outstanding.
type wsConn struct {
	c       net.Conn
	mu      sync.Mutex
	pending map[int]time.Time
	closed  bool
}

func (w *wsConn) write(op byte, payload []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeLocked(op, payload)
}

func (w *wsConn) writeLocked(op byte, payload []byte) {
	if w.closed {
		return
	}
	h := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		h = append(h, byte(n))
	default:
		h = binary.BigEndian.AppendUint16(append(h, 126), uint16(n))
	}
	w.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	w.c.Write(append(h, payload...))
}

// closeWith sends a close frame with code and reason and closes.
func (w *wsConn) closeWith(code uint16, reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeLocked(0x8, append(binary.BigEndian.AppendUint16(nil, code), reason...))
	w.closed = true
	w.c.Close()
}

func (s *jsonWSServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	key := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if k, ok := strings.CutPrefix(strings.ToLower(line), "sec-websocket-key:"); ok {
			key = strings.TrimSpace(line[len(line)-len(k):])
		}
		if line == "\r\n" {
			break
		}
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	w := &wsConn{c: c, pending: map[int]time.Time{}}
	done := make(chan struct{})
	defer close(done)
	s.wg.Go(func() { s.pinger(w, done) })
	for {
		op, payload, err := readClientFrame(r)
		if err != nil {
			return
		}
		switch op {
		case 0x8:
			return
		case 0x9:
			w.write(0xa, payload)
			continue
		case 0x1:
		default:
			continue
		}
		var m struct {
			Type string `json:"type"`
			User string `json:"user"`
			ID   int    `json:"id"`
		}
		if json.Unmarshal(payload, &m) != nil {
			w.closeWith(4002, "bad json")
			return
		}
		switch m.Type {
		case "join":
			s.mu.Lock()
			s.users[m.User] = true
			s.mu.Unlock()
			w.write(0x1, []byte(`{"type":"welcome"}`))
		case "chat":
			s.chats.Add(1)
		case "pong":
			w.mu.Lock()
			_, ok := w.pending[m.ID]
			delete(w.pending, m.ID)
			w.mu.Unlock()
			if !ok {
				w.closeWith(4001, "unsolicited pong")
				return
			}
		}
	}
}

func (s *jsonWSServer) pinger(w *wsConn, done <-chan struct{}) {
	tk := time.NewTicker(200 * time.Millisecond)
	defer tk.Stop()
	for id := 1; ; id++ {
		select {
		case <-s.stop:
			return
		case <-done:
			return
		case <-tk.C:
		}
		w.mu.Lock()
		late := false
		for _, at := range w.pending {
			late = late || time.Since(at) > 700*time.Millisecond
		}
		if !late {
			w.pending[id] = time.Now()
			w.writeLocked(0x1, fmt.Appendf(nil, `{"type":"ping","id":%d}`, id))
		}
		w.mu.Unlock()
		if late {
			w.closeWith(4000, "pong late")
			return
		}
	}
}

// readClientFrame reads one masked client frame (no fragments: the
// fleet and the recording client send whole messages).
func readClientFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(b[:]))
	case 127:
		return 0, nil, errors.New("frame too large for this server")
	}
	if h[1]&0x80 == 0 {
		return 0, nil, errors.New("unmasked client frame")
	}
	var key [4]byte
	if _, err := io.ReadFull(r, key[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
	return h[0] & 0x0f, p, nil
}

// jsonWSSession is the recorded client: the upgrade, a join as
// rec-user-01, then five chats 60 ms apart (done before the server's
// first ping falls due, so the recording holds no pong to replay).
func jsonWSSession(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /chat?user=rec-user-01 HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
	r := bufio.NewReader(c)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, " 101 ") {
		return fmt.Errorf("upgrade answered %q: %v", status, err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			break
		}
	}
	send := func(msg string) {
		key := []byte{1, 2, 3, 4}
		f := append([]byte{0x81, 0x80 | byte(len(msg))}, key...)
		for i := range len(msg) {
			f = append(f, msg[i]^key[i&3])
		}
		c.Write(f)
	}
	send(`{"type":"join","user":"rec-user-01"}`)
	var h [2]byte // the welcome
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(r, make([]byte, h[1]&0x7f)); err != nil {
		return err
	}
	for i := range 5 {
		time.Sleep(60 * time.Millisecond)
		send(fmt.Sprintf(`{"type":"chat","n":%d}`, i))
	}
	return nil
}

// TestJSONWebSocketReactions replays a JSON chat over WebSocket whose
// server pings with an application message: with the profile's reaction
// (its own WebSocket message per pong, the ping's id echoed) 50 clients,
// 5 of them sending, hold 2.5 s after the last login (over three pong
// deadlines, and at least 10 pings a client however slow the logins) with no
// disconnect and every chat counted by the server; without it every
// client is cut, counted by the server's close code (ws_4000).
func TestJSONWebSocketReactions(t *testing.T) {
	// Not parallel: its server cuts a client whose pong is late, so another test beside it would eat the margin the reaction has.
	srv := startJSONWS(t)
	out := filepath.Join(t.TempDir(), "ws.pcap")
	p, listen := startRecordProxy(t, srv.ln.Addr().String(), out)
	if err := jsonWSSession(listen); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, p.Stderr)
	}
	prof := filepath.Join("testdata", "json-ws.yaml")
	base := []string{"--capture", out, "--target", srv.ln.Addr().String(), "--clients", "50",
		"--login-interval", "5ms", "--after-logins", "2500ms", "--heartbeat", "60s"}

	chats0 := srv.chats.Load()
	// The loop inspect suggests from the flow's own messages: how the
	// recorded client closed decides the last index (a fixed #1,#5 failed
	// with exit 2 on a recording that came out otherwise, at load 19).
	res := replay(t, append([]string{"--profile", prof, "--senders", "5", "--loop", suggestedLoopOf(t, prof, out)}, base...)...)
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 50 || len(s.Disconnects) != 0 || s.FramesSent["pong"] < 50*10 {
		t.Fatalf("logins %d disconnects %v pongs %d: want 50, none, at least 10 a client\n%s", s.LoginsSucceeded, s.Disconnects, s.FramesSent["pong"], res.stdout)
	}
	srv.mu.Lock()
	users := len(srv.users)
	srv.mu.Unlock()
	chats := srv.chats.Load() - chats0
	if chats != s.MessagesSent || chats == 0 || users < 51 {
		t.Errorf("server counted %d chats from %d users (the recording's included), the fleet sent %d from 50", chats, users, s.MessagesSent)
	}
	t.Logf("fleet sent %d chats, server counted %d from %d users; pongs %d", s.MessagesSent, chats, users, s.FramesSent["pong"])

	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(b), "reactions:")
	silent := filepath.Join(t.TempDir(), "silent.yaml")
	if err := os.WriteFile(silent, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	res = replay(t, append([]string{"--profile", silent, "--receive-only"}, base...)...)
	if s := res.sum; s.LoginsSucceeded != 50 || s.Disconnects["ws_4000"] != 50 {
		t.Fatalf("without the reaction: logins %d disconnects %v, want 50 and ws_4000=50\n%s", s.LoginsSucceeded, s.Disconnects, res.stdout)
	}
}

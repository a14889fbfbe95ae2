package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// queueLen bounds each member's outbound queue; past it a delivery is
// dropped and counted (a slow consumer must not stall its room).
const queueLen = 1024

// writeWait bounds one write to a member.
const writeWait = 5 * time.Second

// maxMessage bounds a client message.
const maxMessage = 64 << 10

// counters are the server's own counts, read at /stats and /metrics.
type counters struct {
	accepted, connections, in, out, dropped atomic.Int64
}

// Stats is /stats's answer.
type Stats struct {
	Accepted    int64 `json:"accepted"`
	Connections int64 `json:"connections"`
	Rooms       int   `json:"rooms"`
	In          int64 `json:"in"`
	Out         int64 `json:"out"`
	Dropped     int64 `json:"dropped"`
}

// server holds the rooms. Lock order: mu, then nothing (a member's queue
// is a channel, sent to without blocking).
type server struct {
	up  websocket.Upgrader
	n   counters
	wg  sync.WaitGroup // every connection's reader and writer
	ctx context.Context

	mu    sync.RWMutex
	rooms map[string]map[*member]struct{}
	conns map[*member]struct{}
}

// member is one connection: its reader runs in the handler's goroutine,
// its writer drains q until done closes.
type member struct {
	c    *websocket.Conn
	room string
	q    chan outMsg
	done chan struct{}
	once sync.Once
}

type outMsg struct {
	op       int
	data     []byte
	delivery bool // counted as out (the joined message is not)
}

func newServer(ctx context.Context) *server {
	return &server{
		ctx: ctx,
		up: websocket.Upgrader{
			ReadBufferSize:  1024,
			WriteBufferSize: 1024,
			// A pool: an idle member holds no write buffer.
			WriteBufferPool: &sync.Pool{},
			CheckOrigin:     func(*http.Request) bool { return true },
		},
		rooms: map[string]map[*member]struct{}{},
		conns: map[*member]struct{}{},
	}
}

func runServer(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wsroom", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve WebSocket and /stats on (loopback)")
	cert := fs.String("tls-cert", "", "PEM certificate: serve wss:// and https:// (TLS terminated here, crypto/tls)")
	key := fs.String("tls-key", "", "PEM key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	scheme := "ws"
	if *cert != "" {
		kp, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{kp}})
		scheme = "wss"
	}
	s := newServer(ctx)
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", s.serveStats)
	mux.HandleFunc("/metrics", s.serveMetrics)
	mux.HandleFunc("/", s.serveWS)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The address is after ws= either way (scripts read it); the scheme
	// says whether it is TLS.
	fmt.Fprintf(stdout, "listening ws=%s scheme=%s\n", ln.Addr(), scheme)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-served:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	s.closeAll() // hijacked connections are not the http.Server's
	s.wg.Wait()
	<-served
	st := s.stats()
	fmt.Fprintf(stdout, "stats accepted=%d in=%d out=%d dropped=%d\n", st.Accepted, st.In, st.Out, st.Dropped)
	return err
}

// roomOf reads the room from /room/NAME or ?room=NAME.
func roomOf(r *http.Request) string {
	if name, ok := strings.CutPrefix(r.URL.Path, "/room/"); ok && name != "" {
		return name
	}
	if q := r.URL.Query().Get("room"); q != "" {
		return q
	}
	return "lobby"
}

func (s *server) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade answered the client already
	}
	m := &member{c: c, room: roomOf(r), q: make(chan outMsg, queueLen), done: make(chan struct{})}
	if !s.join(m) {
		c.Close()
		return
	}
	s.n.accepted.Add(1)
	s.n.connections.Add(1)
	defer s.n.connections.Add(-1)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.write(m) }()
	m.q <- outMsg{op: websocket.TextMessage, data: fmt.Appendf(nil, `{"type":"joined","room":%q}`, m.room)}
	s.read(m)
}

// join adds m to its room; false once the server shuts down.
func (s *server) join(m *member) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.wg.Add(1) // the reader, done in leave
	s.conns[m] = struct{}{}
	r := s.rooms[m.room]
	if r == nil {
		r = map[*member]struct{}{}
		s.rooms[m.room] = r
	}
	r[m] = struct{}{}
	return true
}

func (s *server) leave(m *member) {
	s.mu.Lock()
	delete(s.conns, m)
	if r := s.rooms[m.room]; r != nil {
		delete(r, m)
		if len(r) == 0 {
			delete(s.rooms, m.room)
		}
	}
	s.mu.Unlock()
	m.stop()
	s.wg.Done()
}

func (m *member) stop() {
	m.once.Do(func() {
		close(m.done)
		m.c.Close()
	})
}

func (s *server) closeAll() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for m := range s.conns {
		m.stop()
	}
}

// read takes the member's messages until its socket fails or closes.
func (s *server) read(m *member) {
	defer s.leave(m)
	m.c.SetReadLimit(maxMessage)
	for {
		op, data, err := m.c.ReadMessage()
		if err != nil {
			return
		}
		s.n.in.Add(1)
		s.cast(m, outMsg{op: op, data: data, delivery: true})
	}
}

// cast queues msg to every other member of from's room.
func (s *server) cast(from *member, msg outMsg) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for o := range s.rooms[from.room] {
		if o == from {
			continue
		}
		select {
		case o.q <- msg:
		default:
			s.n.dropped.Add(1)
		}
	}
}

// write sends the member's queue; a write that fails ends the member.
func (s *server) write(m *member) {
	for {
		select {
		case <-m.done:
			return
		case msg := <-m.q:
			m.c.SetWriteDeadline(time.Now().Add(writeWait))
			if err := m.c.WriteMessage(msg.op, msg.data); err != nil {
				m.stop()
				return
			}
			if msg.delivery {
				s.n.out.Add(1)
			}
		}
	}
}

func (s *server) stats() Stats {
	s.mu.RLock()
	rooms := len(s.rooms)
	s.mu.RUnlock()
	return Stats{Accepted: s.n.accepted.Load(), Connections: s.n.connections.Load(), Rooms: rooms,
		In: s.n.in.Load(), Out: s.n.out.Load(), Dropped: s.n.dropped.Load()}
}

func (s *server) serveStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.stats())
}

func (s *server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	st := s.stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE wsroom_messages_in_total counter\nwsroom_messages_in_total %d\n", st.In)
	fmt.Fprintf(w, "# TYPE wsroom_messages_out_total counter\nwsroom_messages_out_total %d\n", st.Out)
	fmt.Fprintf(w, "# TYPE wsroom_messages_dropped_total counter\nwsroom_messages_dropped_total %d\n", st.Dropped)
	fmt.Fprintf(w, "# TYPE wsroom_connections_accepted_total counter\nwsroom_connections_accepted_total %d\n", st.Accepted)
	fmt.Fprintf(w, "# TYPE wsroom_connections gauge\nwsroom_connections %d\n", st.Connections)
	fmt.Fprintf(w, "# TYPE wsroom_rooms gauge\nwsroom_rooms %d\n", st.Rooms)
}

package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProxyConfig configures a recording proxy.
type ProxyConfig struct {
	// Listen is where clients connect (TCP) and send datagrams (UDP).
	Listen string
	// Upstream is the relay the proxy forwards to, on both transports.
	Upstream string
	// Writer receives the traffic as synthesized packets. The proxy never
	// closes it.
	Writer *Writer
	// UDPIdle ends a UDP client's session after this long without a
	// datagram either way (default 3 min, the relay's idle timeout).
	UDPIdle time.Duration
	// MaxUDPClients caps concurrent UDP client sessions (default 4096);
	// datagrams from further clients are dropped and counted.
	MaxUDPClients int
	// DialTimeout bounds connecting to the upstream (default 5 s).
	DialTimeout time.Duration
	// TLS, when set, terminates the clients' TLS and/or speaks TLS to
	// the upstream: the capture holds the plaintext, each connection's
	// SYN noted with what its client's handshake was (pcapng).
	TLS *ProxyTLS
}

// ProxyStats counts what a proxy forwarded.
type ProxyStats struct {
	TCPConns, UDPClients, UDPDropped, DialFailures int64
	// TLSFailures counts failed handshakes, either side; LastTLSError
	// says why the last one failed.
	TLSFailures  int64
	LastTLSError string
}

// Proxy forwards TCP connections and UDP datagrams to an upstream and writes
// what passes as packets: each TCP connection and each UDP client address is
// its own flow, between the client's real address and the upstream's.
type Proxy struct {
	cfg      ProxyConfig
	ln       *net.TCPListener
	pc       *net.UDPConn
	upTCP    netip.AddrPort
	upUDP    *net.UDPAddr
	stats    struct{ tcp, udp, dropped, dialFail, tlsFail atomic.Int64 }
	lastTLS  atomic.Value // string: the last handshake failure
	mu       sync.Mutex
	conns    map[io.Closer]struct{} // open sockets, closed on shutdown
	sessions map[netip.AddrPort]*udpSession
	closing  bool
	wg       sync.WaitGroup
}

// NewProxy binds the listen address on TCP and UDP.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.Writer == nil {
		return nil, errors.New("proxy: no writer")
	}
	if cfg.UDPIdle <= 0 {
		cfg.UDPIdle = 3 * time.Minute
	}
	if cfg.MaxUDPClients <= 0 {
		cfg.MaxUDPClients = 4096
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	upTCP, err := net.ResolveTCPAddr("tcp", cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy upstream %q: %w", cfg.Upstream, err)
	}
	upUDP, err := net.ResolveUDPAddr("udp", cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy upstream %q: %w", cfg.Upstream, err)
	}
	laddr, err := net.ResolveTCPAddr("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen %q: %w", cfg.Listen, err)
	}
	ln, pc, err := listenBoth(laddr)
	if err != nil {
		return nil, err
	}
	return &Proxy{cfg: cfg, ln: ln, pc: pc, upTCP: upTCP.AddrPort(), upUDP: upUDP,
		conns: map[io.Closer]struct{}{}, sessions: map[netip.AddrPort]*udpSession{}}, nil
}

// listenBoth binds laddr's port on TCP and UDP. Port 0 is a port the
// kernel picks for TCP; when another socket holds that port for UDP, it
// picks again (bounded), so `--listen 127.0.0.1:0` always gives one port
// for both, which the proxy prints.
func listenBoth(laddr *net.TCPAddr) (*net.TCPListener, *net.UDPConn, error) {
	const tries = 20
	for i := 0; ; i++ {
		ln, err := net.ListenTCP("tcp", laddr)
		if err != nil {
			return nil, nil, fmt.Errorf("proxy listen: %w", err)
		}
		uaddr := &net.UDPAddr{IP: laddr.IP, Port: ln.Addr().(*net.TCPAddr).Port, Zone: laddr.Zone}
		pc, err := net.ListenUDP("udp", uaddr)
		if err == nil {
			return ln, pc, nil
		}
		ln.Close()
		if laddr.Port != 0 || i == tries-1 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("proxy listen udp: %w", err)
		}
	}
}

// Addr is the address the proxy listens on (TCP and UDP).
func (p *Proxy) Addr() netip.AddrPort { return p.ln.Addr().(*net.TCPAddr).AddrPort() }

// Stats returns what the proxy has forwarded so far.
func (p *Proxy) Stats() ProxyStats {
	last, _ := p.lastTLS.Load().(string)
	return ProxyStats{TCPConns: p.stats.tcp.Load(), UDPClients: p.stats.udp.Load(),
		UDPDropped: p.stats.dropped.Load(), DialFailures: p.stats.dialFail.Load(),
		TLSFailures: p.stats.tlsFail.Load(), LastTLSError: last}
}

// Run forwards until ctx is done, then closes every socket, writes the FINs
// of open TCP flows, waits for its goroutines and flushes the writer.
func (p *Proxy) Run(ctx context.Context) error {
	p.wg.Add(3)
	go func() { defer p.wg.Done(); p.acceptLoop(ctx) }()
	go func() { defer p.wg.Done(); p.udpLoop(ctx) }()
	go func() { defer p.wg.Done(); p.flushLoop(ctx) }()
	<-ctx.Done()
	p.mu.Lock()
	p.closing = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.pc.Close()
	p.wg.Wait()
	return p.cfg.Writer.Flush()
}

func (p *Proxy) flushLoop(ctx context.Context) {
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = p.cfg.Writer.Flush() // a failing writer reports on the next write too
		}
	}
}

// track registers a socket to close on shutdown; false if shutting down.
func (p *Proxy) track(c io.Closer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c io.Closer) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) acceptLoop(ctx context.Context) {
	for {
		c, err := p.ln.AcceptTCP()
		if err != nil {
			return // listener closed on shutdown
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serveTCP(ctx, c) }()
	}
}

func unmap(ap netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) }

func (p *Proxy) serveTCP(ctx context.Context, c *net.TCPConn) {
	defer p.untrack(c)
	var down net.Conn = c
	var info *TLSInfo
	if p.cfg.TLS.terminates() {
		tc, i, err := p.cfg.TLS.acceptTLS(ctx, c)
		if err != nil {
			p.tlsFailed(err)
			return
		}
		down, info = tc, i
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	uc, err := d.DialContext(ctx, "tcp", p.upTCP.String())
	if err != nil {
		p.stats.dialFail.Add(1)
		return
	}
	upTCP := uc.(*net.TCPConn)
	if !p.track(upTCP) {
		upTCP.Close()
		return
	}
	defer p.untrack(upTCP)
	var up net.Conn = upTCP
	if t := p.cfg.TLS; t != nil && t.Upstream {
		host, _, _ := net.SplitHostPort(p.cfg.Upstream)
		tc, err := t.dialTLS(ctx, upTCP, host, info)
		if err != nil {
			p.tlsFailed(err)
			return
		}
		up = tc
	}
	p.stats.tcp.Add(1)
	client := unmap(c.RemoteAddr().(*net.TCPAddr).AddrPort())
	server := unmap(upTCP.RemoteAddr().(*net.TCPAddr).AddrPort())
	note := ""
	if info != nil {
		note = info.Note()
	}
	flow, err := p.cfg.Writer.OpenTCPNote(time.Now(), client, server, note)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pump(flow, true, down, up) }()
	pump(flow, false, up, down)
	wg.Wait()
}

// tlsFailed counts a failed handshake and keeps why.
func (p *Proxy) tlsFailed(err error) {
	p.stats.tlsFail.Add(1)
	p.lastTLS.Store(err.Error())
}

// halfCloser is a connection whose sending side closes alone (TCP's FIN,
// TLS's close_notify).
type halfCloser interface{ CloseWrite() error }

// pump copies src to dst, writing each read to the capture before
// forwarding it, and ends the flow's direction when src ends.
func pump(flow *TCPConn, fromClient bool, src, dst net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if flow.Data(time.Now(), fromClient, buf[:n]) != nil {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = flow.Close(time.Now(), fromClient)
	if hc, ok := dst.(halfCloser); ok {
		_ = hc.CloseWrite()
	}
}

// udpSession is one UDP client: its own upstream socket, so replies can be
// told apart.
type udpSession struct {
	client netip.AddrPort
	up     *net.UDPConn
	last   atomic.Int64 // unix nanos of the last datagram either way
}

func (p *Proxy) udpLoop(ctx context.Context) {
	buf := make([]byte, 64<<10)
	server := unmap(p.upUDP.AddrPort())
	for {
		n, from, err := p.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // socket closed on shutdown
		}
		from = unmap(from)
		s := p.udpSession(ctx, from)
		if s == nil {
			continue
		}
		now := time.Now()
		s.last.Store(now.UnixNano())
		_ = p.cfg.Writer.UDP(now, from, server, buf[:n])
		_, _ = s.up.Write(buf[:n])
	}
}

func (p *Proxy) udpSession(ctx context.Context, from netip.AddrPort) *udpSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[from]; s != nil {
		return s
	}
	if p.closing || len(p.sessions) >= p.cfg.MaxUDPClients {
		p.stats.dropped.Add(1)
		return nil
	}
	up, err := net.DialUDP("udp", nil, p.upUDP)
	if err != nil {
		p.stats.dialFail.Add(1)
		return nil
	}
	s := &udpSession{client: from, up: up}
	p.sessions[from] = s
	p.conns[up] = struct{}{}
	p.stats.udp.Add(1)
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.udpReplies(ctx, s) }()
	return s
}

// udpReplies forwards the upstream's datagrams to the client until the
// session idles out or the proxy stops.
func (p *Proxy) udpReplies(ctx context.Context, s *udpSession) {
	defer func() {
		p.mu.Lock()
		delete(p.sessions, s.client)
		p.mu.Unlock()
		p.untrack(s.up)
	}()
	buf := make([]byte, 64<<10)
	server := unmap(p.upUDP.AddrPort())
	for ctx.Err() == nil {
		_ = s.up.SetReadDeadline(time.Now().Add(time.Second))
		n, err := s.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if time.Since(time.Unix(0, s.last.Load())) > p.cfg.UDPIdle {
					return
				}
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ICMP unreachable from a restarting upstream: keep going
		}
		now := time.Now()
		s.last.Store(now.UnixNano())
		_ = p.cfg.Writer.UDP(now, server, s.client, buf[:n])
		_, _ = p.pc.WriteToUDPAddrPort(buf[:n], s.client)
	}
}

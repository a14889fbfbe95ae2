package relay

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// udpServer is the UDP side: one socket read by one goroutine, which owns
// every UDP session and checks their idle timeouts between datagrams.
type udpServer struct {
	s        *Server
	sessions map[uint64]*client
	// byAddr is the latest session joined from each source, so a join
	// sent again (its joined was lost) gets the same session back.
	byAddr map[netip.AddrPort]*client
	reply  []byte
}

func newUDPServer(s *Server) *udpServer {
	return &udpServer{s: s, sessions: make(map[uint64]*client), byAddr: make(map[netip.AddrPort]*client)}
}

// sendUDP sends one server→client datagram: the frame alone.
func (s *Server) sendUDP(frame []byte, to netip.AddrPort) {
	n, err := s.udp.WriteToUDPAddrPort(frame, to)
	if n > 0 {
		s.m.SentBytes.Add(float64(n))
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("udp send", zap.Stringer("to", to), zap.Error(err))
	}
}

func (u *udpServer) loop(ctx context.Context) {
	s := u.s
	buf := make([]byte, wire.TokenSize+wire.LenSize+s.cfg.MaxFrame+1)
	tick := int64(s.sweepTick())
	next := s.now() + tick
	s.udp.SetReadDeadline(time.Now().Add(time.Duration(tick)))
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if ctx.Err() != nil {
			u.closeAll()
			return
		}
		var ne net.Error
		switch {
		case err == nil:
			u.datagram(buf[:n], netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
		case errors.Is(err, net.ErrClosed):
			u.closeAll()
			return
		case errors.As(err, &ne) && ne.Timeout():
			// the sweep tick
		default:
			s.log.Warn("udp read", zap.Error(err))
		}
		if now := s.now(); now >= next {
			u.sweepIdle(now)
			next = now + tick
			s.udp.SetReadDeadline(time.Now().Add(time.Duration(tick)))
		}
	}
}

// datagram handles one client→server datagram. Nothing goes back to a
// source without a session unless it is a join, and then never more bytes
// than the datagram had.
func (u *udpServer) datagram(d []byte, from netip.AddrPort) {
	s := u.s
	s.m.ReceivedBytes.Add(float64(len(d)))
	token, fr, err := wire.SplitDatagram(d, s.cfg.MaxFrame)
	if err != nil {
		s.m.Rejected(metrics.ReasonGarbage)
		return
	}
	var f wire.Frame
	if err := wire.DecodeBody(wire.Type(fr[wire.LenSize]), fr[wire.HeaderSize:], &f); err != nil {
		var werr *wire.Error
		if errors.As(err, &werr) {
			s.m.Rejected(werr.Code.String())
		} else {
			s.m.Rejected(metrics.ReasonGarbage)
		}
		return
	}
	if token == 0 {
		u.join(&f, from, len(d))
		return
	}
	c := u.sessions[token]
	switch {
	case c == nil:
		s.m.Rejected(metrics.ReasonUnknownSession)
		return
	case c.addr != from:
		s.m.Rejected(metrics.ReasonWrongSource)
		return
	}
	c.lastActive.Store(s.now())
	c.b.recvBytes = 0 // counted above
	if f.Type == wire.TypeLeave {
		c.b.recvMsgs++
		u.end(c, metrics.ReasonLeave, nil)
		return
	}
	if werr := c.handle(&f, 0); werr != nil {
		// Errors on an established session are dropped, not answered, as
		// on the protocol's UDP rules; the session stays.
		s.log.Debug("udp frame refused", zap.Uint64("session", c.id), zap.String("code", werr.Code.String()))
	}
	c.b.flush(s.m)
}

// join handles a datagram with token 0: only a join is allowed there. A
// joined session gets a fresh random token.
func (u *udpServer) join(f *wire.Frame, from netip.AddrPort, size int) {
	s := u.s
	if f.Type != wire.TypeJoin {
		s.m.Rejected(wire.ErrNotJoined.String())
		return
	}
	if c := u.byAddr[from]; c != nil && c.room != nil && c.user == string(f.User) && c.room.Name() == string(f.Room) {
		// A client that did not get its joined in time joins again: a lost
		// datagram, not a second member. It gets its session's joined again.
		c.lastActive.Store(s.now())
		c.rejoined(size)
		return
	}
	if max := s.cfg.MaxConnections; max > 0 && s.nconns.Load() >= int64(max) {
		s.m.Join(wire.ErrServerFull)
		u.answer(from, size, wire.ErrServerFull, "relay at --max-connections")
		return
	}
	c := &client{s: s, id: s.nextID.Add(1), addr: from, token: u.newToken()}
	c.b.recvMsgs++ // the join
	if werr := c.join(f, size); werr != nil {
		u.answer(from, size, werr.Code, werr.Detail)
		c.b.flush(s.m)
		return
	}
	now := s.now()
	c.lastActive.Store(now)
	u.sessions[c.token] = c
	u.byAddr[from] = c
	s.nconns.Add(1)
	s.m.ConnectionsUDP.Inc()
	c.b.flush(s.m)
}

// answer sends an error to a source without a session, cut to fit in
// limit bytes; if even the bare frame does not fit, nothing is sent.
func (u *udpServer) answer(to netip.AddrPort, limit int, code wire.ErrorCode, text string) {
	const bare = wire.HeaderSize + 2
	if limit < bare {
		return
	}
	if len(text) > limit-bare {
		text = text[:limit-bare]
	}
	u.reply = wire.AppendError(u.reply[:0], code, text)
	u.s.sendUDP(u.reply, to)
}

func (u *udpServer) newToken() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails on Linux (Go 1.24+ crypto/rand)
		if t := binary.BigEndian.Uint64(b[:]); t != 0 && u.sessions[t] == nil {
			return t
		}
	}
}

// end closes a session: an optional last error datagram, then it leaves its
// room.
func (u *udpServer) end(c *client, reason string, last []byte) {
	s := u.s
	if last != nil {
		s.sendUDP(last, c.addr)
	}
	c.leave()
	c.b.flush(s.m)
	delete(u.sessions, c.token)
	if u.byAddr[c.addr] == c {
		delete(u.byAddr, c.addr)
	}
	s.nconns.Add(-1)
	s.m.ConnectionsUDP.Dec()
	s.m.Disconnect(reason)
}

func (u *udpServer) sweepIdle(now int64) {
	idle := int64(u.s.cfg.IdleTimeout)
	for _, c := range u.sessions {
		if now-c.lastActive.Load() > idle {
			u.end(c, wire.ErrIdleTimeout.String(), wire.AppendError(nil, wire.ErrIdleTimeout, "nothing received for "+u.s.cfg.IdleTimeout.String()))
		}
	}
}

// closeAll ends every session at shutdown.
func (u *udpServer) closeAll() {
	bye := wire.AppendError(nil, wire.ErrShuttingDown, "relay is stopping")
	for _, c := range u.sessions {
		u.end(c, wire.ErrShuttingDown.String(), bye)
	}
}

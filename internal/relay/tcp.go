package relay

import (
	"errors"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Read buffer bounds: a connection starts with a small buffer (idle
// connections are the common case), doubles it while reads fill it, and
// halves it after a run of short reads.
const (
	minReadBuf   = 512
	maxReadBuf   = 64 << 10
	shrinkAfter  = 8
	maxIOVecsOut = 1024 // chunks per writev; the kernel's IOV_MAX
)

func newTCPClient(s *Server, nc *net.TCPConn) *client {
	c := &client{
		s:          s,
		id:         s.nextID.Add(1),
		tcp:        nc,
		wake:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
	}
	c.out.max = s.cfg.MaxPending
	now := s.now()
	c.unjoinedSince.Store(now)
	c.lastActive.Store(now)
	return c
}

// serve runs c's reader on this goroutine and its writer on another, and
// tears c down when the reader is done.
func (c *client) serve() {
	if !c.s.goFn(c.writeLoop) {
		close(c.writerDone)
		c.out.fail(wire.ErrShuttingDown.String())
	}
	c.readLoop()
	c.finish()
}

func (c *client) readLoop() {
	s := c.s
	p := wire.Parser{MaxFrame: s.cfg.MaxFrame}
	handle := func(f *wire.Frame) error {
		if werr := c.handle(f, 0); werr != nil {
			return werr
		}
		return nil
	}
	buf := make([]byte, minReadBuf)
	short := 0
	broken := false // a protocol error was answered: ignore further input
	for {
		n, err := c.tcp.Read(buf)
		if n > 0 && !broken {
			if closing, _ := c.out.state(); closing {
				broken = true
			}
		}
		if n > 0 && !broken {
			c.lastActive.Store(s.now())
			c.b.recvBytes += n
			if ferr := p.Feed(buf[:n], handle); ferr != nil {
				broken = true
				c.refuse(ferr)
			}
			c.b.flush(s.m)
			buf, short = resize(buf, n, short)
		}
		if err != nil {
			return
		}
	}
}

// resize grows buf after a read that filled it and shrinks it after a run
// of reads that used under a quarter of it.
func resize(buf []byte, n, short int) ([]byte, int) {
	switch {
	case n == len(buf) && len(buf) < maxReadBuf:
		return make([]byte, 2*len(buf)), 0
	case n < len(buf)/4 && len(buf) > minReadBuf:
		if short++; short >= shrinkAfter {
			return make([]byte, len(buf)/2), 0
		}
		return buf, short
	}
	return buf, 0
}

// refuse answers a protocol error with its error frame and closes c.
func (c *client) refuse(err error) {
	var werr *wire.Error
	if !errors.As(err, &werr) {
		c.s.log.Error("read loop", zap.Uint64("conn", c.id), zap.Error(err))
		c.close(wire.ErrMalformed, "internal error")
		return
	}
	switch werr.Code {
	case wire.ErrMalformed, wire.ErrOversized, wire.ErrUnknownType, wire.ErrBadName, wire.ErrBadVersion, wire.ErrBadTarget:
		if werr.Snippet != nil { // from the decoder, not counted yet
			c.s.m.Rejected(werr.Code.String())
		}
	}
	c.s.log.Debug("refused", zap.Uint64("conn", c.id), zap.String("code", werr.Code.String()), zap.String("detail", werr.Detail))
	c.close(werr.Code, werr.Detail)
}

// finish tears c down after its reader stopped: it leaves its room, lets
// the writer flush what is queued (bounded by the write deadline), closes
// the socket and counts the disconnect.
func (c *client) finish() {
	s := c.s
	c.leave()
	c.b.flush(s.m)
	c.out.closeWith(nil, metrics.ReasonClosed)
	c.signal() // also when the queue closed without a wake-up (slow consumer)
	<-c.writerDone
	c.tcp.Close()
	_, reason := c.out.state()
	s.removeClient(c)
	s.nconns.Add(-1)
	s.m.ConnectionsTCP.Dec()
	s.m.Disconnect(reason)
}

// writeLoop writes c's queue whenever woken: every queued chunk in one
// writev under one write deadline. It returns when the queue is closing and
// empty (after half-closing the socket) or a write fails.
func (c *client) writeLoop() {
	defer close(c.writerDone)
	var spare []*chunk
	var nb net.Buffers
	iov := make(net.Buffers, 0, 8)
	for range c.wake {
		for {
			q, closing := c.out.take(spare)
			if len(q) == 0 {
				spare = q
				if closing {
					c.tcp.CloseWrite()
					return
				}
				break
			}
			iov = iov[:0]
			total := 0
			for _, ch := range q {
				iov = append(iov, ch.b)
				total += len(ch.b)
			}
			c.tcp.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
			nb = iov
			n, err := nb.WriteTo(c.tcp)
			for i, ch := range q {
				putChunk(ch)
				q[i] = nil
			}
			spare = q[:0]
			clear(iov)
			c.out.written(total)
			if n > 0 {
				c.s.m.SentBytes.Add(float64(n))
			}
			if err != nil {
				c.writeFailed(err)
				return
			}
		}
	}
}

// writeFailed closes c after a failed write: a deadline overrun is a slow
// consumer, anything else a closed peer.
func (c *client) writeFailed(err error) {
	reason := metrics.ReasonClosed
	if errors.Is(err, os.ErrDeadlineExceeded) {
		reason = wire.ErrSlowConsumer.String()
	}
	if got := c.out.fail(reason); got == wire.ErrSlowConsumer.String() && reason == got {
		c.s.m.SlowConsumers.Inc()
		c.s.log.Info("slow consumer: write over --write-timeout", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.Duration("write_timeout", c.s.cfg.WriteTimeout))
	}
	c.tcp.Close()
}

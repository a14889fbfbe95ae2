// Package client is a minimal real client of the relay protocol
// (docs/protocol.md) over TCP or UDP: dial, join, send, heartbeat, leave,
// and receive frames one at a time. The relay's tests, the load benchmark
// and the fleet use it. It does no reconnects, pacing or id rewriting.
//
// A Conn is not safe for concurrent use, except that one goroutine may
// receive while another sends.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// ServerError is an error frame the relay answered with.
type ServerError struct {
	Code wire.ErrorCode
	Text string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("relay error %d %s: %s", e.Code, e.Code, e.Text)
}

// Joined is the relay's answer to a join.
type Joined struct {
	Token   uint64 // UDP session token (0 on TCP)
	Owner   string
	Members []string // join order, the joiner last
}

// Conn is one client connection.
type Conn struct {
	nc       net.Conn
	udp      bool
	token    uint64
	maxFrame int
	wbuf     []byte
	rbuf     []byte // TCP: unread bytes are rbuf[r:w]
	r, w     int
	frame    wire.Frame
	onSend   func(frame []byte)
	deadline time.Time // the last SetDeadline, which a UDP Join's retries keep
}

// Dial connects over TCP.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial relay %s: %w", addr, err)
	}
	return New(nc), nil
}

// DialUDP "connects" a UDP socket to the relay.
func DialUDP(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial relay udp %s: %w", addr, err)
	}
	c := New(nc)
	c.udp = true
	c.rbuf = make([]byte, 64<<10) // any datagram
	return c, nil
}

// New wraps a connected TCP socket (for callers that set socket options
// before use).
func New(nc net.Conn) *Conn {
	return &Conn{nc: nc, maxFrame: wire.DefaultMaxFrame, rbuf: make([]byte, 16<<10)}
}

// NetConn is the underlying socket.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Token is the UDP session token from the last successful join.
func (c *Conn) Token() uint64 { return c.token }

// OnSend has fn called with every frame the Conn sends (without the UDP
// token), the join handshake's included, after it was written.
func (c *Conn) OnSend(fn func(frame []byte)) { c.onSend = fn }

// Close closes the socket.
func (c *Conn) Close() error { return c.nc.Close() }

// SetDeadline sets the socket's read and write deadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.nc.SetDeadline(t)
}

// WriteRaw writes b as is (TCP) or as one datagram (UDP).
func (c *Conn) WriteRaw(b []byte) error {
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("write to relay: %w", err)
	}
	return nil
}

// write sends one frame built by enc, behind the session token on UDP.
func (c *Conn) write(enc func([]byte) []byte) error {
	c.wbuf = c.wbuf[:0]
	if c.udp {
		c.wbuf = wire.AppendDatagram(c.wbuf, c.token)
	}
	start := len(c.wbuf)
	c.wbuf = enc(c.wbuf)
	if err := c.WriteRaw(c.wbuf); err != nil {
		return err
	}
	if c.onSend != nil {
		c.onSend(c.wbuf[start:])
	}
	return nil
}

// SendJoin sends a join without waiting for the answer. UDP joins are
// padded to wire.UDPJoinPad bytes, as the protocol asks.
func (c *Conn) SendJoin(room, user string, token []byte) error {
	return c.sendJoin(room, user, token, wire.UDPJoinPad)
}

// sendJoin sends a join; on UDP, padded to a datagram of size bytes.
func (c *Conn) sendJoin(room, user string, token []byte, size int) error {
	pad := 0
	if c.udp {
		c.token = 0
		pad = max(0, size-wire.TokenSize-len(wire.AppendJoin(nil, room, user, token, 0)))
	}
	return c.write(func(b []byte) []byte { return wire.AppendJoin(b, room, user, token, pad) })
}

// maxPadRounds bounds the UDP joins sent again for pad_required.
const maxPadRounds = 4

// A UDP Join sends its join (or, once joined, its confirming heartbeat)
// again after udpRetryFirst without an answer, then doubling up to
// udpRetryMax: a lost datagram is not a refusal.
const (
	udpRetryFirst = 250 * time.Millisecond
	udpRetryMax   = 2 * time.Second
)

// Join sends a join and waits until the session is set up: the whole
// member list has arrived (it may span several joined frames, and ends
// with the joiner) and, on UDP, the relay has answered the heartbeat that
// confirms the session's address (docs/protocol.md). Member notices that
// arrive meanwhile are applied to the list. An error frame is returned as
// a *ServerError; other frames are skipped.
func (c *Conn) Join(room, user string, token []byte) (Joined, error) {
	if err := c.SendJoin(room, user, token); err != nil {
		return Joined{}, err
	}
	var (
		j         Joined
		started   bool // a joined arrived
		complete  bool // the member list ended with user
		confirmed = !c.udp
		confirmTS int64
		pads      int
		joinSize  = wire.UDPJoinPad
		wait      = udpRetryFirst
	)
	if c.udp {
		defer c.nc.SetReadDeadline(c.deadline)
	}
	for !complete || !confirmed {
		if c.udp {
			// A lost join, joined or confirmation is sent again, with
			// backoff, until the caller's deadline (docs/protocol.md).
			d := time.Now().Add(wait)
			if !c.deadline.IsZero() && c.deadline.Before(d) {
				d = c.deadline
			}
			c.nc.SetReadDeadline(d)
		}
		f, err := c.Recv()
		if err != nil {
			var ne net.Error
			if !c.udp || !errors.As(err, &ne) || !ne.Timeout() || !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
				return Joined{}, err
			}
			wait = min(2*wait, udpRetryMax)
			if !started {
				err = c.sendJoin(room, user, token, joinSize)
			} else if !confirmed {
				err = c.Heartbeat(confirmTS)
			}
			if err != nil {
				return Joined{}, err
			}
			continue
		}
		switch f.Type {
		case wire.TypeJoined:
			if complete {
				continue
			}
			if !started {
				started = true
				j.Token, j.Owner, c.token = f.SessionToken, string(f.Owner), f.SessionToken
				if c.udp {
					confirmTS = time.Now().UnixNano()
					if err := c.Heartbeat(confirmTS); err != nil {
						return Joined{}, err
					}
				}
			}
			f.Members(func(id []byte) { j.Members = append(j.Members, string(id)) })
			complete = len(j.Members) > 0 && j.Members[len(j.Members)-1] == user
		case wire.TypeMemberJoined:
			if complete {
				j.Members = append(j.Members, string(f.User))
			}
		case wire.TypeMemberLeft:
			if complete {
				j.Members = slices.DeleteFunc(j.Members, func(m string) bool { return m == string(f.User) })
				j.Owner = string(f.Owner)
			}
		case wire.TypeHeartbeatReply:
			confirmed = confirmed || f.Timestamp == confirmTS
		case wire.TypeError:
			if f.Code == wire.ErrPadRequired && c.udp && !started && pads < maxPadRounds {
				size, err := strconv.Atoi(string(f.Text))
				if err != nil || size > wire.MaxDatagram {
					return Joined{}, &ServerError{Code: f.Code, Text: string(f.Text)}
				}
				pads++
				joinSize = size
				if err := c.sendJoin(room, user, token, size); err != nil {
					return Joined{}, err
				}
				continue
			}
			return Joined{}, &ServerError{Code: f.Code, Text: string(f.Text)}
		}
	}
	return j, nil
}

// Send sends a send frame.
func (c *Conn) Send(m wire.Send) error {
	return c.write(func(b []byte) []byte { return wire.AppendSend(b, m) })
}

// Heartbeat sends a heartbeat carrying ts.
func (c *Conn) Heartbeat(ts int64) error {
	return c.write(func(b []byte) []byte { return wire.AppendHeartbeat(b, ts) })
}

// Leave sends a leave.
func (c *Conn) Leave() error {
	return c.write(wire.AppendLeave)
}

// Recv returns the next frame from the relay. The frame and its slices are
// valid until the next Recv.
func (c *Conn) Recv() (*wire.Frame, error) {
	if c.udp {
		return c.recvUDP()
	}
	for {
		if c.r < c.w {
			n, err := wire.Decode(c.rbuf[c.r:c.w], c.maxFrame, &c.frame)
			if err == nil {
				c.r += n
				return &c.frame, nil
			}
			if !errors.Is(err, wire.ErrShort) {
				return nil, fmt.Errorf("frame from relay: %w", err)
			}
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more bytes, first moving the unread ones to the front (and
// growing the buffer if a frame does not fit).
func (c *Conn) fill() error {
	if c.r > 0 {
		c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
		c.r = 0
	}
	if c.w == len(c.rbuf) {
		c.rbuf = append(c.rbuf, make([]byte, len(c.rbuf))...)
	}
	n, err := c.nc.Read(c.rbuf[c.w:])
	c.w += n
	if err != nil && n == 0 {
		return fmt.Errorf("read from relay: %w", err)
	}
	return nil
}

// recvUDP returns the next frame of the last datagram, reading the next
// datagram when it has none left: a server→client datagram holds one or
// more whole frames.
func (c *Conn) recvUDP() (*wire.Frame, error) {
	if c.r == c.w {
		n, err := c.nc.Read(c.rbuf[:cap(c.rbuf)])
		if err != nil {
			return nil, fmt.Errorf("read from relay: %w", err)
		}
		c.r, c.w = 0, n
	}
	m, err := wire.Decode(c.rbuf[c.r:c.w], c.maxFrame, &c.frame)
	if err != nil {
		rest := c.w - c.r
		c.r = c.w // the rest of the datagram is lost with it
		return nil, fmt.Errorf("datagram from relay (%d bytes left in it): %w", rest, err)
	}
	c.r += m
	return &c.frame, nil
}

// RecvType returns the next frame of type t, skipping others (member
// notices, heartbeat replies); an error frame is returned as *ServerError.
func (c *Conn) RecvType(t wire.Type) (*wire.Frame, error) {
	for {
		f, err := c.Recv()
		if err != nil {
			return nil, err
		}
		if f.Type == t {
			return f, nil
		}
		if f.Type == wire.TypeError {
			return nil, &ServerError{Code: f.Code, Text: string(f.Text)}
		}
	}
}

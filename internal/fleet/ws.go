package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/profile"
)

// The WebSocket transport: the recorded upgrade request (rewritten per
// client by the profile) opens the connection with a fresh key; every
// message then travels in one final frame, masked as a client must; the
// reader reassembles the server's frames, answers pings and hands each
// message to the profile. Which bytes are messages stays the profile's.

// maxUpgradeAnswer bounds the HTTP head of the server's answer.
const maxUpgradeAnswer = 16 << 10

// DeflateMode says what the upgrade offers of permessage-deflate
// (--ws-deflate): what the recording offered, or nothing.
type DeflateMode uint8

const (
	DeflateRecorded DeflateMode = iota
	DeflateOff
)

func (m DeflateMode) String() string {
	if m == DeflateOff {
		return "off"
	}
	return "recorded"
}

// Set parses --ws-deflate.
func (m *DeflateMode) Set(s string) error {
	switch s {
	case "recorded":
		*m = DeflateRecorded
	case "off":
		*m = DeflateOff
	default:
		return fmt.Errorf("%q: recorded or off", s)
	}
	return nil
}

// Type is the flag's type in the usage.
func (*DeflateMode) Type() string { return "mode" }

// wsDeflate is a client's permessage-deflate, when the server accepted
// it: the client compresses each message on its own (no state), the
// inflater holds the server's window only when the server keeps its
// context.
type wsDeflate struct {
	d     profile.Deflate
	infl  *profile.Inflater
	plain []byte // the reader's: an inflated message
}

// maxKeptPlain bounds the inflate buffer a client keeps between messages.
const maxKeptPlain = 16 << 10

var zipBufs = sync.Pool{New: func() any { return new([]byte) }}

// wsHandshake sends the upgrade request and checks the answer; it returns
// the bytes that came after the answer's head (the server's first
// frames) and the permessage-deflate the server accepted, if any.
func wsHandshake(conn net.Conn, req []byte, mode DeflateMode) ([]byte, *wsDeflate, error) {
	_, early, z, err := wsUpgrade(conn, req, mode)
	return early, z, err
}

// wsUpgrade is wsHandshake that also returns the server's answer's head
// (its status line and headers, up to the blank line), for a socket
// step that takes a header from it.
func wsUpgrade(conn net.Conn, req []byte, mode DeflateMode) (head, early []byte, z *wsDeflate, err error) {
	if req == nil {
		return nil, nil, nil, errors.New("websocket: the recording holds no upgrade request")
	}
	if mode == DeflateOff {
		req = profile.WithoutExtensions(req)
	}
	out, accept := profile.WithKey(req, profile.NewWSNonce())
	if _, err := conn.Write(out); err != nil {
		return nil, nil, nil, err
	}
	buf := make([]byte, 0, 1024)
	tmp := make([]byte, 1024)
	for {
		n, err := conn.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if h, herr := profile.HTTPHead(buf, maxUpgradeAnswer); herr != nil {
			return nil, nil, nil, herr
		} else if h > 0 {
			if err := profile.CheckUpgradeResponse(buf[:h], accept); err != nil {
				return nil, nil, nil, err
			}
			d, err := profile.AcceptedDeflate(buf[:h])
			if err == nil && d.On && !profile.OffersDeflate(out) {
				err = fmt.Errorf("%w it was not offered: permessage-deflate", profile.ErrExtension)
			}
			if err != nil {
				return nil, nil, nil, err
			}
			var z *wsDeflate
			if d.On {
				z = &wsDeflate{d: d, infl: d.NewInflater(true)}
			}
			return buf[:h], buf[h:], z, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
}

// upgradeReason names a failed upgrade.
func upgradeReason(err error) LoginResult {
	var r *profile.UpgradeRefused
	switch {
	case errors.As(err, &r):
		return LoginResult{code: LoginUpgradeRefused, said: r.Status}
	case isTimeout(err):
		return loginFail(LoginUpgradeTimeout)
	case errors.Is(err, profile.ErrFraming), errors.Is(err, profile.ErrExtension):
		return loginFail(LoginUpgradeError)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return loginFail(LoginReset)
	}
	return loginFail(LoginUpgradeError)
}

// frame puts the message at b[start:] into a WebSocket frame (nothing to
// do on other transports).
func (c *client) frame(b []byte, start int) []byte {
	if !c.ws || len(b) == start {
		return b
	}
	op := byte(profile.WSBinary)
	if c.wsMixed {
		if c.pc.(profile.WSFramer).WSTextMessage(b[start:]) {
			op = profile.WSText
		}
	} else if c.f.player.WSText() {
		op = profile.WSText
	}
	if z := c.zip; z != nil {
		// The scheduler and the reader (replies) both frame: a pooled
		// buffer, no scratch on the client.
		zb := zipBufs.Get().(*[]byte)
		*zb = z.d.AppendDeflated((*zb)[:0], b[start:])
		b = profile.AppendWSDeflated(b[:start], op, *zb, c.wsKey)
		zipBufs.Put(zb)
		return b
	}
	return profile.FrameWS(b, start, op, c.wsKey)
}

// feedWS reassembles the server's frames: data messages go to the
// profile, a ping is answered, a close ends the connection.
func (c *client) feedWS(b []byte, now int64, ev *profile.Events) error {
	if c.wsr == nil {
		c.wsr = &profile.WSReader{Deflate: c.zip != nil}
	}
	return c.wsr.Feed(b, func(m profile.WSMessage) error {
		switch m.Opcode {
		case profile.WSPing:
			ev.Reply = profile.AppendWSFrame(ev.Reply, profile.WSPong, m.Payload, c.wsKey)
			return nil
		case profile.WSClose:
			if c.stopping.Load() && c.joined.Load() {
				return nil // the answer to the leave's close: read on until the server closes
			}
			return closeOf(m.Payload)
		case profile.WSPong:
			return nil
		}
		if m.Compressed {
			var err error
			if c.zip.plain, err = c.zip.infl.Inflate(c.zip.plain[:0], m.Payload, 0); err != nil {
				return err
			}
			m.Payload = c.zip.plain
			if cap(c.zip.plain) > maxKeptPlain {
				c.zip.plain = nil // an idle client keeps no large message
			}
		}
		start, r0 := len(ev.Reply), len(ev.Replies)
		err := c.pc.Feed(m.Payload, now, ev)
		if len(ev.Reply) > start {
			c.frameReplies(ev, start, r0)
		}
		return err
	})
}

// frameReplies puts each message the profile added to ev.Reply from
// start (marked by ev.Replies from r0) into a WebSocket frame of its own.
func (c *client) frameReplies(ev *profile.Events, start, r0 int) {
	msgs := append(c.wsScratch[:0], ev.Reply[start:]...)
	c.wsScratch = msgs
	ev.Reply = ev.Reply[:start]
	prev := 0
	for j := r0; j < len(ev.Replies); j++ {
		end := ev.Replies[j].End - start
		s := len(ev.Reply)
		ev.Reply = c.frame(append(ev.Reply, msgs[prev:end]...), s)
		ev.Replies[j].End = len(ev.Reply)
		prev = end
	}
	if prev < len(msgs) { // bytes no Reply marks: one more message
		s := len(ev.Reply)
		ev.Reply = c.frame(append(ev.Reply, msgs[prev:]...), s)
	}
}

// wsClosed is a close frame from the server: its status code (0 when it
// gave none) and reason text.
type wsClosed struct {
	code uint16
	text string
}

func (e *wsClosed) Error() string {
	return fmt.Sprintf("websocket: closed by the server (%d %q)", e.code, e.text)
}

// closeOf reads a close frame's payload (RFC 6455 §5.5.1).
func closeOf(p []byte) *wsClosed {
	if len(p) < 2 {
		return &wsClosed{}
	}
	return &wsClosed{code: binary.BigEndian.Uint16(p), text: string(p[2:])}
}

// maxCloseLogs bounds the close reasons logged per fleet.
const maxCloseLogs = 20

// wsClose is what a close frame means for a login and for a logged-in
// client (ws_<code>, or closed by the server when it gave no code); its
// reason text goes to the log, a bounded number of times.
func (c *client) wsClose(wc *wsClosed) (LoginResult, Disconnect) {
	login, reason := loginFail(LoginClosedByServer), c.closedBy()
	if wc.code != 0 {
		login, reason = LoginResult{code: LoginClosedWS, ws: wc.code}, Disconnect{code: DisconnectClosedWS, ws: wc.code}
	}
	if !c.stopping.Load() && c.f.closeLogs.Add(1) <= maxCloseLogs { // at the leave, the answer to the fleet's close
		c.f.log.Info("closed by the server", zap.Int("client", c.idx), zap.Stringer("reason", reason),
			zap.Uint16("code", wc.code), zap.String("text", wc.text))
	}
	return login, reason
}

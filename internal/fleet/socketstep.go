package fleet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// A profile's socket step (a lobby socket): a WebSocket the client
// opens before its realtime connection, plays (its messages sent, the
// server's read until every value the step takes is in) and closes,
// then goes on to its next step or its connection with the values taken
// (the game server's address, a token). It runs on the client's login
// goroutine, bounded by the login's deadline and the run's end, and
// leaves nothing open behind it: it is one client's, counted once in
// logins; its failures are labelled <step>_<reason> and its time is the
// step's (httptimes.go).

// errStepDone ends a socket step's read once every value is in.
var errStepDone = errors.New("socket step done")

// socketStep plays socket step i.
func (c *client) socketStep(ctx context.Context, deadline time.Time, jar *cookieJar, hs profile.HTTPStepper, i int, r profile.HTTPRequest) LoginResult {
	addr, target, secure := c.f.target, r.URL, c.f.tlsCfg != nil
	if u, err := url.Parse(r.URL); err == nil && u.Host != "" { // ws:// or wss://
		addr, target, secure = u.Host, u.RequestURI(), u.Scheme == "wss"
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), map[bool]string{false: "80", true: "443"}[secure])
		}
	}
	start := time.Now()
	d := net.Dialer{Deadline: deadline}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		why := dialReason(err)
		why.elsewhere = addr != c.f.target
		return why
	}
	var conn net.Conn = raw
	defer func() { conn.Close() }()
	// The run's end stops a step waiting on the server.
	defer context.AfterFunc(ctx, func() { raw.SetDeadline(time.Now()) })()
	raw.SetDeadline(deadline)
	host, _, _ := net.SplitHostPort(addr)
	if secure {
		cfg := &tls.Config{}
		if c.f.tlsCfg != nil {
			cfg = c.f.tlsCfg.Clone()
		}
		cfg.ServerName = host
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			if ctx.Err() != nil {
				return loginFail(LoginStopped)
			}
			return tlsFailure(err)
		}
		conn = tc
	}
	req := []byte("GET " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: -\r\nSec-WebSocket-Version: 13\r\n")
	for _, h := range r.Headers {
		req = append(req, h[0]+": "+h[1]+"\r\n"...)
	}
	req = append(req, "\r\n"...)
	req = c.withCookies(req, addr, jar) // what the steps before set, as on the upgrade
	head, early, _, err := wsUpgrade(conn, req, DeflateOff)
	if err != nil {
		if ctx.Err() != nil {
			return loginFail(LoginStopped)
		}
		return upgradeReason(err)
	}
	// What the socket carried from here, answered or not, is counted
	// with the step (not in the realtime connection's figures).
	var carried SocketIO
	defer func() { c.f.httpTimes.count(r.Step, carried) }()
	key := profile.NewWSKey()
	// goodbye closes the step's socket as a client leaving its lobby
	// does; the server's answer is not awaited.
	goodbye := func() {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		n, _ := conn.Write(profile.AppendWSFrame(nil, profile.WSClose, wsNormalClose, key))
		carried.BytesSent += int64(n)
	}
	// The header values, from the upgrade's answer, as an HTTP step
	// takes them from its answer's.
	if missing := hs.SocketUpgraded(i, upgradeHeader(head)); missing != "" {
		c.f.httpTimes.record(r.Step, time.Since(start))
		goodbye()
		return LoginResult{code: LoginHTTPAnswer, said: missing}
	}
	var out []byte
	for _, m := range r.Send {
		out = profile.AppendWSFrame(out, profile.WSText, m, key)
	}
	if len(out) > 0 {
		n, err := conn.Write(out)
		carried.BytesSent += int64(n)
		if err != nil {
			return c.socketEnded(ctx, err, "")
		}
		carried.Sent += int64(len(r.Send))
	}
	missing := hs.SocketAnswer(i, nil)
	if missing == "" { // every value was in the upgrade's answer
		c.f.httpTimes.record(r.Step, time.Since(start))
		goodbye()
		return LoginResult{}
	}
	rd := profile.WSReader{Max: maxHTTPAnswer}
	buf := make([]byte, 4096)
	in, total := early, 0
	for {
		carried.BytesReceived += int64(len(in))
		closed := false
		err := rd.Feed(in, func(m profile.WSMessage) error {
			switch m.Opcode {
			case profile.WSClose:
				closed = true
			case profile.WSText, profile.WSBinary:
				carried.Received++
				if missing = hs.SocketAnswer(i, m.Payload); missing == "" {
					return errStepDone
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errStepDone):
			c.f.httpTimes.record(r.Step, time.Since(start))
			goodbye()
			return LoginResult{}
		case err != nil:
			return loginFail(LoginProtocolError)
		case closed:
			// The server said goodbye without the values.
			c.f.httpTimes.record(r.Step, time.Since(start))
			return LoginResult{code: LoginHTTPAnswer, said: missing}
		}
		if total += len(in); total > maxHTTPAnswer {
			return loginFail(LoginHTTPTooLarge)
		}
		n, err := conn.Read(buf)
		if err != nil {
			return c.socketEnded(ctx, err, missing)
		}
		in = buf[:n]
	}
}

// socketEnded names a socket step whose connection ended (or failed a
// write) with the value missing still missing.
func (c *client) socketEnded(ctx context.Context, err error, missing string) LoginResult {
	switch {
	case ctx.Err() != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return loginFail(LoginTimeout)
		}
		return loginFail(LoginStopped)
	case isTimeout(err):
		return loginFail(LoginTimeout)
	case missing != "":
		// Closed (or reset) before it handed out the value.
		return LoginResult{code: LoginHTTPAnswer, said: missing}
	}
	return loginFail(LoginHTTPError)
}

// upgradeHeader reads a header of an upgrade's answer head (status line
// and headers) by name, case-insensitively as net/http does; "" when the
// head has none.
func upgradeHeader(head []byte) func(string) string {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), nil)
	if err != nil {
		return func(string) string { return "" }
	}
	return resp.Header.Get
}

package fleet

import "strconv"

// Reasons are types, one per family, as internal/report's Reason: a
// login's result and why a logged-in client was disconnected. String is
// the one spelling used for the metric label, the summary and the log.
// A reason the server gave (a profile's refusal or error, a WebSocket
// close code) rides along as bounded data: the profile bounds its
// labels, a close code is a number.

// LoginResult is how a login attempt ended.
type LoginResult struct {
	code LoginCode
	// said is the server's reason (LoginRefused: the profile's label;
	// LoginUpgradeRefused: the HTTP status).
	said string
	ws   uint16 // LoginClosedWS: the close code
	// step is the login step it failed in, for a login in steps.
	step string
	// detail is a TLS failure's line: what the peer's alert or the
	// verification said (not in the label, which stays bounded).
	detail string
	// elsewhere: the connection went where an HTTP step's answer said
	// (a lobby's), not to the target: its failure says nothing of the
	// target's reach.
	elsewhere bool
	// turn is a later turn's label (flow<index>: turns.go), the
	// failure's prefix.
	turn string
}

// LoginCode is the kind of a login's result.
type LoginCode uint8

// Login results.
const (
	LoginOK LoginCode = iota
	LoginStopped
	LoginConnectRefused
	LoginConnectError
	LoginConnectTimeout
	LoginPortExhausted
	LoginTooManyFiles
	LoginTimeout
	LoginClosed
	LoginReset
	LoginWriteError
	LoginProtocolError
	LoginUpgradeError
	LoginUpgradeRefused // said: the HTTP status
	// LoginUpgradeTimeout: no WebSocket upgrade answer before the login's
	// deadline (before any login step: "timeout" alone would read as
	// the login's own answer that never came).
	LoginUpgradeTimeout
	LoginRefused        // said: the server's reason
	LoginClosedWS       // a WebSocket close with a code
	LoginClosedByServer // a WebSocket close without one
	// TLS: the handshake failed (tls.go's classifyTLS), or a plaintext
	// login met a TLS port.
	LoginTLSUnknownAuthority
	LoginTLSBadCertificate
	LoginTLSHandshakeTimeout
	LoginTLSProtocolVersion
	LoginTLSRequired
	LoginTLSClosed
	LoginTLSError
	// An HTTP step's (step: its name).
	LoginHTTPStatus    // said: a status other than 2xx
	LoginHTTPAnswer    // said: missing_<value>, the value the answer lacked
	LoginHTTPError     // no answer: the connection failed or broke
	LoginHTTPRedirects // more than maxRedirects redirects
	LoginHTTPTooLarge  // an answer (its head or its body) over maxHTTPAnswer
	// LoginBadAddress: where to connect is no host:port (an address an
	// answer handed out, garbage or too long), so nothing was dialled.
	LoginBadAddress
)

var loginNames = [...]string{
	LoginOK: "ok", LoginStopped: "stopped", LoginConnectRefused: "connect_refused",
	LoginConnectError: "connect_error", LoginConnectTimeout: "connect_timeout",
	LoginPortExhausted: "port_exhausted", LoginTooManyFiles: "too_many_open_files",
	LoginTimeout: "timeout", LoginClosed: "closed", LoginReset: "reset",
	LoginWriteError: "write_error", LoginProtocolError: reasonProtocol,
	LoginUpgradeError: "upgrade_error", LoginUpgradeRefused: "upgrade_refused", LoginUpgradeTimeout: "upgrade_timeout",
	LoginRefused: "refused", LoginClosedWS: "ws", LoginClosedByServer: "closed_by_server",
	LoginTLSUnknownAuthority: "tls_unknown_authority", LoginTLSBadCertificate: "tls_bad_certificate",
	LoginTLSHandshakeTimeout: "tls_handshake_timeout", LoginTLSProtocolVersion: "tls_protocol_version",
	LoginTLSRequired: "tls_required", LoginTLSClosed: "tls_handshake_closed", LoginTLSError: "tls_error",
	LoginHTTPStatus: "http", LoginHTTPAnswer: "http_answer", LoginHTTPError: "http_error",
	LoginHTTPRedirects: "http_redirects", LoginHTTPTooLarge: "http_too_large",
	LoginBadAddress: "connect_bad_address",
}

// IsTLS reports a TLS failure.
func (c LoginCode) IsTLS() bool { return c >= LoginTLSUnknownAuthority && c <= LoginTLSError }

// Detail is a TLS failure's line (what the peer or the verification
// said); empty for other results.
func (r LoginResult) Detail() string { return r.detail }

// Code is the result's kind.
func (r LoginResult) Code() LoginCode { return r.code }

// OK reports a successful login.
func (r LoginResult) OK() bool { return r.code == LoginOK }

func (r LoginResult) String() string {
	s := loginNames[r.code]
	switch r.code {
	case LoginUpgradeRefused, LoginHTTPStatus:
		s += "_" + r.said
	case LoginHTTPAnswer:
		s = r.said
	case LoginRefused:
		if r.said != "" {
			s = r.said
		}
	case LoginClosedWS:
		s = wsLabel(r.ws)
	}
	if r.step != "" {
		s = r.step + "_" + s
	}
	if r.turn != "" {
		s = r.turn + "_" + s
	}
	return s
}

func loginFail(code LoginCode) LoginResult { return LoginResult{code: code} }

// refusedBy is a login the server refused, with its reason.
func refusedBy(said string) LoginResult { return LoginResult{code: LoginRefused, said: said} }

// Disconnect is why a logged-in client's connection ended.
type Disconnect struct {
	code DisconnectCode
	said string // DisconnectServerError: the profile's label
	ws   uint16 // DisconnectClosedWS: the close code
}

// DisconnectCode is the kind of a disconnect.
type DisconnectCode uint8

// Disconnect reasons.
const (
	DisconnectNone DisconnectCode = iota // the fleet stopped it
	DisconnectClosedByRelay
	DisconnectClosedByServer
	DisconnectReset
	DisconnectWriteError
	DisconnectWriteTimeout
	DisconnectReadError
	DisconnectBacklogFull
	DisconnectProtocolError
	DisconnectServerError // said: the server's reason, from the profile
	DisconnectClosedWS    // a WebSocket close with a code
	// DisconnectNoReply: closed without a reason while a server message
	// the profile expects answered had none; said: its kind.
	DisconnectNoReply
)

var disconnectNames = [...]string{
	DisconnectNone: "none", DisconnectClosedByRelay: "closed_by_relay",
	DisconnectClosedByServer: "closed_by_server", DisconnectReset: "reset",
	DisconnectWriteError: "write_error", DisconnectWriteTimeout: "write_timeout",
	DisconnectReadError: "read_error", DisconnectBacklogFull: "send_backlog_full",
	DisconnectProtocolError: reasonProtocol, DisconnectServerError: "server_error",
	DisconnectClosedWS: "ws", DisconnectNoReply: "no_reply",
}

// Code is the disconnect's kind.
func (d Disconnect) Code() DisconnectCode { return d.code }

func (d Disconnect) String() string {
	switch d.code {
	case DisconnectServerError:
		if d.said != "" {
			return d.said
		}
	case DisconnectClosedWS:
		return wsLabel(d.ws)
	case DisconnectNoReply:
		return "no_reply_" + d.said
	}
	return disconnectNames[d.code]
}

func disconnectBy(code DisconnectCode) Disconnect { return Disconnect{code: code} }

// wsLabel is a WebSocket close code's label: ws_<code> (codes under
// 1000 are not valid close codes; over 4999 none are defined).
func wsLabel(code uint16) string {
	if code < 1000 || code > 4999 {
		return "ws_invalid"
	}
	return "ws_" + strconv.Itoa(int(code))
}

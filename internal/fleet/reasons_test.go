package fleet

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/profile"
)

func TestReasonLabels(t *testing.T) {
	logins := []struct {
		r    LoginResult
		want string
	}{
		{LoginResult{}, "ok"},
		{loginFail(LoginConnectRefused), "connect_refused"},
		{loginFail(LoginProtocolError), "protocol_error"},
		{LoginResult{code: LoginUpgradeRefused, said: "403"}, "upgrade_refused_403"},
		{refusedBy("not_authorized"), "not_authorized"},
		{refusedBy(""), "refused"},
		{LoginResult{code: LoginRefused, said: "authorization_violation", step: "login"}, "login_authorization_violation"},
		{LoginResult{code: LoginTimeout, step: "join"}, "join_timeout"},
		{upgradeReason(os.ErrDeadlineExceeded), "upgrade_timeout"},
		{LoginResult{code: LoginClosedWS, ws: 3501}, "ws_3501"},
		{loginFail(LoginClosedByServer), "closed_by_server"},
		{dialReason(&net.AddrError{Err: "too many colons in address", Addr: "9999"}), "connect_bad_address"},
		{dialReason(&net.OpError{Op: "dial", Err: &net.AddrError{Err: "missing port in address", Addr: "x"}}), "connect_bad_address"},
		{httpReason(fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxHTTPAnswer)), "http_too_large"},
	}
	for _, tt := range logins {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.r, got, tt.want)
		}
	}
	disconnects := []struct {
		d    Disconnect
		want string
	}{
		{disconnectBy(DisconnectClosedByRelay), "closed_by_relay"},
		{disconnectBy(DisconnectClosedByServer), "closed_by_server"},
		{disconnectBy(DisconnectBacklogFull), "send_backlog_full"},
		{Disconnect{code: DisconnectServerError, said: "stale_connection"}, "stale_connection"},
		{Disconnect{code: DisconnectClosedWS, ws: 4000}, "ws_4000"},
		{Disconnect{code: DisconnectClosedWS, ws: 999}, "ws_invalid"},
		{Disconnect{code: DisconnectClosedWS, ws: 60000}, "ws_invalid"},
		{Disconnect{code: DisconnectNoReply, said: "ping"}, "no_reply_ping"},
	}
	for _, tt := range disconnects {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.d, got, tt.want)
		}
	}
	// Every code has a name.
	for c := LoginOK; c <= LoginBadAddress; c++ {
		if loginNames[c] == "" {
			t.Errorf("login code %d has no name", c)
		}
	}
	for c := DisconnectNone; c <= DisconnectNoReply; c++ {
		if disconnectNames[c] == "" {
			t.Errorf("disconnect code %d has no name", c)
		}
	}
}

// TestStepLabelsNeverCollide: a login step's failures are labelled
// <step>_<reason>, so a step may not be named with the first word of a
// label the fleet gives its own failures (a step "connect" would make
// connect_timeout mean two things): the profile refuses those words
// (profile.TransportLabelWords), and this keeps the list complete.
func TestStepLabelsNeverCollide(t *testing.T) {
	for code, label := range loginNames {
		if first, _, ok := strings.Cut(label, "_"); ok && !slices.Contains(profile.TransportLabelWords, first) {
			t.Errorf("login result %d is labelled %q: add %q to profile.TransportLabelWords", code, label, first)
		}
	}
}

package fleet

import "testing"

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
		{LoginResult{code: LoginRefused, said: "authorization_violation", step: "connect"}, "connect_authorization_violation"},
		{LoginResult{code: LoginTimeout, step: "join"}, "join_timeout"},
		{LoginResult{code: LoginClosedWS, ws: 3501}, "ws_3501"},
		{loginFail(LoginClosedByServer), "closed_by_server"},
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
	for c := LoginOK; c <= LoginClosedByServer; c++ {
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

package profile

import (
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
)

// TestTurnLinks: a value a socket's server handed out is carried in
// turn when the client played on after that answer (a first connection),
// and stays a lobby step's take when the socket closed once it had it;
// HTTP answers' and addresses' links are never carried in turn.
func TestTurnLinks(t *testing.T) {
	msg := func(ms int, b string) Message {
		return Message{Offset: time.Duration(ms) * time.Millisecond, Bytes: []byte(b)}
	}
	first := FlowData{Index: 0, Msgs: []Message{msg(0, `{"join":"hall"}`), msg(50, `{"chat":1}`)}, Answers: []Message{msg(10, `{"ticket":"t1234"}`)}}
	lobby := FlowData{Index: 2, Msgs: []Message{msg(0, `{"find":"hall"}`)}, Answers: []Message{msg(10, `{"token":"k5678"}`)}}
	flows := map[int]FlowData{0: first, 1: {Index: 1}, 2: lobby, 3: {Index: 3}, 4: {Index: 4, HTTP: []HTTPExchange{{}}}}
	ticket := Link{From: 0, Exchange: socketMessage + "0", Path: "$.ticket", To: 1, Where: "client message #0"}
	token := Link{From: 2, Exchange: socketMessage + "0", Path: "$.token", To: 3, Where: "upgrade query token"}
	addr := Link{From: 0, Exchange: socketMessage + "0", Path: "$.addr", To: 1, Where: whereConnect + "address"}
	toHTTP := Link{From: 0, Exchange: socketMessage + "0", Path: "$.ticket", To: 4, Where: "request body"}
	fromHTTP := Link{From: 4, Exchange: "POST /auth", Path: "$.token", To: 1, Where: "upgrade query token"}
	turn, rest := turnLinks([]Link{ticket, token, addr, toHTTP, fromHTTP}, flows)
	if len(turn) != 1 || turn[0] != ticket || len(rest) != 4 {
		t.Errorf("turn %+v, rest %+v; want the played-on ticket alone in turn", turn, rest)
	}
}

// TestCarry: a next connection's client takes by name the value its
// previous connection's took from its server's message at the JSON
// path, and says which is missing when that never came; clients whose
// profiles carry nothing take nothing.
func TestCarry(t *testing.T) {
	base := Spec{Name: "c", Transport: "udp", Framing: FramingSpec{Type: "message"},
		Kinds: KindsSpec{Client: []KindSpec{{Name: "join", Match: MatchSpec{Prefix: `{"join"`}}}, Server: []KindSpec{{Name: "joined", Match: MatchSpec{Prefix: `{"joined"`}}}},
		Login: LoginSpec{Send: []string{"join"}, Success: "joined"}}
	compile := func(turn TurnSpec) *Profile {
		s := base
		s.Turn = turn
		p, err := Compile(&s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	give := compile(TurnSpec{Gives: []TakeSpec{{Name: "ticket", JSON: "$.seat.ticket"}}})
	take := compile(TurnSpec{Takes: []TakeSpec{{Name: "ticket", Recorded: &FieldSpec{Regexp: `"ticket":"(\w+)"`}}}})
	plain := compile(TurnSpec{})
	player := func(p *Profile, client, server string) Player {
		pl, err := p.Compile(Messages{Client: []Message{{Bytes: []byte(client), Kind: p.ClientKind([]byte(client))}}, Server: []Message{{Bytes: []byte(server), Kind: p.ServerKind([]byte(server))}}}, ScriptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	id := Identity{Index: 0, Clients: 1, User: "u", Room: "r"}
	client := func(pl Player) Client {
		c, err := pl.NewClient(id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := client(player(give, `{"join":"hall"}`, `{"joined":"hall","seat":{"ticket":"rec0"}}`))
	next := client(player(take, `{"join":"arena","ticket":"rec0"}`, `{"joined":"arena"}`))
	if m := Carry(first, next); m != "missing_ticket" {
		t.Errorf("before any answer: %q, want missing_ticket", m)
	}
	var ev Events
	first.Feed([]byte(`{"joined":"hall","seat":{"ticket":"abc9"}}`), 0, &ev)
	first.Feed([]byte(`{"joined":"hall","seat":{"other":"x"}}`), 0, &ev) // no ticket: the last one stays
	if m := Carry(first, next); m != "" {
		t.Fatalf("after the answer: %q", m)
	}
	b, _ := next.AppendStep(nil, 0, 0)
	if string(b) != `{"join":"arena","ticket":"abc9"}` {
		t.Errorf("the next connection sends %s", b)
	}
	if m := Carry(client(player(plain, `{"join":"x"}`, `{"joined":"x"}`)), client(player(plain, `{"join":"y"}`, `{"joined":"y"}`))); m != "" {
		t.Errorf("plain clients: %q", m)
	}
}

// TestEnded: a flow ends for inTurn at its last message either way, not
// at its teardown's last packet (a TLS client dials its next server once
// it read close_notify; the server's FIN may follow that SYN), and a UDP
// flow at its client's last message.
func TestEnded(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	frames := func(ms ...int) []capture.Frame {
		var fs []capture.Frame
		for _, m := range ms {
			fs = append(fs, capture.Frame{Time: at(m)})
		}
		return fs
	}
	tests := []struct {
		name string
		flow capture.Flow
		want int
	}{
		{"tcp, the server's answer last", capture.Flow{Transport: capture.TCP, End: at(90), ClientFrames: frames(0, 20), ServerFrames: frames(10, 30)}, 30},
		{"tcp, the client's close last", capture.Flow{Transport: capture.TCP, End: at(90), ClientFrames: frames(0, 40), ServerFrames: frames(10)}, 40},
		{"tcp, no server message", capture.Flow{Transport: capture.TCP, End: at(90), ClientFrames: frames(5)}, 5},
		{"tcp, no client message: its close", capture.Flow{Transport: capture.TCP, End: at(90), ServerFrames: frames(10)}, 90},
		{"udp", capture.Flow{Transport: capture.UDP, End: at(90), ClientFrames: frames(0, 20), ServerFrames: frames(60)}, 20},
	}
	for _, tt := range tests {
		if got := ended(&tt.flow); !got.Equal(at(tt.want)) {
			t.Errorf("%s: ended at %v, want %d ms", tt.name, got.Sub(t0), tt.want)
		}
	}
}

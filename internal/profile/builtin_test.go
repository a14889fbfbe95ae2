package profile

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func mqttStr(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

func mqttPkt(typ byte, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	return append(AppendVarint([]byte{typ}, len(b)), b...)
}

func mqttConnect(level byte, id string) []byte {
	vh := append(mqttStr("MQTT"), level, 0x02, 0, 60)
	if level == 5 {
		vh = append(vh, 0) // no properties
	}
	return mqttPkt(0x10, vh, mqttStr(id))
}

func TestMQTT(t *testing.T) {
	for _, level := range []byte{4, 5} {
		t.Run(string(rune('0'+level)), func(t *testing.T) {
			p, _ := Lookup("mqtt")
			v5 := level == 5
			props := func() []byte {
				if v5 {
					return []byte{0}
				}
				return nil
			}
			payload := []byte("pose....12345678")
			sub := mqttPkt(0x82, []byte{0, 1}, props(), mqttStr("rooms/lobby"), []byte{0})
			pub := mqttPkt(0x30, mqttStr("rooms/lobby"), props(), payload)
			rec := Recording{
				Client: []Segment{
					{at(0), mqttConnect(level, "mosq-abc")},
					{at(10), sub},
					{at(100), pub}, {at(200), pub}, {at(300), pub},
					{at(400), []byte{0xe0, 0}},
				},
				Server: []Segment{{at(1), []byte{0x20, 2, 0, 0}}},
			}
			m := p.Messages(rec)
			l, _, _ := parseLoop("#2,#5")
			s, err := p.Compile(m, ScriptOptions{Loop: &l})
			if err != nil {
				t.Fatal(err)
			}
			if u, r, _ := s.Recorded(); u != "mosq-abc" || r != "rooms/lobby" {
				t.Fatalf("recorded %q %q", u, r)
			}
			if s.Timeline().HandshakeEnd() != 2 || s.Timeline().Len() != 5 {
				t.Fatalf("handshake %d len %d notes %q", s.Timeline().HandshakeEnd(), s.Timeline().Len(), s.Notes())
			}
			c, err := s.NewClient(Identity{Index: 3, Clients: 10, User: "replay-3", Room: "room-0"})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := c.AppendStep(nil, 0, 0)
			if string(got) != string(mqttConnect(level, "replay-3")) {
				t.Fatalf("connect %x, want %x", got, mqttConnect(level, "replay-3"))
			}
			got, _ = c.AppendStep(nil, 1, 0)
			if want := mqttPkt(0x82, []byte{0, 1}, props(), mqttStr("room-0"), []byte{0}); string(got) != string(want) {
				t.Fatalf("subscribe %x, want %x", got, want)
			}
			now := time.Now().UnixNano()
			got, k := c.AppendStep(nil, 2, now)
			stamped := append(payload[:8:8], binary.BigEndian.AppendUint64(nil, uint64(now))...)
			if want := mqttPkt(0x30, mqttStr("room-0"), props(), stamped); string(got) != string(want) || p.Kinds[k] != "publish" || !s.Counted(k) {
				t.Fatalf("publish %x, want %x", got, want)
			}
			var ev Events
			if c.Feed([]byte{0x20, 2, 0, 5}, 0, &ev); ev.Failed != "not_authorized" {
				t.Fatalf("refused: %+v", ev)
			}
			ev.Reset()
			if c.Feed([]byte{0x20, 2, 0, 0, 0xd0}, 0, &ev); !ev.LoggedIn || ev.Frames != 1 {
				t.Fatalf("accepted: %+v", ev)
			}
			// A QoS 1 delivery split over two reads, acknowledged.
			ev.Reset()
			d := mqttPkt(0x32, mqttStr("room-0"), []byte{0, 9}, props(), stamped)
			c.Feed([]byte{0x00}, now+2000, &ev) // the PINGRESP's remaining length
			c.Feed(d[:5], now+2000, &ev)
			c.Feed(d[5:], now+2000, &ev)
			if ev.Messages != 1 || len(ev.Latencies) != 1 || ev.Latencies[0] != 2 || string(ev.Reply) != "\x40\x02\x00\x09" {
				t.Fatalf("delivery: %+v", ev)
			}
			if got := string(c.AppendHeartbeat(nil, 0)); got != "\xc0\x00" {
				t.Fatalf("heartbeat %x", got)
			}
			if got := string(c.AppendLeave(nil)); got != "\xe0\x00" {
				t.Fatalf("leave %x", got)
			}
		})
	}
}

func parseLoop(s string) (l sessionLoop, ok bool, err error) { return parseSessionLoop(s) }

func TestMQTTEmptyClientID(t *testing.T) {
	p, _ := Lookup("mqtt")
	m := p.Messages(Recording{Client: []Segment{{0, mqttConnect(4, "")}, {at(5), mqttPkt(0x30, mqttStr("t"), []byte("x"))}}})
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 1, Clients: 2, User: "replay-1"})
	if got, _ := c.AppendStep(nil, 0, 0); string(got) != string(mqttConnect(4, "replay-1")) {
		t.Fatalf("connect %x", got)
	}
}

func TestRedis(t *testing.T) {
	p, _ := Lookup("redis")
	cmd := func(args ...string) []byte {
		var bs [][]byte
		for _, a := range args {
			bs = append(bs, []byte(a))
		}
		return AppendRESPCommand(nil, bs...)
	}
	payload := "hello 12345678"
	rec := Recording{
		Client: []Segment{
			{at(0), cmd("AUTH", "secret")},
			{at(5), cmd("SUBSCRIBE", "lobby")},
			{at(100), append(cmd("PUBLISH", "lobby", payload), cmd("PUBLISH", "lobby", payload)...)},
			{at(200), cmd("QUIT")},
		},
		Server: []Segment{{at(1), []byte("+OK\r\n")}},
	}
	s, err := p.Compile(p.Messages(rec), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, r, _ := s.Recorded(); r != "lobby" || s.Timeline().Len() != 4 || s.Timeline().HandshakeEnd() != 2 {
		t.Fatalf("room %q len %d handshake %d", r, s.Timeline().Len(), s.Timeline().HandshakeEnd())
	}
	c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u", Room: "lobby-3"})
	if got, _ := c.AppendStep(nil, 1, 0); string(got) != string(cmd("SUBSCRIBE", "lobby-3")) {
		t.Fatalf("subscribe %q", got)
	}
	now := time.Now().UnixNano()
	got, k := c.AppendStep(nil, 2, now)
	if !strings.HasPrefix(string(got), string(cmd("PUBLISH", "lobby-3", payload))[:30]) || p.Kinds[k] != "publish" {
		t.Fatalf("publish %q", got)
	}
	var ev Events
	c.Feed([]byte("-WRONGPASS invalid username-password pair\r\n"), 0, &ev)
	if ev.Failed != "wrongpass" {
		t.Fatalf("refused: %+v", ev)
	}
	ev.Reset()
	c.Feed([]byte("+OK\r\n*3\r\n$9\r\nsubscribe\r\n$7\r\nlobby-3\r\n:1\r\n"), 0, &ev)
	if !ev.LoggedIn || ev.Messages != 0 {
		t.Fatalf("accepted: %+v", ev)
	}
	ev.Reset()
	pub := got[len(got)-len(payload)-2 : len(got)-2]
	msg := append([]byte(">3\r\n$7\r\nmessage\r\n$7\r\nlobby-3\r\n$14\r\n"), pub...)
	msg = append(msg, "\r\n"...)
	c.Feed(msg, now+5000, &ev)
	if ev.Messages != 1 || len(ev.Latencies) != 1 || ev.Latencies[0] != 5 {
		t.Fatalf("delivery: %+v", ev)
	}
	if got := string(c.AppendLeave(nil)); got != "*1\r\n$4\r\nQUIT\r\n" {
		t.Fatalf("leave %q", got)
	}
}

package profile

import (
	"embed"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Builtin names the built-in profiles.
var Builtin = []string{"reprise", "mqtt", "mqtt-ws", "redis", "socketio", "nats"}

// builtinFiles are the built-in profiles written in the file syntax
// users write (docs/profiles.md), with no Go code of their own.
//
//go:embed builtin/*.yaml
var builtinFiles embed.FS

// BuiltinFiles names the built-in profiles that are files.
func BuiltinFiles() []string {
	var out []string
	for _, n := range Builtin {
		if _, ok := BuiltinFile(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// BuiltinFile returns a built-in profile's file; false for a profile
// that is Go code (reprise, mqtt, mqtt-ws, redis) or no built-in.
func BuiltinFile(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/.") {
		return nil, false
	}
	b, err := builtinFiles.ReadFile("builtin/" + name + ".yaml")
	return b, err == nil
}

// Default is the profile of a replay that names none: the one place the
// default is decided (DefaultProfile is it, looked up).
const Default = "reprise"

// DefaultProfile is Default's profile.
func DefaultProfile() *Profile {
	return &Profile{Name: "reprise", Transport: TCP, Port: wire.DefaultPort, MetricsPort: wire.DefaultMetricsPort, reprise: true}
}

// Lookup returns a built-in profile by name, or reads a profile file.
func Lookup(nameOrFile string) (*Profile, error) {
	switch nameOrFile {
	case "", Default:
		return DefaultProfile(), nil
	case "mqtt":
		return mqtt(TCP), nil
	case "mqtt-ws":
		return mqtt(WebSocket), nil
	case "redis":
		return redis(), nil
	}
	if data, ok := BuiltinFile(nameOrFile); ok {
		s, err := ParseSpec("built-in "+nameOrFile+".yaml", data)
		if err != nil {
			return nil, err
		}
		return Compile(s)
	}
	if !strings.ContainsAny(nameOrFile, "/.") {
		if _, err := os.Stat(nameOrFile); err != nil {
			return nil, fmt.Errorf("profile %q: not a built-in profile (%s) nor a file", nameOrFile, strings.Join(Builtin, ", "))
		}
	}
	s, err := LoadSpec(nameOrFile)
	if err != nil {
		return nil, err
	}
	return Compile(s)
}

// SpokenByRelay reports whether the reference relay (cmd/relay) speaks
// the profile's protocol, so that a command may start one as the target.
func (p *Profile) SpokenByRelay() bool { return p.reprise }

// hookFuncs implements hooks with optional functions.
type hookFuncs struct {
	recordedFn  func([]Message) ([]byte, []byte)
	rewriteFn   func([]byte, []sub) []byte
	failureFn   func([]byte) string
	successFn   func([]byte) bool
	templatedFn func([]byte) bool
}

func (h *hookFuncs) recorded(msgs []Message) ([]byte, []byte) {
	if h.recordedFn == nil {
		return nil, nil
	}
	return h.recordedFn(msgs)
}

func (h *hookFuncs) rewrite(m []byte, subs []sub) []byte {
	if h.rewriteFn == nil {
		return replaceAll(m, subs)
	}
	return h.rewriteFn(m, subs)
}

func (h *hookFuncs) failure(m []byte) string {
	if h.failureFn == nil {
		return ""
	}
	return h.failureFn(m)
}

func (h *hookFuncs) success(m []byte) bool { return h.successFn == nil || h.successFn(m) }

func (h *hookFuncs) templated(m []byte) bool { return h.templatedFn != nil && h.templatedFn(m) }

func mustCompile(s *Spec, h hooks) *Profile {
	p, err := Compile(s)
	if err != nil {
		panic(fmt.Sprintf("built-in profile %s: %v", s.Name, err)) // a bug in this file, caught by its tests
	}
	p.hooks = h
	return p
}

func b(v int) *int { return &v }

// redis is Redis pub/sub over RESP2 or RESP3.
func redis() *Profile {
	cmd := func(name, c string) KindSpec { return KindSpec{Name: name, Match: MatchSpec{Command: c}} }
	s := &Spec{
		Name: "redis", Transport: "tcp", Port: 6379,
		Framing: FramingSpec{Type: "resp"},
		Kinds: KindsSpec{
			Client: []KindSpec{cmd("auth", "AUTH"), cmd("hello", "HELLO"), cmd("subscribe", "SUBSCRIBE"),
				cmd("psubscribe", "PSUBSCRIBE"), cmd("publish", "PUBLISH"), cmd("heartbeat", "PING"),
				cmd("leave", "QUIT"), cmd("unsubscribe", "UNSUBSCRIBE"), cmd("client", "CLIENT")},
			Server: []KindSpec{cmd("message", "message"), cmd("pmessage", "pmessage"), cmd("smessage", "smessage"),
				{Name: "error", Match: MatchSpec{Prefix: "-"}}, {Name: "push", Match: MatchSpec{Prefix: ">"}},
				{Name: "array", Match: MatchSpec{Prefix: "*"}}, {Name: "simple", Match: MatchSpec{Prefix: "+"}},
				{Name: "integer", Match: MatchSpec{Prefix: ":"}}},
		},
		Login:     LoginSpec{Failure: "error", Reason: &ReasonSpec{Regexp: `^-(\S+)`}},
		Heartbeat: &HeartbeatSpec{Template: TemplateSpec{Text: "*1\r\n$4\r\nPING\r\n"}},
		Leave:     &TemplateSpec{Text: "*1\r\n$4\r\nQUIT\r\n"},
		Delivery:  []string{"message", "pmessage", "smessage"},
		Sends:     []string{"publish"},
		Latency:   &LatencySpec{Send: "publish", SendOffset: -8, Delivery: "message", DeliveryOffset: -8},
	}
	return mustCompile(s, &hookFuncs{recordedFn: redisRecorded, rewriteFn: redisRewrite})
}

// redisRecorded proposes the room: the channel of the first SUBSCRIBE or
// PUBLISH; and the user: AUTH's user name, or CLIENT SETNAME's name.
func redisRecorded(msgs []Message) (user, room []byte) {
	for _, m := range msgs {
		args := RESPStrings(m.Bytes)
		if len(args) < 2 {
			continue
		}
		switch strings.ToUpper(string(args[0])) {
		case "SUBSCRIBE", "PUBLISH", "SSUBSCRIBE", "SPUBLISH":
			if room == nil {
				room = append([]byte(nil), args[1]...)
			}
		case "AUTH":
			if len(args) == 3 && user == nil {
				user = append([]byte(nil), args[1]...)
			}
		case "CLIENT":
			if len(args) == 3 && strings.EqualFold(string(args[1]), "SETNAME") && user == nil {
				user = append([]byte(nil), args[2]...)
			}
		}
	}
	return user, room
}

// redisRewrite re-encodes a command with arguments equal to an old value
// replaced (a channel, a name); payloads are left alone.
func redisRewrite(m []byte, subs []sub) []byte {
	args := RESPStrings(m)
	if len(args) == 0 || m[0] != '*' {
		return replaceAll(m, subs)
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = a
		if i == 0 || (i == len(args)-1 && strings.EqualFold(string(args[0]), "PUBLISH")) {
			continue
		}
		for _, s := range subs {
			if string(a) == string(s.old) {
				out[i] = s.new
			}
		}
	}
	return AppendRESPCommand(nil, out...)
}

// mqttReasons names CONNACK return codes of MQTT 3.1.1 (1-5) and reason
// codes of MQTT 5 (0x80 on).
var mqttReasons = map[int]string{
	1: "unacceptable_protocol_version", 2: "identifier_rejected", 3: "server_unavailable",
	4: "bad_username_or_password", 5: "not_authorized",
	0x80: "unspecified_error", 0x81: "malformed_packet", 0x82: "protocol_error",
	0x83: "implementation_specific_error", 0x84: "unsupported_protocol_version",
	0x85: "client_identifier_not_valid", 0x86: "bad_username_or_password", 0x87: "not_authorized",
	0x88: "server_unavailable", 0x89: "server_busy", 0x8a: "banned", 0x8c: "bad_authentication_method",
	0x95: "packet_too_large", 0x97: "quota_exceeded", 0x9c: "use_another_server",
	0x9d: "server_moved", 0x9f: "connection_rate_exceeded",
}

// MQTTReasons lists the CONNACK reason names, sorted.
func MQTTReasons() []string {
	var out []string
	for _, n := range mqttReasons {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mqtt is MQTT 3.1.1 and 5 over TCP or WebSocket: the client id is the
// user id, the topic of the first SUBSCRIBE or PUBLISH the room.
func mqtt(t Transport) *Profile {
	typ := func(name string, v int) KindSpec {
		return KindSpec{Name: name, Match: MatchSpec{Byte: b(v), Mask: b(0xf0)}}
	}
	s := &Spec{
		Name: "mqtt", Transport: string(t), Port: 1883,
		Framing: FramingSpec{Type: "varint", Offset: 1, Max: 1 << 20},
		Kinds: KindsSpec{
			Client: []KindSpec{typ("connect", 0x10), typ("publish", 0x30), typ("puback", 0x40),
				typ("pubrec", 0x50), typ("pubrel", 0x60), typ("pubcomp", 0x70), typ("subscribe", 0x80),
				typ("unsubscribe", 0xa0), typ("heartbeat", 0xc0), typ("leave", 0xe0), typ("auth", 0xf0)},
			Server: []KindSpec{typ("connack", 0x20), typ("publish", 0x30), typ("puback", 0x40),
				typ("pubrec", 0x50), typ("pubrel", 0x60), typ("pubcomp", 0x70), typ("suback", 0x90),
				typ("unsuback", 0xb0), typ("pingresp", 0xd0), typ("disconnect", 0xe0), typ("auth", 0xf0)},
		},
		Login: LoginSpec{Send: []string{"connect"}, Success: "connack", When: &MatchSpec{Offset: 3, Byte: b(0)},
			Reason: &ReasonSpec{Offset: 3, Size: 1, Names: mqttReasons}},
		Heartbeat: &HeartbeatSpec{Template: TemplateSpec{Hex: "c000"}},
		Leave:     &TemplateSpec{Hex: "e000"},
		Delivery:  []string{"publish"},
		Sends:     []string{"publish"},
		Latency:   &LatencySpec{Send: "publish", SendOffset: -8, Delivery: "publish", DeliveryOffset: -8},
		// A QoS 1 PUBLISH is acknowledged with a PUBACK of its packet id,
		// which follows the topic.
		Reactions: []ReactionSpec{{On: "publish", When: &MatchSpec{Byte: b(0x02), Mask: b(0x06)},
			Capture: map[string]FieldSpec{"id": {Offset: 1, Skip: []string{"varint", "len16"}, Length: 2}},
			Send:    TemplateSpec{Hex: "40 02 ${id}"}, As: "puback"}},
	}
	if t == WebSocket {
		// MQTT over WebSockets: packets need not align with WebSocket
		// messages (MQTT 3.1.1 §6).
		s.Name, s.Port, s.Framing.Span = "mqtt-ws", 8080, true
	}
	m := &mqttHooks{}
	return mustCompile(s, &hookFuncs{recordedFn: m.recorded, rewriteFn: m.rewrite,
		templatedFn: func(b []byte) bool { return len(b) > 0 && b[0]>>4 == 1 }})
}

package profile

import (
	"reflect"
	"testing"
)

// TestBuiltinFilesAreTheGoProfiles: the mqtt, mqtt-ws and redis built-ins
// are files in the syntax users write (builtin/*.yaml, with hooks: for
// what the syntax cannot say); each parses to the Spec the Go code built
// before they were files, kept here, so they are the same profiles.
func TestBuiltinFilesAreTheGoProfiles(t *testing.T) {
	for name, want := range map[string]*Spec{"mqtt": goMQTT(TCP), "mqtt-ws": goMQTT(WebSocket), "redis": goRedis()} {
		data, ok := BuiltinFile(name)
		if !ok {
			t.Fatalf("%s: no built-in file", name)
		}
		got, err := ParseSpec(name+".yaml", data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the file parses to\n%+v\nwant the Go profile's\n%+v", name, got, want)
		}
		p, err := Lookup(name)
		if err != nil || p.hooks == nil {
			t.Errorf("%s: %v, hooks %v", name, err, p.hooks)
		}
	}
}

func b(v int) *int { return &v }

// goRedis is the redis built-in as Go code built it.
func goRedis() *Spec {
	cmd := func(name, c string) KindSpec { return KindSpec{Name: name, Match: MatchSpec{Command: c}} }
	s := &Spec{
		Name: "redis", Transport: "tcp", Port: 6379,
		Hooks: "redis", Framing: FramingSpec{Type: "resp"},
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
	return s
}

// goMQTT is the mqtt and mqtt-ws built-ins as Go code built them.
func goMQTT(t Transport) *Spec {
	typ := func(name string, v int) KindSpec {
		return KindSpec{Name: name, Match: MatchSpec{Byte: b(v), Mask: b(0xf0)}}
	}
	s := &Spec{
		Name: "mqtt", Transport: string(t), Port: 1883,
		Hooks: "mqtt", Framing: FramingSpec{Type: "varint", Offset: 1, Max: 1 << 20},
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
	return s
}

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

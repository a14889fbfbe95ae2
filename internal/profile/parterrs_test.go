package profile

import (
	"errors"
	"strings"
	"testing"
)

// partBase is a websocket profile that compiles: each case below adds
// one part holding two or more mistakes.
const partBase = `name: p
transport: websocket
framing: {type: message}
kinds:
  client:
    - {name: hello, match: {prefix: HELLO}}
    - {name: say, match: {prefix: SAY}}
  server:
    - {name: welcome, match: {prefix: WELCOME}}
    - {name: ping, match: {prefix: PING}}
login: {send: [hello], success: welcome}
`

// TestPartErrorsAll: each part of a profile names every mistake it
// holds, at its key path and line, in the profile's words and with
// "did you mean" where a word was slipped, in the file's order; the
// error unwraps to the first as a *LineError. A key or a value the
// decoder would refuse is named before any value is judged, never in the
// decoder's words.
func TestPartErrorsAll(t *testing.T) {
	for _, tc := range []struct {
		part string
		yaml string // added to partBase, in place of its line of the same top key
		want []string
	}{
		{"framing", "framing: {type: length, size: 3, counts: hole}", []string{
			`p.yaml:11: framing.size: 3: 1, 2, 4 or 8`,
			`p.yaml:11: framing.counts: "hole": after or whole (did you mean whole?)`,
		}},
		{"framing counted", "framing: {type: counted, count: '(', endian: bog}", []string{
			`p.yaml:11: framing.endian: "bog": big or little (did you mean big?)`,
			"p.yaml:11: framing.count: error parsing regexp: missing closing ): `(`",
		}},
		{"http", `http:
  - name: Lobby
    method: GTE
    url: matchmake
    headers: {"bad name": x, X-Ok: "${nope}"}
    take:
      - {name: Tok, json: "$.a..b"}
      - {name: seat, regexp: "no group", header: X-Seat}
  - {url: "/join?t=${tok}", take: [{name: room}]}
connect: "${nowhere}:80"
upgrade_query: {"a=b": x, sid: "${seat"}
`, []string{
			`p.yaml:13: http[0].name: "Lobby": lower case letters, digits and _`,
			`p.yaml:14: http[0].method: "GTE": an HTTP method (GET, POST, PUT, ...) (did you mean GET?)`,
			`p.yaml:15: http[0].url: "matchmake": a path (/matchmake/...) or an http:// or https:// URL`,
			`p.yaml:16: http[0].headers.X-Ok: ${nope}: not user, room, index, random or a correlation's name`,
			`p.yaml:16: http[0].headers.bad name: "bad name" is not a header's name (letters, digits and !#$%&'*+-.^_` + "`" + `|~)`,
			`p.yaml:18: http[0].take[0].name: "Tok": lower case letters, digits and _`,
			`p.yaml:18: http[0].take[0].json: "$.a..b": an empty key`,
			`p.yaml:19: http[0].take[1].regexp: "no group": a regular expression with one group`,
			`p.yaml:19: http[0].take[1]: give one of json, regexp or header`,
			`p.yaml:20: http[1].url: ${tok}: not user, room, index, random or a correlation's name (did you mean Tok?)`,
			`p.yaml:20: http[1].take[0]: give one of json, regexp or header`,
			`p.yaml:21: connect: ${nowhere}: not user, room, index, random or a correlation's name`,
			`p.yaml:22: upgrade_query: "a=b" is not a query parameter's name`,
			`p.yaml:22: upgrade_query.sid: "${seat": ${ without }`,
		}},
		{"reactions", `reactions:
  - {on: pnig, send: {text: "PONG ${1}"}, when: {regexp: "("}}
  - {on: ping, capture: {User: {offset: 1}, n: {regexp: x}}, send: {text: "${n} ${zz}"}, as: Pong}
`, []string{
			`p.yaml:13: reactions[0].on: "pnig" is not a server kind (did you mean ping?)`,
			"p.yaml:13: reactions[0].when.regexp: error parsing regexp: missing closing ): `(`",
			`p.yaml:14: reactions[1].as: "Pong": a kind name is lower case letters, digits and _ (up to 32)`,
			`p.yaml:14: reactions[1].capture.User: "User": a capture name is lower case letters, digits and _, and not user, room or index`,
			`p.yaml:14: reactions[1].capture.User.length: 0: give a length from 1 to 1024 with an offset, or a regexp`,
			`p.yaml:14: reactions[1].capture.n.regexp: "x": a regular expression with one group`,
			`p.yaml:14: reactions[1].send: ${zz}: not user, room, index, random or a correlation's name`,
		}},
		{"rooms", `rooms:
  assigned_by: sever
  instance: {kind: welcom, regexp: "(", json: "$..x"}
`, []string{
			`p.yaml:13: rooms.assigned_by: "sever": client or server (did you mean server?)`,
			`p.yaml:14: rooms.instance.kind: "welcom" is not a server kind (did you mean welcome?)`,
			`p.yaml:14: rooms.instance: give regexp or json, not both`,
			`p.yaml:14: rooms.instance.regexp: "(": a regular expression with one group`,
			`p.yaml:14: rooms.instance.json: "$..x": an empty key`,
		}},
		{"variants", `variants:
  - {name: Poll, when: "(", connect: "${x}"}
  - name: ws
    http: [{url: nope}]
    login: {send: [helo], success: welcom}
`, []string{
			`p.yaml:13: variants[0].name: "Poll": a variant's name is lower case letters, digits and _, once (the file's own is default)`,
			"p.yaml:13: variants[0].when: \"(\": error parsing regexp: missing closing ): `(`",
			`p.yaml:13: variants[0].connect: ${x}: not user, room, index, random or a correlation's name`,
			`p.yaml:15: variants[1].http[0].url: "nope": a path (/matchmake/...) or an http:// or https:// URL`,
			`p.yaml:16: variants[1].login.send[0]: "helo" is not a client kind (did you mean hello?)`,
			`p.yaml:16: variants[1].login.success: "welcom" is not a server kind (did you mean welcome?)`,
		}},
		// The file's own mistake (sends) is named once, not again under
		// each variant; a variant's own fields are still checked.
		{"variants beside a broken file", `sends: [sya]
variants:
  - {name: poll, connect: "${x}"}
  - {name: ws, login: {send: [helo], success: welcome}}
`, []string{
			`p.yaml:12: sends[0]: "sya" is not a client kind (did you mean say?)`,
			`p.yaml:14: variants[0].connect: ${x}: not user, room, index, random or a correlation's name`,
			`p.yaml:15: variants[1].login.send[0]: "helo" is not a client kind (did you mean hello?)`,
		}},
		{"identity server ids", `correlation:
  - {name: sid, from: {kind: welcome, regexp: "id=(\\w+)"}}
identity:
  server_id: sdi
  server_peers: {kind: say, regexp: "("}
`, []string{
			`p.yaml:15: identity.server_id: "sdi" is not a correlation's name: the client's server id is a value the server hands out (correlation) (did you mean sid?)`,
			`p.yaml:16: identity.server_peers.regexp: "(": a regular expression with one group`,
		}},
		{"identity", `identity:
  format: "u%0999999999d"
  length_before: 3
  endian: bigg
`, []string{
			`p.yaml:13: identity.format: "u%0999999999d": exactly one %d (or a padded one up to %099d) and no other verb`,
			`p.yaml:14: identity.length_before: 3: 0, 1, 2 or 4`,
			`p.yaml:15: identity.endian: "bigg": big or little (did you mean big?)`,
		}},
		{"values before decoding", `port: 99999
heartbeat: {interval: 5, template: {hex: "0g"}}
leave: {text: x, text: y}
login:
  steps:
    - {send: [{kind: hello, as: say}, [hello]], success: welcome}
latency: {send: say, delivery: ping, timeout: soon}
`, []string{
			`p.yaml:11: port: "99999": want a whole number from 0 to 65535`,
			`p.yaml:12: heartbeat.interval: "5" is not a duration like 5s`,
			`p.yaml:13: leave.text: given twice (first at line 13)`,
			`p.yaml:16: login.steps[0].send[0].as: a send with kind hello counts as that kind: drop as`,
			`p.yaml:16: login.steps[0].send[1]: want a kind name or a template (text or hex, with as)`,
			`p.yaml:17: latency.timeout: unknown key (keys here: add, delivery, delivery_offset, encoding, json, regexp, send, send_offset)`,
		}},
		// The YAML parser's own lines are off by one (yaml.v3 numbers
		// them from 0); its scanner's are not.
		{"yaml parser", "reactions: [{on: ping, send: {text: x}\n", []string{
			`p.yaml:12: did not find expected ',' or '}'`,
		}},
		{"yaml scanner", "sends: [say]\nleave: x: y\n", []string{
			`p.yaml:13: mapping values are not allowed in this context`,
		}},
	} {
		t.Run(tc.part, func(t *testing.T) {
			src := partBase + tc.yaml
			for _, l := range strings.Split(tc.yaml, "\n") {
				key, _, ok := strings.Cut(l, ":")
				if !ok || strings.HasPrefix(l, " ") {
					continue
				}
				for _, b := range strings.Split(partBase, "\n") {
					if strings.HasPrefix(b, key+":") {
						src = strings.Replace(src, b+"\n", "", 1)
					}
				}
			}
			_, err := ParseSpec("p.yaml", []byte(src))
			if err == nil {
				t.Fatal("no error")
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line == 0 {
				t.Errorf("no *LineError with a line in %T", err)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

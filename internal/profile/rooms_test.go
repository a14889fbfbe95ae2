package profile

import (
	"strings"
	"testing"
)

// roomsDoc is a line protocol whose server puts the joiner in a room
// instance: it welcomes the client, then lists the instance's members
// (the first one names it) or says where it placed it, in JSON.
const roomsDoc = `name: rooms
port: 9000
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client:
    - {name: join, match: {prefix: "JOIN "}}
    - {name: say, match: {prefix: "SAY "}}
  server:
    - {name: welcome, match: {prefix: "WELCOME"}}
    - {name: members, match: {prefix: "MEMBERS "}}
    - {name: placed, match: {prefix: "PLACED "}}
    - {name: say, match: {prefix: "SAY "}}
login: {send: [join], success: welcome}
sends: [say]
delivery: [say]
identity: {room: {regexp: "^JOIN (\\w+)"}}
`

func roomsRecording() Recording {
	return Recording{
		Client: []Segment{{0, []byte("JOIN lobby\n")}, {at(10), []byte("SAY hi\n")}},
		Server: []Segment{{at(1), []byte("WELCOME\n")}, {at(2), []byte("MEMBERS rec,x\n")}, {at(3), []byte(`PLACED {"room":{"id":"lobby--2"}}` + "\n")}},
	}
}

// TestRoomsInstance: a client's login waits for the server to name its
// instance (by a regexp group or a JSON path), keeps the first one it is
// named, and the script notes the recorded client's.
func TestRoomsInstance(t *testing.T) {
	for _, tc := range []struct {
		name, rooms string
		extra       string   // more of the profile
		feed        []string // after WELCOME
		want        string
		note        string
	}{
		{"occupant list", "{kind: members, regexp: '^MEMBERS ([^,]+)'}", "", []string{"MEMBERS a,b\n", "MEMBERS z,a\n"}, "a", `instance "rec" (named by the server's members message)`},
		{"json path", "{kind: placed, json: $.room.id}", "", []string{"SAY not yet\n", `PLACED {"room":{"id":"lobby--3"}}` + "\n", `PLACED {"room":{"id":"lobby"}}` + "\n"}, "lobby--3", `instance "lobby--2"`},
		{"any kind", "{regexp: 'room.:..id.:.([\\w-]+)'}", "", []string{`PLACED {"room":{"id":"r9"}}` + "\n"}, "r9", `instance "lobby--2" (named by any server message)`},
		{"correlation", "{correlation: seat}", "correlation: [{name: seat, from: {kind: placed, regexp: '\"id\":\"([^\"]+)\"'}}]\n",
			[]string{"MEMBERS a\n", `PLACED {"room":{"id":"r7"}}` + "\n", `PLACED {"room":{"id":"r8"}}` + "\n"}, "r8", `instance "lobby--2" (its seat value)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := compileDoc(t, roomsDoc+tc.extra+"rooms: {assigned_by: server, instance: "+tc.rooms+"}\n")
			s, err := p.Compile(p.Messages(roomsRecording()), ScriptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !s.RoomsAssigned() {
				t.Fatal("RoomsAssigned is false")
			}
			if notes := strings.Join(s.Notes(), "; "); !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
			cl, err := s.NewClient(Identity{Index: 1, Clients: 2, User: "u1", Room: "lobby"})
			if err != nil {
				t.Fatal(err)
			}
			in := cl.(Instancer)
			if ev := feed(t, cl, "WELCOME\n"); ev.LoggedIn || in.Instance() != "" {
				t.Fatalf("logged in %v with instance %q before the server named one", ev.LoggedIn, in.Instance())
			}
			loggedIn := false
			for _, m := range tc.feed {
				ev := feed(t, cl, m)
				loggedIn = loggedIn || ev.LoggedIn
			}
			if !loggedIn || in.Instance() != tc.want {
				t.Errorf("logged in %v, instance %q; want true, %q", loggedIn, in.Instance(), tc.want)
			}
		})
	}
	p := compileDoc(t, roomsDoc)
	s, err := p.Compile(p.Messages(roomsRecording()), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := s.NewClient(Identity{Index: 1, Clients: 2, User: "u1", Room: "lobby"})
	if err != nil {
		t.Fatal(err)
	}
	if s.RoomsAssigned() || !feed(t, cl, "WELCOME\n").LoggedIn || cl.(Instancer).Instance() != "" {
		t.Error("without rooms: the client picks its room, the login needs no instance")
	}
}

// TestRoomsNoInstanceRecorded: a recording whose server never names an
// instance is said so (each login would wait until its timeout).
func TestRoomsNoInstanceRecorded(t *testing.T) {
	p := compileDoc(t, roomsDoc+"rooms: {assigned_by: server, instance: {kind: members, regexp: 'NOPE (\\w+)'}}\n")
	s, err := p.Compile(p.Messages(roomsRecording()), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(s.Notes(), "; "); !strings.Contains(notes, "no server message in the recording names an instance") {
		t.Errorf("notes %q", notes)
	}
}

// TestRoomsSpecErrors: each mistake in rooms is one line naming it.
func TestRoomsSpecErrors(t *testing.T) {
	for _, tc := range []struct{ rooms, want string }{
		{"{assigned_by: sever}", `rooms.assigned_by: "sever": client or server (did you mean server?)`},
		{"{assigned_by: me}", `rooms.assigned_by: "me": client or server`},
		{"{assigned_by: server, instnace: {regexp: 'a(b)'}}", "rooms.instnace: unknown key (did you mean instance?)"},
		{"{assigned_by: server}", "rooms.instance: assigned_by: server needs instance"},
		{"{instance: {regexp: 'a(b)'}}", "rooms.instance: only with assigned_by: server"},
		{"{assigned_by: server, instance: {kind: members}}", "rooms.instance: give regexp (its first group) or json"},
		{"{assigned_by: server, instance: {regexp: 'a(b)', json: $.a}}", "rooms.instance: give regexp or json, not both"},
		{"{assigned_by: server, instance: {regexp: 'ab'}}", `rooms.instance.regexp: "ab": a regular expression with one group`},
		{"{assigned_by: server, instance: {json: '$.a[x]'}}", `rooms.instance.json: "$.a[x]": index "x" is not a number`},
		{"{assigned_by: server, instance: {kind: member, regexp: 'a(b)'}}", `rooms.instance.kind: "member" is not a server kind`},
		{"{assigned_by: server, instance: {correlation: seat}}", `rooms.instance.correlation: "seat": no correlation or http step value of that name (there are none)`},
		{"{assigned_by: server, instance: {correlation: seat, regexp: 'a(b)'}}", "rooms.instance: give correlation, or kind with regexp or json, not both"},
	} {
		s, err := ParseSpec("t.yaml", []byte(roomsDoc+"rooms: "+tc.rooms+"\n"))
		if err == nil {
			_, err = Compile(s)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rooms %s: error %v, want %q", tc.rooms, err, tc.want)
		}
	}
}

package profile

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Server-assigned room instances: some servers, not their clients, pick
// the room a client ends up in. networked-aframe's socket.io server puts
// the first 50 joiners of room "lobby" in "lobby", the next 50 in
// "lobby--2", in join order; matchmakers answer the room id they seated
// a client in. A replayed client asks for the recorded room like the
// recorded one did; which instance it landed in is known only from the
// server's answers. The profile says where (rooms.instance: a server
// kind and a regexp group or a JSON path); each client takes the first
// value it is handed, its login waits for it, and the fleet places its
// senders and counts its expected deliveries by it (RoomsAssigned,
// Instancer). A later value (the instance's members changing) does not
// move the client: a server that moves clients between instances is not
// followed.

// RoomsSpec says who picks each client's room instance.
type RoomsSpec struct {
	// AssignedBy is client (the default: the room the client asks for,
	// --room and --room-size rewrite it) or server.
	AssignedBy string `yaml:"assigned_by"`
	// Instance is where a server message names the client's instance.
	Instance *InstanceSpec `yaml:"instance"`
}

// InstanceSpec places a room instance's name in a server message: the
// first group of Regexp, or the value at JSON (a path, $.room.id,
// $[1].room) in the JSON that starts at the message's first { or [; or
// it is the value of a correlation (an HTTP step's take: the room id a
// matchmaker answered).
type InstanceSpec struct {
	Kind        string `yaml:"kind"`
	Regexp      string `yaml:"regexp"`
	JSON        string `yaml:"json"`
	Correlation string `yaml:"correlation"`
}

// instanceRule is a compiled InstanceSpec.
type instanceRule struct {
	kind int // server kind, -1 any
	re   *regexp.Regexp
	json []string
	// corr is 1 + the correlation whose value names the instance, 0
	// when a server message does.
	corr int
}

// compileRooms compiles rooms, every mistake at once.
func (s *Spec) compileRooms(p *Profile) error {
	r := s.Rooms
	if r == nil {
		return nil
	}
	var errs specErrors
	switch r.AssignedBy {
	case "", "client":
		if r.Instance != nil {
			errs.add(bad("rooms.instance", "only with assigned_by: server (the client picks its room otherwise)"))
		}
		return errs.err()
	case "server":
	default:
		errs.add(oneOf("rooms.assigned_by", r.AssignedBy, "client", "server"))
		if r.Instance == nil {
			return errs // nothing more to check: which was meant is unknown
		}
	}
	in := r.Instance
	if in == nil {
		errs.add(bad("rooms.instance", "assigned_by: server needs instance: the server kind and the regexp or json path that name the client's instance"))
		return errs
	}
	rule := &instanceRule{kind: -1}
	if in.Kind != "" {
		if rule.kind = p.serverKind(in.Kind); rule.kind < 0 {
			errs.add(bad("rooms.instance.kind", "%q is not a server kind%s", in.Kind, p.kindHint(in.Kind, true)))
		}
	}
	if in.Correlation != "" {
		if in.Regexp != "" || in.JSON != "" || in.Kind != "" {
			errs.add(bad("rooms.instance", "give correlation, or kind with regexp or json, not both"))
		}
		for i := range p.corrs {
			if p.corrs[i].name == in.Correlation {
				rule.corr = i + 1
			}
		}
		if rule.corr == 0 {
			errs.add(bad("rooms.instance.correlation", "%q: no correlation or http step value of that name%s", in.Correlation, p.corrHint(in.Correlation)))
		}
	} else if in.Regexp == "" && in.JSON == "" {
		errs.add(bad("rooms.instance", "give regexp (its first group) or json (a path) for the instance's name, or the correlation that holds it"))
	}
	if in.Correlation == "" && in.Regexp != "" && in.JSON != "" {
		errs.add(bad("rooms.instance", "give regexp or json, not both"))
	}
	if in.Regexp != "" {
		re, err := regexp.Compile(in.Regexp)
		if err != nil || re.NumSubexp() < 1 {
			errs.add(bad("rooms.instance.regexp", "%q: a regular expression with one group", in.Regexp))
		}
		rule.re = re
	}
	if in.JSON != "" {
		path, err := parseJSONPath(in.JSON)
		if err != nil {
			errs.add(bad("rooms.instance.json", "%q: %v", in.JSON, err))
		}
		rule.json = path
	}
	if len(errs) > 0 {
		return errs
	}
	p.rooms = rule
	return nil
}

// take is the instance m (of server kind k) names, nil when none.
func (r *instanceRule) take(m []byte, k int) []byte {
	if r.corr > 0 || r.kind >= 0 && k != r.kind {
		return nil
	}
	if r.re != nil {
		g := r.re.FindSubmatch(m)
		if len(g) < 2 || len(g[1]) == 0 {
			return nil
		}
		return g[1]
	}
	start := -1
	for i, b := range m {
		if b == '{' || b == '[' {
			start = i
			break
		}
	}
	if start < 0 {
		return nil
	}
	var doc any
	if json.Unmarshal(m[start:], &doc) != nil {
		return nil
	}
	v, ok := jsonAt(doc, r.json)
	if !ok || len(v) == 0 {
		return nil
	}
	return v
}

// maxInstanceName bounds an instance's name as the fleet keeps it.
const maxInstanceName = 256

// RoomsAssigned reports whether the server, not the client, picks each
// client's room instance (rooms.assigned_by: server): the fleet learns
// it from each client (Instancer) once its login is done.
func (s *Script) RoomsAssigned() bool { return s.p.rooms != nil }

// Instancer is a client that learns its room instance from the server.
type Instancer interface {
	// Instance is the instance the server put the client in, "" while
	// none was named.
	Instance() string
}

// Instance implements Instancer.
func (c *client) Instance() string {
	if r := c.s.p.rooms; r != nil && r.corr > 0 {
		if v := c.vals[r.corr-1].Load(); v != nil {
			return string(*v)
		}
		return ""
	}
	if v := c.instance.Load(); v != nil {
		return *v
	}
	return ""
}

// hasInstance reports whether the client knows its instance.
func (c *client) hasInstance() bool {
	if r := c.s.p.rooms; r.corr > 0 {
		return c.vals[r.corr-1].Load() != nil
	}
	return c.instance.Load() != nil
}

// learnInstance keeps the first instance a server message names.
func (c *client) learnInstance(m []byte, k int) {
	r := c.s.p.rooms
	if r == nil || r.corr > 0 || c.instance.Load() != nil {
		return
	}
	if v := r.take(m, k); v != nil {
		if len(v) > maxInstanceName {
			v = v[:maxInstanceName]
		}
		name := string(v)
		c.instance.Store(&name)
	}
}

// noteInstance says which instance the recorded client was put in, or
// that the recording names none (every login would wait for one until
// its timeout).
func (s *Script) noteInstance(server []Message) {
	r := s.p.rooms
	if r == nil {
		return
	}
	if r.corr > 0 {
		c := &s.p.corrs[r.corr-1]
		v := s.corrs[r.corr-1]
		if v == nil {
			s.notes = append(s.notes, fmt.Sprintf("rooms: assigned by the server: each client's instance is its %s value; the recording holds none", c.name))
			return
		}
		s.notes = append(s.notes, fmt.Sprintf("rooms: assigned by the server: the recorded client was put in instance %q (its %s value); each replayed client's is its own", v, c.name))
		return
	}
	where := "any server message"
	if r.kind >= 0 {
		where = "the server's " + s.p.server[r.kind].name + " message"
	}
	for _, m := range server {
		if v := r.take(m.Bytes, m.Kind); v != nil {
			s.notes = append(s.notes, fmt.Sprintf("rooms: assigned by the server: the recorded client was put in instance %q (named by %s); each replayed client's login waits for its own", v, where))
			return
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("rooms: assigned by the server, but no server message in the recording names an instance (rooms.instance: %s): every login would wait for one until its timeout", where))
}

// corrHint follows "no correlation of that name": the one probably
// meant, or the names there are.
func (p *Profile) corrHint(name string) string {
	var names []string
	for _, c := range p.corrs {
		names = append(names, c.name)
	}
	if s := suggest(name, names); s != "" {
		return " (did you mean " + s + "?)"
	}
	if len(names) == 0 {
		return " (there are none)"
	}
	return " (there are " + strings.Join(names, ", ") + ")"
}

package profile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Values carried between a client's connections in turn (--flows all,
// load.go's inTurn): a value the server handed out on one connection (a
// token, a seat, a room instance) that the recorded client then sent on
// its next connection is found as a lobby socket's are (Links: its
// answer's JSON path, where the next flow carried it) and carried as an
// HTTP step's take is: the earlier connection's profile takes it from
// this client's own server messages by that path (a correlation whose
// value it gives on: the latest that had it), the next connection's puts it where the recording
// carried it (a take with recorded, substituted in its upgrade and
// messages). The fleet hands it over between the two (Carry) before the
// next login. Only the profiles of such flows hold these: a client of
// any other pays nothing.

// TurnSpec are the values one connection gives the client's next
// (Gives: name and JSON path in a server message) and takes from its
// previous (Takes: name and where the recording carried it).
type TurnSpec struct {
	Gives []TakeSpec
	Takes []TakeSpec
}

// compileTurn compiles the Turn values into correlations after the HTTP
// takes, every mistake at once.
func (s *Spec) compileTurn(p *Profile) error {
	var errs specErrors
	for i, t := range s.Turn.Gives {
		path, err := parseJSONPath(t.JSON)
		if err != nil {
			errs.add(bad(fmt.Sprintf("turn.gives[%d].json", i), "%q: %v", t.JSON, err))
			continue
		}
		p.corrs = append(p.corrs, corrRule{name: t.Name, from: fieldRule{kind: -1, json: path}})
	}
	for i, t := range s.Turn.Takes {
		c := corrRule{name: t.Name, from: fieldRule{kind: -1}, carried: true}
		if t.Recorded != nil {
			f, err := p.compileField(fmt.Sprintf("turn.takes[%d].recorded", i), t.Recorded, false)
			errs.add(err)
			c.recorded = f
		}
		p.corrs = append(p.corrs, c)
		p.turnTakes = true
	}
	return errs.err()
}

// takeJSON is the value at path in a server message, nil when the
// message is not JSON or has none there. The path's last key is looked
// for first: most messages are not decoded.
func takeJSON(m []byte, path []string) []byte {
	last := path[len(path)-1]
	if last[0] != '[' && !bytes.Contains(m, strconv.AppendQuote(nil, last)) {
		return nil
	}
	var doc any
	if json.Unmarshal(m, &doc) != nil {
		return nil
	}
	v, _ := jsonAt(doc, path)
	return v
}

// Carry hands the values a client's connection took for its next one
// (its Turn gives) to the client of that next connection (its Turn
// takes, by name), before the next login. missing names the first value
// the earlier connection never got (missing_<name>), "" when all are in.
// Clients of other players take nothing.
func Carry(from, to Client) (missing string) {
	f, ok1 := from.(*client)
	t, ok2 := to.(*client)
	if !ok1 || !ok2 || !t.s.p.turnTakes {
		return ""
	}
	for i := range t.s.p.corrs {
		tc := &t.s.p.corrs[i]
		if !tc.carried {
			continue
		}
		var v *[]byte
		for j := range f.s.p.corrs {
			if fc := &f.s.p.corrs[j]; fc.from.json != nil && fc.name == tc.name {
				v = f.vals[j].Load()
			}
		}
		if v == nil {
			return "missing_" + tc.name
		}
		t.vals[i].Store(v) // never written again: shared
	}
	return ""
}

// turnLinks splits off the links of values a connection's server handed
// out that the client sent on its next connection, having played on
// (a client message after that answer): a client's connections in
// turn, not a lobby socket closed once its values were in (the rest,
// which become steps: flowgroup.go). A socket flow that played on
// carries all its links so.
func turnLinks(links []Link, flows map[int]FlowData) (turn, rest []Link) {
	playedOn := func(l Link) bool {
		f := flows[l.From]
		k, err := strconv.Atoi(l.Exchange[len(socketMessage):])
		if err != nil || k >= len(f.Answers) {
			return false
		}
		at := f.Answers[k].Offset
		for _, m := range f.Msgs {
			if m.Offset > at {
				return true
			}
		}
		return false
	}
	on := map[int]bool{}
	for _, l := range links {
		if l.Socket() && !l.Addr() && playedOn(l) {
			on[l.From] = true
		}
	}
	for _, l := range links {
		switch {
		case on[l.From] && l.Socket() && !l.Addr() && !flows[l.To].isHTTP():
			turn = append(turn, l)
		case on[l.From] && l.Header != "":
			// A connection in turn's 101 header: carried values are
			// taken from server messages only; this one is not carried.
		default:
			rest = append(rest, l)
		}
	}
	return turn, rest
}

// isHTTP reports whether the flow is plain HTTP (no realtime connection).
func (f FlowData) isHTTP() bool { return f.HTTP != nil }

// carries makes the profiles of the flows that give or take values in
// turn (the links' From and To): each From takes the value by the
// link's JSON path from its own server messages, each To puts it where
// the recording carried it. A profile that is no file's (a built-in)
// carries nothing, and a note says so.
func (p *Profile) carries(links []Link, out *flowSessions) {
	if len(links) == 0 {
		return
	}
	if p.spec == nil {
		out.notes = append(out.notes, fmt.Sprintf("--flows all: profile %s is not a file's: the values flow %d's server handed out are not carried to flow %d", p.Name, links[0].From, links[0].To))
		return
	}
	turns := map[int]*TurnSpec{}
	spec := func(f int) *TurnSpec {
		if turns[f] == nil {
			turns[f] = &TurnSpec{}
		}
		return turns[f]
	}
	names := map[string]bool{"user": true, "room": true, "index": true, "random": true}
	for _, c := range p.spec.Correlation {
		names[c.Name] = true
	}
	out.next = map[int]int{}
	var desc []string
	for _, l := range links {
		if to, ok := out.next[l.From]; ok && to != l.To {
			continue // one next connection per flow: the first linked
		}
		out.next[l.From] = l.To
		name := l.name()
		for n := 2; names[name]; n++ {
			name = fmt.Sprintf("%s_%d", l.name(), n)
		}
		names[name] = true
		spec(l.From).Gives = append(spec(l.From).Gives, TakeSpec{Name: name, JSON: l.Path})
		spec(l.To).Takes = append(spec(l.To).Takes, TakeSpec{Name: name, Recorded: &FieldSpec{Regexp: l.Recorded}})
		desc = append(desc, fmt.Sprintf("%s (flow %d's %s at %s, sent in flow %d's %s)", name, l.From, l.Exchange, l.Path, l.To, l.Where))
	}
	out.carry = map[int]*Profile{}
	for f, t := range turns {
		s := *p.spec
		s.Turn = *t
		dp, err := Compile(&s)
		if err != nil {
			out.notes = append(out.notes, fmt.Sprintf("--flows all: flow %d cannot carry values in turn: %v", f, err))
			delete(out.next, f)
			continue
		}
		out.carry[f] = dp
	}
	out.notes = append(out.notes, "each client carries to its next connection the values its own server handed out: "+strings.Join(desc, "; "))
}

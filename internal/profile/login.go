package profile

import (
	"fmt"
	"strings"
)

// A login in steps: each step sends its messages (recorded client kinds,
// or templates), then waits for its answer before the next is sent; a
// value the server hands out in one step (a correlation) is in the next
// step's messages. "Logged in" is the last step's answer. The fleet sends
// the first step (AppendLogin); the later ones come back from Feed as
// replies when their turn comes.

// maxLoginSteps bounds a login's steps (and so the failure labels).
const maxLoginSteps = 8

// loginRule is a compiled LoginStepSpec.
type loginRule struct {
	name    string
	items   []loginItem
	success int // server kind, -1: the next message that is no refusal
	when    *matcher
	// starttls: TLS starts after this step's answer (StartTLS).
	starttls bool
}

// loginItem is a recorded client kind (kind > 0), a template, or both
// (the recorded run, else the template).
type loginItem struct {
	kind int
	tmpl *template
	as   int // the template's kind, -1: the kind it matches
}

// compileLoginSteps compiles login.steps (after the correlations, which
// templates may name).
func (s *Spec) compileLoginSteps(p *Profile) error {
	l := s.Login
	if len(l.Steps) == 0 {
		return nil
	}
	if len(l.Send) > 0 || l.Success != "" || l.When != nil {
		return bad("login.steps", "give send, success and when in each step, not beside steps")
	}
	var errs specErrors
	if len(l.Steps) > maxLoginSteps {
		errs.add(bad("login.steps", "%d steps: at most %d", len(l.Steps), maxLoginSteps))
	}
	p.loginSend = map[int]bool{}
	seen := map[string]bool{}
	for i, st := range l.Steps {
		r, err := p.compileLoginStep(fmt.Sprintf("login.steps[%d]", i), i, i == len(l.Steps)-1, st, seen)
		errs.add(err)
		if err == nil {
			p.steps = append(p.steps, r)
		}
	}
	return errs.err()
}

// compileLoginStep compiles login step i, every mistake at once; seen
// holds the step names before it.
func (p *Profile) compileLoginStep(path string, i int, last bool, st LoginStepSpec, seen map[string]bool) (loginRule, error) {
	var errs specErrors
	r := loginRule{name: st.Name, success: -1, starttls: st.StartTLS}
	if st.StartTLS && last {
		errs.add(bad(path+".starttls", "the last step's answer ends the login: TLS starts after a step that has another after it"))
	}
	if r.name == "" {
		r.name = fmt.Sprintf("step%d", i+1)
	}
	if !validName.MatchString(r.name) || seen[r.name] {
		errs.add(bad(path+".name", "%q: a step name is lower case letters, digits and _, once", r.name))
	} else if w, ok := reservedStepName(r.name); ok {
		errs.add(bad(path+".name", "%q: a step's failures are labelled <step>_<reason>, and %s_... names the fleet's own failures (connect_timeout, tls_error, ...): name the step otherwise", r.name, w))
	}
	seen[r.name] = true
	for j, it := range st.Send {
		ip := fmt.Sprintf("%s.send[%d]", path, j)
		k := 0
		if it.Kind != "" {
			if k = p.clientKind(it.Kind); k <= 0 || !p.declaredClient(it.Kind) {
				errs.add(bad(ip, "%q is not a client kind%s", it.Kind, p.kindHint(it.Kind, false)))
				k = 0
			} else {
				p.loginSend[k] = true
			}
		}
		if it.Template == nil {
			r.items = append(r.items, loginItem{kind: k})
			continue
		}
		t, err := parseTemplate(*it.Template, p.clientResolver)
		if err != nil {
			errs.add(bad(ip, "%v", err))
			continue
		}
		if k > 0 { // the recorded run, else this template
			r.items = append(r.items, loginItem{kind: k, tmpl: t, as: k})
			continue
		}
		as := -1
		if it.As != "" {
			as = p.clientKind(it.As) // added by extraKinds
		}
		r.items = append(r.items, loginItem{tmpl: t, as: as})
	}
	if st.Success != "" {
		if r.success = p.serverKind(st.Success); r.success < 0 {
			errs.add(bad(path+".success", "%q is not a server kind%s", st.Success, p.kindHint(st.Success, true)))
		}
	}
	if st.When != nil {
		m, err := compileMatch(path+".when", *st.When)
		errs.add(err)
		r.when = m
	}
	if len(errs) > 0 {
		return r, errs
	}
	return r, nil
}

// StartsTLS reports whether a login step starts TLS in band (starttls):
// a fleet with --tls then connects in plaintext and upgrades there.
func (p *Profile) StartsTLS() bool {
	for i := range p.steps {
		if p.steps[i].starttls {
			return true
		}
	}
	return false
}

// TransportLabelWords are the first words of the fleet's own login
// failure labels (connect_timeout, tls_bad_certificate, http_503, ...).
// A step's failures are labelled <step>_<reason>: a step named after one
// of them ("connect": connect_timeout) would read as the fleet's failure,
// so the name is refused. internal/fleet's test keeps the list complete.
var TransportLabelWords = []string{"closed", "connect", "http", "port", "protocol", "tls", "too", "upgrade", "write", "ws"}

// reservedStepName reports a step name that begins with a word of
// TransportLabelWords, and the word.
func reservedStepName(name string) (string, bool) {
	for _, w := range TransportLabelWords {
		if name == w || strings.HasPrefix(name, w+"_") {
			return w, true
		}
	}
	return "", false
}

// stage is one login step of a script: its messages and its answer.
type stage struct {
	name  string
	sends []stageSend
	rule  *loginRule // nil: the one-step login (Profile.accepts)
}

// stageSend is a script message (msg) or a template.
type stageSend struct {
	msg  int
	tmpl *template
	as   int
}

// planLogin assigns the recorded messages to the steps: each kind of a
// step takes the run of consecutive messages of that kind, in order. It
// returns the stages and how many of kept they took.
func (s *Script) planLogin(kept []Message) ([]stage, int, error) {
	p := s.p
	pos := 0
	out := make([]stage, 0, len(p.steps))
	for i := range p.steps {
		r := &p.steps[i]
		st := stage{name: r.name, rule: r}
		for j, it := range r.items {
			if it.kind == 0 {
				st.sends = append(st.sends, stageSend{msg: -1, tmpl: it.tmpl, as: it.as})
				continue
			}
			n := 0
			for pos < len(kept) && kept[pos].Kind == it.kind {
				st.sends = append(st.sends, stageSend{msg: pos})
				pos++
				n++
			}
			if n == 0 && it.tmpl != nil { // not recorded: the template
				st.sends = append(st.sends, stageSend{msg: -1, tmpl: it.tmpl, as: it.as})
				continue
			}
			if n == 0 {
				found := "the end of the flow"
				if pos < len(kept) {
					found = "a " + p.Kinds[kept[pos].Kind] + " message"
				}
				return nil, 0, fmt.Errorf("profile %s: login.steps[%d].send[%d]: no recorded %s message where the login is (found %s)", p.Name, i, j, p.Kinds[it.kind], found)
			}
		}
		out = append(out, st)
	}
	return out, pos, nil
}

// firstLogin is where a login in steps starts in c: at the first
// message of the first recorded kind the steps send, passing over kinds
// with a template for when none was recorded; 0 when the steps send only
// templates, -1 when a kind they need is not in c.
func (p *Profile) firstLogin(c []Message) int {
	for _, r := range p.steps {
		for _, it := range r.items {
			if it.kind == 0 {
				continue
			}
			if i := p.firstOf(c, it.kind); i >= 0 {
				return i
			}
			if it.tmpl == nil {
				return -1
			}
		}
	}
	return 0
}

// AppendLogin implements Client.
func (c *client) AppendLogin(dst []byte, i int, now int64) ([]byte, int, bool) {
	st := &c.s.stages[0]
	if i >= len(st.sends) {
		return dst, 0, false
	}
	dst, k := c.appendSend(dst, &st.sends[i], now)
	return dst, k, true
}

// LoginStage implements Client.
func (c *client) LoginStage() string {
	if len(c.s.stages) < 2 {
		return ""
	}
	return c.s.stages[c.stage].name
}

func (c *client) appendSend(dst []byte, sd *stageSend, now int64) ([]byte, int) {
	if sd.tmpl == nil {
		return c.AppendStep(dst, sd.msg, now)
	}
	start := len(dst)
	dst = sd.tmpl.render(dst, &tvalues{c: c})
	k := sd.as
	if k < 0 {
		k = c.s.p.ClientKind(dst[start:])
	}
	c.answered(k)
	return dst, k
}

// loginAnswer takes server message m (of kind k, no refusal) during the
// login: it ends the current step when it is the step's answer, and
// then appends the next step's messages to ev, or marks the last step
// answered.
func (c *client) loginAnswer(m []byte, k int, now int64, ev *Events) {
	st := &c.s.stages[c.stage]
	if !c.s.p.stageAccepts(st, m, k) {
		return
	}
	if c.stage == len(c.s.stages)-1 {
		c.okSeen = true
		return
	}
	ev.StartTLS = st.rule != nil && st.rule.starttls
	c.stage++
	next := &c.s.stages[c.stage]
	for i := range next.sends {
		var kind int
		ev.Reply, kind = c.appendSend(ev.Reply, &next.sends[i], now)
		ev.Replies = append(ev.Replies, Reply{End: len(ev.Reply), Kind: kind})
	}
}

// stageAccepts reports whether m (of kind k) answers the step: for the
// one-step login, the profile's success (a failed condition is a
// refusal there, see refusal); for a step, its kind and condition (a
// message that fails the condition is not the answer yet).
func (p *Profile) stageAccepts(st *stage, m []byte, k int) bool {
	r := st.rule
	if r == nil {
		return p.accepts(m, k)
	}
	if r.success >= 0 && k != r.success {
		return false
	}
	return r.when == nil || r.when.match(m)
}

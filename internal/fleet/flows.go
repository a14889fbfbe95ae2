package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/session"
)

// FlowSet chooses several recorded flows to replay in one fleet (--flows):
// every usable flow (All), or the listed indexes of `replay inspect`, each
// with a weight (Weights, parallel to Indexes; nil: 1 each). The zero
// FlowSet chooses none: the fleet plays the one flow of Config.Flow or
// Config.Client.
type FlowSet struct {
	All     bool
	Indexes []int
	Weights []int
}

// weight is the weight of the k-th listed flow.
func (s FlowSet) weight(k int) int {
	if k < len(s.Weights) {
		return s.Weights[k]
	}
	return 1
}

// IsSet reports whether s chooses flows.
func (s FlowSet) IsSet() bool { return s.All || len(s.Indexes) > 0 }

// String is s as ParseFlowSet reads it.
func (s FlowSet) String() string {
	if s.All {
		return "all"
	}
	parts := make([]string, len(s.Indexes))
	for i, n := range s.Indexes {
		parts[i] = strconv.Itoa(n)
		if s.Weights != nil {
			parts[i] += ":" + strconv.Itoa(s.weight(i))
		}
	}
	return strings.Join(parts, ",")
}

// maxWeight caps a flow's weight in --flows.
const maxWeight = 1_000_000

// ParseFlowSet reads "all" or a comma list of distinct flow indexes, each
// optionally with a weight ("0:3,1:1": three clients play flow 0 for each
// that plays flow 1); "" is the zero FlowSet.
func ParseFlowSet(text string) (FlowSet, error) {
	text = strings.TrimSpace(text)
	switch text {
	case "":
		return FlowSet{}, nil
	case "all":
		return FlowSet{All: true}, nil
	}
	var s FlowSet
	weighted := false
	for _, p := range strings.Split(text, ",") {
		idx, w, hasW := strings.Cut(strings.TrimSpace(p), ":")
		n, err := strconv.Atoi(strings.TrimSpace(idx))
		if err != nil || n < 0 {
			return FlowSet{}, fmt.Errorf("%q: want \"all\" or flow indexes like 0,2, optionally weighted like 0:3,1:1 (see replay inspect)", text)
		}
		weight := 1
		if hasW {
			weight, err = strconv.Atoi(strings.TrimSpace(w))
			if err != nil || weight < 1 || weight > maxWeight {
				return FlowSet{}, fmt.Errorf("%q: flow %d: weight %q is not a whole number from 1 to %d", text, n, w, maxWeight)
			}
			weighted = true
		}
		s.Weights = append(s.Weights, weight)
		for _, m := range s.Indexes {
			if m == n {
				return FlowSet{}, fmt.Errorf("%q: flow %d listed twice", text, n)
			}
		}
		s.Indexes = append(s.Indexes, n)
	}
	if !weighted {
		s.Weights = nil
	}
	return s, nil
}

// FlowSetValue is a FlowSet as a command-line flag (pflag.Value).
type FlowSetValue struct{ S *FlowSet }

func (v FlowSetValue) String() string {
	if v.S == nil {
		return ""
	}
	return v.S.String()
}

// Set parses text into the FlowSet.
func (v FlowSetValue) Set(text string) error {
	s, err := ParseFlowSet(text)
	if err != nil {
		return err
	}
	*v.S = s
	return nil
}

// Type names the flag's value in the usage.
func (FlowSetValue) Type() string { return "all|i[:w],j[:w],..." }

// flowOf is the index, among the scripts of a --flows fleet with these
// weights, of the one client i plays: with W the weights' sum, client i
// takes position i mod W, and script k holds weights[k] positions after
// those of the scripts before it. Every flow gets its share in join order
// and the shards of a fleet agree (it depends on i alone).
func flowOf(i int, weights []int) int {
	p := i % sum(weights)
	for k, w := range weights {
		if p < w {
			return k
		}
		p -= w
	}
	return len(weights) - 1 // not reached: p < sum(weights)
}

// flowClients is how many of clients play each script (flowOf).
func flowClients(clients int, weights []int) []int {
	total := sum(weights)
	rounds, rest := clients/total, clients%total
	out := make([]int, len(weights))
	lo := 0
	for k, w := range weights {
		out[k] = rounds * w
		out[k] += max(0, min(rest, lo+w)-lo)
		lo += w
	}
	return out
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// FlowClients is one flow of a --flows fleet in its summary: the flow's
// index in `replay inspect`, its recorded client, how many of the
// fleet's clients play it (the whole fleet's, in every shard's summary
// alike), and this run's (or shard's) logins, messages sent and
// messages received by those clients, which shards' summaries add up.
type FlowClients struct {
	Flow     int    `json:"flow"`
	Client   string `json:"client"`
	Clients  int    `json:"clients"`
	Logins   int64  `json:"logins_succeeded"`
	Sent     int64  `json:"messages_sent"`
	Received int64  `json:"messages_received"`
}

// flowCounters are one flow's figures in a --flows fleet; its clients
// add to them once per login, write or read batch. The padding keeps
// flows off each other's cache lines.
type flowCounters struct {
	logins, sent, received atomic.Int64
	_                      [40]byte
}

// flowSent counts a frame of kind sent for the client's flow, if the kind
// counts as a message.
func (c *client) flowSent(kind int) {
	if c.fc != nil && c.f.stats.counted(kind) {
		c.fc.sent.Add(1)
	}
}

// flowScript is one recorded flow of a --flows fleet, compiled.
type flowScript struct {
	index  int
	weight int
	client string
	player profile.Player
	udp    bool
}

// loadFlows builds one script per chosen flow (cfg.Flows). With All, a
// flow whose script cannot be built is skipped and a note says why; a
// listed flow that cannot be is an error.
func (f *Fleet) loadFlows(prof *profile.Profile, loop *session.Loop) error {
	cfg := &f.cfg
	if cfg.Capture == "" {
		return badf("--flows needs --capture")
	}
	opts := capture.Options{MaxFrame: cfg.MaxFrame, ServerPort: cfg.ServerPort, MaxMemory: cfg.CaptureMemory}
	if !prof.IsReprise {
		if t := cfg.Transport; t != "" && t != string(prof.Transport) {
			return badf("--transport %s: the %s profile runs over %s", t, prof.Name, prof.Transport)
		}
		opts = capture.Options{Raw: true, ServerPort: prof.Port, MaxMemory: cfg.CaptureMemory}
		if cfg.ServerPort != 0 {
			opts.ServerPort = cfg.ServerPort
		}
	}
	c, picked, skipped, err := readFlows(cfg.Capture, cfg.Flows, opts)
	if err != nil {
		return err
	}
	f.notes = append(f.notes, c.Warnings...)
	var scripts []flowScript
	for _, p := range picked {
		s, err := f.flowScript(prof, p.flow, loop)
		if err == nil {
			s.index, s.weight = p.index, p.weight
			scripts = append(scripts, s)
			for _, n := range p.flow.Notes {
				f.notes = append(f.notes, fmt.Sprintf("flow %d: %s", p.index, n))
			}
			continue
		}
		if !cfg.Flows.All {
			return fmt.Errorf("--flows: flow %d (%s): %w", p.index, p.flow, err)
		}
		skipped = append(skipped, fmt.Sprintf("flow %d (%s): %v", p.index, p.flow, err))
	}
	if len(scripts) == 0 {
		return fmt.Errorf("%w: --flows all: none of the %d flows of %s can be replayed (%s)", capture.ErrUnusable, len(c.Flows), cfg.Capture, strings.Join(skipped, "; "))
	}
	for _, s := range scripts[1:] {
		if s.udp != scripts[0].udp {
			return badf("--flows: flow %d and flow %d run over different transports; choose flows of one transport", scripts[0].index, s.index)
		}
	}
	f.flows = scripts
	f.flowCnt = make([]flowCounters, len(scripts))
	f.weights = make([]int, len(scripts))
	for k, s := range scripts {
		f.weights[k] = s.weight
	}
	f.player, f.udp = scripts[0].player, scripts[0].udp
	f.ws = !prof.IsReprise && prof.Transport == profile.WebSocket
	idx := make([]string, len(scripts))
	weighted := false
	for i, s := range scripts {
		idx[i] = strconv.Itoa(s.index)
		if s.weight != 1 {
			weighted = true
		}
	}
	how := fmt.Sprintf("client i plays the (i mod %d)-th of them", len(scripts))
	if weighted {
		w := make([]string, len(scripts))
		for i, s := range scripts {
			w[i] = strconv.Itoa(s.weight)
		}
		how = fmt.Sprintf("weights %s: of each %d clients in join order, the first %s play the first flow, and so on", strings.Join(w, ", "), sum(f.weights), w[0])
	}
	f.notes = append(f.notes, fmt.Sprintf("--flows %s: replaying flows %s; %s", cfg.Flows, strings.Join(idx, ", "), how))
	for _, s := range skipped {
		f.notes = append(f.notes, "--flows all: skipped "+s)
	}
	for _, s := range scripts {
		for _, n := range s.player.Notes() {
			f.notes = append(f.notes, fmt.Sprintf("flow %d: %s", s.index, n))
		}
	}
	return nil
}

// flowScript compiles one flow as the single --flow path does.
func (f *Fleet) flowScript(prof *profile.Profile, fl *capture.Flow, loop *session.Loop) (flowScript, error) {
	if prof.IsReprise {
		transport := string(fl.Transport)
		if f.cfg.Transport != "" {
			transport = f.cfg.Transport
		}
		p, err := f.repriseScript(FromFlow(fl), transport, fl.Duration(), loop)
		return flowScript{client: fl.Client.String(), player: p, udp: transport == "udp"}, err
	}
	s, err := prof.Compile(prof.Messages(RecordingOf(fl)), profile.ScriptOptions{Loop: loop, Speed: f.cfg.Speed, User: f.cfg.RecordedUser, Room: f.cfg.RecordedRoom})
	if err != nil {
		return flowScript{}, err
	}
	return flowScript{client: fl.Client.String(), player: s, udp: prof.Transport == profile.UDP}, nil
}

// pickedFlow is a flow of the capture and its index in `replay inspect`.
type pickedFlow struct {
	index  int
	weight int
	flow   *capture.Flow
}

// readFlows reads the capture in two passes, as readFlow does for one: the
// index pass finds the flows and picks the set's (All: those with client
// data; the others are returned as skipped, with why), the second keeps
// those flows' frames only.
func readFlows(path string, set FlowSet, opts capture.Options) (*capture.Capture, []pickedFlow, []string, error) {
	index := opts
	index.Select = func(a, b netip.AddrPort) bool { return false }
	c, err := readPartial(path, index)
	if err != nil {
		return nil, nil, nil, err
	}
	var want []pickedFlow
	var skipped []string
	if set.All {
		for i, fl := range c.Flows {
			if fl.ClientCount == 0 {
				skipped = append(skipped, fmt.Sprintf("flow %d (%s): %s", i, fl, capture.UnusableNoClient))
				continue
			}
			want = append(want, pickedFlow{i, 1, fl})
		}
	}
	for k, i := range set.Indexes {
		if i >= len(c.Flows) {
			return nil, nil, nil, badf("--flows %s: the capture has %d flows (see replay inspect)", set, len(c.Flows))
		}
		want = append(want, pickedFlow{i, set.weight(k), c.Flows[i]})
	}
	if len(want) == 0 {
		_, err := c.Usable()
		if err == nil {
			err = errors.New("no flow with client data")
		}
		return nil, nil, nil, fmt.Errorf("read capture %s: %w", path, err)
	}
	ends := map[[2]netip.AddrPort]bool{}
	for _, p := range want {
		ends[[2]netip.AddrPort{p.flow.Client, p.flow.Server}] = true
	}
	opts.Select = func(a, b netip.AddrPort) bool { return ends[[2]netip.AddrPort{a, b}] || ends[[2]netip.AddrPort{b, a}] }
	c2, err := readPartial(path, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	for k, p := range want {
		found := false
		for _, fl := range c2.Flows {
			// A port reused gives flows with the same endpoints: the
			// start tells them apart.
			if fl.Client == p.flow.Client && fl.Server == p.flow.Server && fl.Start.Equal(p.flow.Start) {
				want[k].flow, found = fl, true
				break
			}
		}
		if !found {
			return nil, nil, nil, fmt.Errorf("read capture %s: flow %d (%s) not found again on the second pass", path, p.index, p.flow)
		}
	}
	return c2, want, skipped, nil
}

// flowClients is the summary's list of a --flows fleet's flows, with the
// whole fleet's clients per flow (shards agree on it); nil for one flow.
func (f *Fleet) flowClients() []FlowClients {
	if len(f.flows) == 0 {
		return nil
	}
	n := flowClients(f.cfg.Clients, f.weights)
	out := make([]FlowClients, len(f.flows))
	for k, s := range f.flows {
		fc := &f.flowCnt[k]
		out[k] = FlowClients{Flow: s.index, Client: s.client, Clients: n[k],
			Logins: fc.logins.Load(), Sent: fc.sent.Load(), Received: fc.received.Load()}
	}
	return out
}

package fleet

import (
	"sync/atomic"
)

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
	// Then says the flow is a later connection of the clients of an
	// earlier one (flows played in turn), not clients of its own.
	Then bool `json:"in_turn,omitempty"`
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

// flowClients is the summary's list of a --flows fleet's flows, with the
// whole fleet's clients per flow (shards agree on it); nil for one flow.
func (f *Fleet) flowClients() []FlowClients {
	if len(f.flows) == 0 {
		return nil
	}
	n := flowClients(f.cfg.Clients, f.weights)
	out := make([]FlowClients, len(f.flows), len(f.flowCnt))
	for k, s := range f.flows {
		fc := &f.flowCnt[k]
		out[k] = FlowClients{Flow: s.Index, Client: s.Client, Clients: n[k],
			Logins: fc.logins.Load(), Sent: fc.sent.Load(), Received: fc.received.Load()}
	}
	// A later connection of flows played in turn: its own row, the
	// clients of its first flow (turns.go).
	for j, t := range f.turnFlows {
		fc := &f.flowCnt[f.turnOf[t]]
		out = append(out, FlowClients{Flow: t.Index, Client: t.Client, Clients: n[f.turnHead[j]], Then: true,
			Logins: fc.logins.Load(), Sent: fc.sent.Load(), Received: fc.received.Load()})
	}
	return out
}

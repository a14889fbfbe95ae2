package profile

import (
	"bytes"
	"fmt"
	"sync/atomic"
)

// Peers the server names: a server that issues each connection an id of
// its own (a socket.io socket id) lets clients address each other by it.
// A recording holds the ids the server issued then; a replayed client
// that addresses recorded peer k must carry the id the server issued,
// in this run, to the room-mate standing in for k, known only once that
// mate has logged in. Each client publishes its own (the correlation
// identity.server_id names) in the fleet's ServerIDs when it arrives;
// its mates read it there at every send.

// ServerIDs are the ids a server issued to a fleet's clients, by fleet
// index. Clients write their own from their readers and read their
// mates' from their senders; the fleet owns it.
type ServerIDs struct {
	ids []atomic.Pointer[[]byte]
}

// NewServerIDs holds the ids of a fleet of n clients.
func NewServerIDs(n int) *ServerIDs {
	return &ServerIDs{ids: make([]atomic.Pointer[[]byte], max(n, 0))}
}

func (d *ServerIDs) set(i int, v []byte) {
	if d != nil && i >= 0 && i < len(d.ids) {
		d.ids[i].Store(&v)
	}
}

// get is client i's current id, nil when it has none (not logged in yet,
// not in this process, or past the fleet).
func (d *ServerIDs) get(i int) []byte {
	if d == nil || i < 0 || i >= len(d.ids) {
		return nil
	}
	if v := d.ids[i].Load(); v != nil {
		return *v
	}
	return nil
}

// findServerPeers takes the recorded server ids of other clients
// (identity.server_peers) from the client messages, in the order they
// first appear, leaving out the recorded client's own.
func (s *Script) findServerPeers(kept []Message) {
	f := s.p.identity.serverPeers
	if f == nil {
		return
	}
	own := s.corrs[s.p.identity.serverID-1]
	for _, m := range kept {
		v := f.take(m.Bytes, m.Kind)
		if len(v) == 0 || bytes.Equal(v, own) || containsValue(s.serverOthers, v) {
			continue
		}
		if len(s.serverOthers) == maxPeers {
			s.notes = append(s.notes, fmt.Sprintf("more than %d peers' server ids: the rest keep their recorded ids", maxPeers))
			break
		}
		s.serverOthers = append(s.serverOthers, append([]byte(nil), v...))
	}
	if len(s.serverOthers) == 0 {
		s.notes = append(s.notes, "identity.server_peers: no client message holds a peer's server id")
	}
}

// serverPeersIn lists the recorded peers' server ids message m holds.
func (s *Script) serverPeersIn(m []byte) []int {
	var out []int
	for k, v := range s.serverOthers {
		if bytes.Contains(m, v) {
			out = append(out, k)
		}
	}
	return out
}

// putServerPeers writes into the message at dst[start:] the current
// server id of each mate standing in for a recorded peer it addresses;
// a mate with none yet keeps the recorded id (the server finds no one).
func (c *client) putServerPeers(dst []byte, start int, peers []int) []byte {
	for _, k := range peers {
		if k >= len(c.peerIdx) {
			continue
		}
		if v := c.serverIDs.get(c.peerIdx[k]); v != nil {
			dst = c.substitute(dst, start, c.s.serverOthers[k], v)
		}
	}
	return dst
}

// publishServerID shares the client's own server id, correlation i's new
// value v, with the fleet.
func (c *client) publishServerID(i int, v []byte) {
	if i+1 == c.s.p.identity.serverID {
		c.serverIDs.set(c.index, v)
	}
}

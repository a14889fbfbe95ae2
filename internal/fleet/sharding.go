package fleet

import (
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"
)

// Shard is one slice of a fleet run by several processes (machines, pods):
// shard Index of Count runs exactly the clients whose global index i has
// i mod Count == Index. Everything else about a client comes from its
// global index (user id, room, peers, sender or receive-only, login time:
// see loginAt), so the clients of all shards together are the clients of
// one process, with the same ramp, whatever Count is.
//
// The per-core schedulers (sched.go) are another thing: they split one
// process's clients over its cores.
//
// The zero Shard is the whole fleet. Shard is a pflag.Value ("i/n").
type Shard struct {
	Index, Count int
}

// count is the number of shards, 1 for the zero Shard.
func (s Shard) count() int { return max(s.Count, 1) }

// Sharded reports whether the fleet is split into more than one shard.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Clients is how many of total clients this shard runs.
func (s Shard) Clients(total int) int {
	n := s.count()
	if s.Index >= total {
		return 0
	}
	return (total - s.Index + n - 1) / n
}

// Owns reports whether client i is this shard's.
func (s Shard) Owns(i int) bool { return i%s.count() == s.Index }

// indexes are the global indexes of this shard's clients among total, in
// login order.
func (s Shard) indexes(total int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := s.Index; i < total; i += s.count() {
			if !yield(i) {
				return
			}
		}
	}
}

// String is "i/n"; "0/1" for the whole fleet.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.count()) }

// label is String for a sharded run and empty otherwise (the summary's
// shard field).
func (s Shard) label() string {
	if !s.Sharded() {
		return ""
	}
	return s.String()
}

// Set parses "i/n" (0 <= i < n).
func (s *Shard) Set(v string) error {
	a, b, ok := strings.Cut(v, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%q: want i/n, e.g. 2/4", v)
	}
	sh, err := NewShard(i, n)
	if err != nil {
		return err
	}
	*s = sh
	return nil
}

// Type is the flag's type name.
func (s *Shard) Type() string { return "i/n" }

// NewShard checks 0 <= index < count.
func NewShard(index, count int) (Shard, error) {
	if count < 1 || index < 0 || index >= count {
		return Shard{}, fmt.Errorf("shard %d/%d: need 0 <= i < n", index, count)
	}
	return Shard{Index: index, Count: count}, nil
}

// loginAt is when client i's login attempt is due, from the start of the
// run: one LoginInterval after the previous attempt, or Pause instead after
// every PauseEvery attempts. It depends on the global index only, so
// shards keep the one-process ramp.
func (c *Config) loginAt(i int) time.Duration {
	at := time.Duration(i) * c.LoginInterval
	if c.PauseEvery > 0 {
		at += time.Duration(i/c.PauseEvery) * (c.Pause - c.LoginInterval)
	}
	return at
}

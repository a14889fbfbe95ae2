package relay

// shrinking is the size history of a map that grows with connections or
// sessions and empties after a flood: Go maps keep their storage after
// deletes (a map that held 10,000 connections keeps ~1 MB for good), so
// the map is rebuilt at its size once it is down to a quarter of its
// peak. Each rebuild copies at most a quarter of the deletes since the
// last: amortised O(1) per delete.
type shrinking struct{ peak int }

// shrinkMin: a map that never held more is left as it is (its storage is
// small whatever happens).
const shrinkMin = 256

// grew notes the map's size after an insert.
func (s *shrinking) grew(n int) { s.peak = max(s.peak, n) }

// shrunk returns m, or a copy of it sized to what it holds when it is down
// to a quarter of its peak; call it after a delete.
func shrunk[M ~map[K]V, K comparable, V any](s *shrinking, m M) M {
	n := len(m)
	if s.peak < shrinkMin || n > s.peak/4 {
		return m
	}
	s.peak = n
	c := make(M, n)
	for k, v := range m {
		c[k] = v
	}
	return c
}

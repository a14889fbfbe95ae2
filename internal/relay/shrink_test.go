package relay

import (
	"maps"
	"testing"
)

// TestShrunk: a map is rebuilt once it is down to a quarter of its peak
// (and only then), with the same entries; small maps are left alone.
func TestShrunk(t *testing.T) {
	for _, tc := range []struct {
		name       string
		peak, keep int
		rebuilt    bool
	}{
		{"emptied", 10000, 0, true},
		{"quarter", 10000, 2500, true},
		{"over a quarter", 10000, 2501, false},
		{"small", shrinkMin - 1, 0, false},
		{"at the minimum", shrinkMin, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var size shrinking
			m := map[int]int{}
			for i := range tc.peak {
				m[i] = -i
				size.grew(len(m))
			}
			var rebuilt bool
			for i := tc.keep; i < tc.peak; i++ {
				delete(m, i)
				before := m
				if m = shrunk(&size, m); !sameMap(before, m) {
					rebuilt = true
				}
			}
			if rebuilt != tc.rebuilt {
				t.Errorf("rebuilt %v, want %v", rebuilt, tc.rebuilt)
			}
			want := map[int]int{}
			for i := range tc.keep {
				want[i] = -i
			}
			if !maps.Equal(m, want) {
				t.Errorf("map holds %d entries after the deletes, want %d the same", len(m), len(want))
			}
			if tc.rebuilt && size.peak > tc.peak/4 {
				t.Errorf("peak %d after the rebuild, want the size then (≤ %d)", size.peak, tc.peak/4)
			}
		})
	}
}

// sameMap reports whether a and b are one map (a write to one shows in the
// other).
func sameMap(a, b map[int]int) bool {
	const probe = -1
	_, had := a[probe]
	a[probe] = 1
	_, same := b[probe]
	if !had {
		delete(a, probe)
	}
	return same
}

package barrier

import (
	"fmt"
	"testing"
)

// FuzzParse feeds arbitrary lines to both ends' parsers: a coordinator
// may be reached by anything, and a shard may be answered by anything;
// each comes back with values or an error, and what parses prints back the
// same.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"ready 0 4\n", "ready 3 4", "start 500000000 1795370000000000000\n",
		"start -20 5", "error shard 5/4: the coordinator waits for 4 shards\n", "ready 1", "start x y", "",
		"level 60 1 2\n", "go 200000000 1795370000000000000\n", "stop\n", "level 1 2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if i, n, err := parseReady(line); err == nil {
			if i2, n2, err := parseReady(fmt.Sprintf("ready %d %d", i, n)); err != nil || i2 != i || n2 != n {
				t.Fatalf("ready %d %d does not parse back: %d %d %v", i, n, i2, n2, err)
			}
		}
		if d, u, err := parseStart(line); err == nil {
			if d2, u2, err := parseStart(fmt.Sprintf("start %d %d", d, u)); err != nil || d2 != d || u2 != u {
				t.Fatalf("start %d %d does not parse back: %d %d %v", d, u, d2, u2, err)
			}
		}
		if a, i, n, err := parseLevel(line); err == nil {
			if a2, i2, n2, err := parseLevel(fmt.Sprintf("level %d %d %d", a, i, n)); err != nil || a2 != a || i2 != i || n2 != n {
				t.Fatalf("level %d %d %d does not parse back: %d %d %d %v", a, i, n, a2, i2, n2, err)
			}
		}
		if d, u, err := parseInstant(line, "go"); err == nil {
			if d2, u2, err := parseInstant(fmt.Sprintf("go %d %d", d, u), "go"); err != nil || d2 != d || u2 != u {
				t.Fatalf("go %d %d does not parse back: %d %d %v", d, u, d2, u2, err)
			}
		}
	})
}

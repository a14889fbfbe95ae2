//go:build race

package relay

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts only mean something without it.
const raceEnabled = true

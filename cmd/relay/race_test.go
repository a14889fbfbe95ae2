//go:build race

package main

// raceEnabled: under the race detector the test's own clients run several
// times slower, so latency measured by them says more about the detector
// than about the relay; `make timing` runs the latency tests without it.
const raceEnabled = true

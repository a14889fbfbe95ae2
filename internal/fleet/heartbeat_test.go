package fleet

import (
	"testing"
	"time"
)

// TestHeartbeatSource: the command line's --heartbeat wins (0 turns
// heartbeats off), then the profile's heartbeat.interval, then
// DefaultHeartbeat.
func TestHeartbeatSource(t *testing.T) {
	for _, tc := range []struct {
		name          string
		flag, profile time.Duration
		want          time.Duration
	}{
		{"default, profile has none", HeartbeatDefault, 0, DefaultHeartbeat},
		{"default, profile's interval", HeartbeatDefault, 5 * time.Second, 5 * time.Second},
		{"given wins over the profile", 2 * time.Second, 5 * time.Second, 2 * time.Second},
		{"given 0: none", 0, 5 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Heartbeat = tc.flag
			if got := c.heartbeat(tc.profile); got != tc.want {
				t.Errorf("heartbeat(%v) with --heartbeat %v = %v, want %v", tc.profile, tc.flag, got, tc.want)
			}
		})
	}
	if c := DefaultConfig(); c.Heartbeat != HeartbeatDefault {
		t.Errorf("DefaultConfig's heartbeat %v does not ask for the profile's", c.Heartbeat)
	}
}

package compare

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/report"
)

func TestMetricsURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:9400", "http://127.0.0.1:9400/metrics"},
		{"[::1]:9400", "http://[::1]:9400/metrics"},
		{"relay.example:9400", "http://relay.example:9400/metrics"},
		{"http://127.0.0.1:9400", "http://127.0.0.1:9400/metrics"},
		{"http://127.0.0.1:9400/", "http://127.0.0.1:9400/metrics"},
		{"https://relay.example/stats/prom", "https://relay.example/stats/prom"},
		{"127.0.0.1", ""},
		{"127.0.0.1:http", ""},
		{"127.0.0.1:0", ""},
		{":9400", ""},
		{"ftp://127.0.0.1:9400", ""},
		{"http://", ""},
		{"http://127.0.0.1:99999/metrics", ""},
	} {
		got, err := MetricsURL(tc.in)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("MetricsURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// valid is a configuration both checks accept, with no target yet (the
// command starts the relay child after checking).
func valid() Config {
	c := DefaultConfig()
	c.Fleet.Capture, c.Fleet.Clients, c.Fleet.Duration = "x.pcap", 10, time.Second
	c.Senders, c.Out = 2, "out"
	return c
}

// TestChecks: every refusal is made before anything starts, and a
// missing target is not one.
func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*Config)
		compare  bool // CheckCompare accepts it
		capacity bool // CheckCapacity accepts it
	}{
		{"valid", func(*Config) {}, true, true},
		{"target host:port", func(c *Config) { c.Fleet.Target = "127.0.0.1:7400" }, true, true},
		{"target without port", func(c *Config) { c.Fleet.Target = "127.0.0.1" }, false, false},
		{"relay metrics host:port", func(c *Config) { c.RelayMetrics = "127.0.0.1:9400" }, true, true},
		{"relay metrics garbage", func(c *Config) { c.RelayMetrics = "9400" }, false, false},
		{"no duration", func(c *Config) { c.Fleet.Duration = 0 }, false, true},
		{"no senders", func(c *Config) { c.Senders = 0 }, false, true},
		{"senders = clients", func(c *Config) { c.Senders = 10 }, false, true},
		{"one client", func(c *Config) { c.Fleet.Clients = 1 }, false, true},
		{"receive only", func(c *Config) { c.Fleet.ReceiveOnly = true }, false, true},
		{"repeat 0", func(c *Config) { c.Repeat = 0 }, false, true},
		{"no capture", func(c *Config) { c.Fleet.Capture = "" }, false, false},
		{"no out", func(c *Config) { c.Out = "" }, false, false},
		{"no interval", func(c *Config) { c.Interval = 0 }, false, false},
		{"max below start", func(c *Config) { c.Max = c.Start - 1 }, true, false},
		{"no hold", func(c *Config) { c.Hold = 0 }, true, false},
		{"bad loop", func(c *Config) { c.Fleet.Loop = "x" }, false, false},
	} {
		c := valid()
		tc.edit(&c)
		for _, k := range []struct {
			kind  string
			check func(*Config) error
			ok    bool
		}{{"compare", (*Config).CheckCompare, tc.compare}, {"capacity", (*Config).CheckCapacity, tc.capacity}} {
			cc := c
			err := k.check(&cc)
			if (err == nil) != k.ok || (err != nil && !errors.Is(err, ErrBadConfig) && !errors.Is(err, fleet.ErrBadConfig)) {
				t.Errorf("%s: %s: %v", tc.name, k.kind, err)
			}
		}
	}
}

// TestRelayMetricsURL: the server's metrics default to the reprise
// relay's port on the target's host, and to none for another protocol.
func TestRelayMetricsURL(t *testing.T) {
	for _, tc := range []struct{ target, profile, flag, want string }{
		{"127.0.0.1:7400", "", "", "http://127.0.0.1:9400/metrics"},
		{"10.0.0.5:7401", "reprise", "", "http://10.0.0.5:9400/metrics"},
		{"127.0.0.1:1883", "mqtt", "", ""},
		{"127.0.0.1:1883", "mqtt", "127.0.0.1:9100", "http://127.0.0.1:9100/metrics"},
		{"127.0.0.1:7400", "", "http://127.0.0.1:9999/m", "http://127.0.0.1:9999/m"},
	} {
		c := DefaultConfig()
		p, err := profile.Lookup(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		c.Fleet.Target, c.Fleet.Profile, c.RelayMetrics = tc.target, p, tc.flag
		got, err := c.relayMetricsURL()
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc, got, err, tc.want)
		}
	}
}

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		start, step, max int
		want             []int
	}{
		{20, 20, 80, []int{20, 40, 60, 80}},
		{50, 25, 120, []int{50, 75, 100, 120}},
		{5, 5, 5, []int{5}},
		{1, 100, 50, []int{1, 50}},
	} {
		if got := levels(tc.start, tc.step, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("levels(%d, %d, %d) = %v, want %v", tc.start, tc.step, tc.max, got, tc.want)
		}
	}
}

// TestGoOn: the search goes on past a level that held and was not the
// last, and stops at one that broke or was the last.
func TestGoOn(t *testing.T) {
	broke := []report.Breach{{Text: "login failures 33 % > 1 %"}}
	for _, tc := range []struct {
		name string
		l    report.Level
		max  int
		want bool
	}{
		{"held", report.Level{Clients: 40}, 80, true},
		{"broke", report.Level{Clients: 60, Breaches: broke}, 80, false},
		{"held the last", report.Level{Clients: 80}, 80, false},
		{"broke the last", report.Level{Clients: 80, Breaches: broke}, 80, false},
	} {
		if got := goOn(tc.l, tc.max); got != tc.want {
			t.Errorf("%s: goOn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSearchBound(t *testing.T) {
	f := fleet.Config{LoginInterval: 50 * time.Millisecond, PauseEvery: 20, Pause: time.Second}
	// 80 × 50 ms + 4 × (2 × 3 s + 10 s) + 80/20 × 1 s
	if got, want := searchBound(f, []int{20, 40, 60, 80}, 3*time.Second), 4*time.Second+64*time.Second+4*time.Second; got != want {
		t.Errorf("searchBound = %v, want %v", got, want)
	}
}

// TestLevelWindow: a level is judged from its start to the end of its
// hold, in seconds from the run's start.
func TestLevelWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := levelFrame{start: report.Snapshot{At: t0.Add(2 * time.Second)}, t0: t0, clients: 40, sameHost: true}
	w := f.window(report.Snapshot{At: t0.Add(3 * time.Second)}, report.Snapshot{At: t0.Add(6 * time.Second)})
	if w.Clients != 40 || w.FromS != 2 || w.HoldFromS != 3 || w.ToS != 6 || !w.ServerOnFleetHost {
		t.Errorf("window %+v", w)
	}
}

// TestEndTotals: a fleet that can no longer be scraped ends with its own
// summary's counters.
func TestEndTotals(t *testing.T) {
	var v report.FleetValues
	v.LoggedIn = 16
	endTotals(&v, fleet.Summary{LoginAttempts: 20, LoginsSucceeded: 16, LoginsFailed: map[string]int64{"refused": 3, "timeout": 1},
		MessagesSent: 1912, BytesSent: 191200, MessagesReceived: 5000, BytesReceived: 500000, NumberedReceived: 4000, MessagesLost: 2,
		Disconnects: map[string]int64{"slow_consumer": 2}})
	want := report.FleetValues{LoggedIn: 16, LoginAttempts: 20, LoginsSucceeded: 16, LoginsFailed: 4, SentMessages: 1912, SentBytes: 191200,
		ReceivedMessages: 5000, ReceivedBytes: 500000, NumberedReceived: 4000, MessagesLost: 2, Disconnects: 2}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("got %+v\nwant %+v", v, want)
	}
}

package compare

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/wire"
)

// ErrBadConfig marks a configuration compare refuses before running. It is
// the one sentinel of the project (profile's, which fleet's is too), so a
// caller asks errors.Is once whichever layer refused.
var ErrBadConfig = profile.ErrBadConfig

// Config is one comparison (Run) or one capacity search (RunCapacity):
// what both share, then what each adds. DefaultConfig gives the command
// line's defaults.
type Config struct {
	// Fleet is the run every fleet shares: capture, clients, loop, ramp,
	// profile, target. Its Metrics, Shard and AtLevel are the runner's;
	// a comparison replaces its Senders per scenario, a capacity search
	// its Clients, Duration and Levels.
	Fleet fleet.Config
	// Runner runs each fleet: in this process (nil), or as shards.
	Runner launch.Runner
	// Out is the report directory.
	Out string
	// RelayMetrics is the server's metrics: host:port (its /metrics) or
	// a URL. Empty means <target host>:9400 for the reprise profile, and
	// none for a server of another protocol (mosquitto, redis-server),
	// whose server columns are then absent from the report.
	RelayMetrics string
	// RelayProcess describes the relay when the command started it as a
	// child process (its command line and pid), for the report.
	RelayProcess string
	// Interval is the sampling period.
	Interval time.Duration
	// Progress receives one line per event and the fleet's progress
	// lines; nil discards them. Log receives debug events; nil discards.
	Progress io.Writer
	Log      *zap.Logger
	// Params are extra parameters to show in the report (the command line).
	Params []report.Param

	// A comparison: Senders is K, the clients that send in 1:N; each
	// scenario runs Repeat times; between runs the relay gets DrainTimeout
	// to drop back to zero connections.
	Senders      int
	Repeat       int
	DrainTimeout time.Duration

	// A capacity search: levels of Start, Start+Step, ... Max clients,
	// each held for Hold and judged against SLO.
	Start, Step, Max int
	Hold             time.Duration
	SLO              report.SLO
}

// DefaultConfig is the command line's defaults, written once.
func DefaultConfig() Config {
	return Config{
		Fleet:        fleet.DefaultConfig(),
		Interval:     time.Second,
		Repeat:       1,
		DrainTimeout: 30 * time.Second,
		Start:        50,
		Step:         25,
		Max:          2000,
		Hold:         20 * time.Second,
		SLO:          report.DefaultSLO(),
	}
}

// CheckCompare checks a comparison's configuration; an empty target is
// allowed (the command starts a relay child for it after the check).
func (c *Config) CheckCompare() error {
	f := c.Fleet
	switch {
	case f.Clients < 2:
		return badf("--clients %d: a comparison needs at least 2", f.Clients)
	case c.Senders < 1 || c.Senders >= f.Clients:
		return badf("--senders %d: 1:N needs 1 to %d senders (fewer than --clients)", c.Senders, f.Clients-1)
	case f.Duration <= 0:
		return badf("--duration is required: each scenario runs that long")
	case f.ReceiveOnly:
		return badf("--receive-only makes both scenarios the same")
	case c.Repeat < 1:
		return badf("--repeat %d: must be at least 1", c.Repeat)
	case c.DrainTimeout <= 0:
		return badf("--drain-timeout %v: must be positive", c.DrainTimeout)
	}
	return c.checkCommon(f)
}

// CheckCapacity checks a capacity search's configuration, as
// CheckCompare.
func (c *Config) CheckCapacity() error {
	switch {
	case c.Start < 1 || c.Step < 1 || c.Max < c.Start:
		return badf("--start %d --step %d --max %d: want 1 <= start <= max and step >= 1", c.Start, c.Step, c.Max)
	case c.Hold <= 0:
		return badf("--hold %v: must be positive", c.Hold)
	}
	f := c.Fleet
	f.Clients = c.Max
	return c.checkCommon(f)
}

// checkCommon checks what both share, the fleet f included.
func (c *Config) checkCommon(f fleet.Config) error {
	switch {
	case c.Out == "":
		return badf("no output directory")
	case c.Interval <= 0:
		return badf("--sample-interval %v: must be positive", c.Interval)
	}
	if f.Target != "" {
		if _, err := hostPort(f.Target); err != nil {
			return badf("--target %q: %v", f.Target, err)
		}
	} else {
		// The relay child's address is not known yet: any valid one
		// stands for it.
		f.Target = wire.Loopback(wire.DefaultPort)
	}
	if c.RelayMetrics != "" {
		if _, err := MetricsURL(c.RelayMetrics); err != nil {
			return badf("--relay-metrics: %v", err)
		}
	}
	if c.Fleet.Profile == nil { // as the fleet reads a nil profile
		c.Fleet.Profile = profile.DefaultProfile()
	}
	f.Profile = c.Fleet.Profile
	if err := f.Validate(); err != nil {
		return err
	}
	return nil
}

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

// hostPort checks a host:port address and returns its host.
func hostPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("want host:port: %v", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("want host:port: port %q is not a number from 1 to 65535", port)
	}
	if host == "" {
		return "", errors.New("want host:port: no host")
	}
	return host, nil
}

// MetricsURL is the URL of a metrics address: host:port means
// http://host:port/metrics; a URL (http or https) is taken as it is, its
// path /metrics when it has none.
func MetricsURL(addr string) (string, error) {
	if _, err := hostPort(addr); err == nil {
		return "http://" + addr + "/metrics", nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q: want host:port (e.g. 127.0.0.1:%d) or an http URL", addr, wire.DefaultMetricsPort)
	}
	if _, err := hostPort(u.Host); err != nil && u.Port() != "" {
		return "", fmt.Errorf("%q: %v", addr, err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

// relayMetricsURL is the server's metrics to sample: RelayMetrics, else
// the profile's usual metrics port on the target's host, else none ("").
func (c *Config) relayMetricsURL() (string, error) {
	if c.RelayMetrics != "" {
		return MetricsURL(c.RelayMetrics)
	}
	port := c.Fleet.Profile.MetricsPort
	if port == 0 {
		return "", nil
	}
	host, err := hostPort(c.Fleet.Target)
	if err != nil {
		return "", badf("--target %q: %v", c.Fleet.Target, err)
	}
	return MetricsURL(net.JoinHostPort(host, strconv.Itoa(int(port))))
}

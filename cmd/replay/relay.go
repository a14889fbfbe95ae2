package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/relayproc"
)

// relayFlags say how a command starts its relay child when there is no
// --target.
type relayFlags struct {
	bin  string
	args argList
}

func addRelayFlags(fs *pflag.FlagSet, rf *relayFlags) {
	fs.StringVar(&rf.bin, "relay-bin", "", "relay binary to start without --target (default: the relay beside replay)")
	fs.Var(&rf.args, "relay-flags", `extra flags for the relay started without --target, split on spaces (e.g. "--max-room-members 40")`)
}

// argList is a command line's worth of flags, split on spaces when set.
type argList []string

func (a *argList) String() string { return strings.Join(*a, " ") }
func (a *argList) Type() string   { return "flags" }

func (a *argList) Set(s string) error {
	if strings.ContainsAny(s, `"'\`) {
		return fmt.Errorf("%q: flags are split on spaces; quotes and backslashes are not understood", s)
	}
	*a = append(*a, strings.Fields(s)...)
	return nil
}

// childRelayFits refuses a fleet the relay child cannot serve: one of
// another protocol than the relay's.
func childRelayFits(c fleet.Config) error {
	if c.Profile != nil && !c.Profile.SpokenByRelay() {
		return usageError(fmt.Errorf("--profile %s needs --target: the relay started without one speaks the reprise protocol", c.Profile.Name))
	}
	return nil
}

// childRelay is a relay this command started, and where its log went.
type childRelay struct {
	*relayproc.Relay
	log     *os.File
	logPath string
}

// startChildRelay starts the relay child on loopback, its log written to
// logPath, and says so on stderr.
func startChildRelay(ctx context.Context, st *state, rf relayFlags, logPath string) (*childRelay, error) {
	bin := rf.bin
	if bin == "" {
		var err error
		if bin, err = relayproc.Beside(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("relay log: %w", err)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("relay log: %w", err)
	}
	r, err := relayproc.Start(ctx, relayproc.Config{Bin: bin, Args: rf.args, Log: log})
	if err != nil {
		log.Close()
		return nil, err
	}
	fmt.Fprintf(st.stderr, "replay: relay child pid %d on %s (metrics %s, log %s)\n", r.PID(), r.TCP, r.Metrics, logPath)
	return &childRelay{Relay: r, log: log, logPath: logPath}, nil
}

// stop stops the child and closes its log; a relay that did not stop
// cleanly is reported on stderr (the run's results stand).
func (c *childRelay) stop(st *state) {
	if err := c.Stop(relayproc.StopGrace); err != nil {
		fmt.Fprintf(st.stderr, "replay: %v (log %s)\n", err, c.logPath)
	}
	c.log.Close()
}

// describe is the child for a report's parameters.
func (c *childRelay) describe() string {
	return fmt.Sprintf("child process of replay, pid %d: %s (log %s)", c.PID(), c.CommandLine(), filepath.Base(c.logPath))
}

// Command replay is reprise's fleet: it replays one recorded client session
// as many clients against a relay (internal/fleet), and its subcommands
// look at captures (inspect). Each subcommand lives in its own file and
// registers itself in subcommands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

func main() {
	// The first signal stops the run cleanly (summary still written); a
	// second one exits at once. A configuration the fleet refuses is bad
	// usage.
	cli.Main("replay", "stopping: what ran so far follows (Ctrl-C again to exit now)",
		func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) },
		fleet.ErrBadConfig)
}

// usageError marks bad arguments (exit code 2).
func usageError(err error) error { return cli.UsageError{Err: err} }

// state is what every command needs from the process.
type state struct {
	stdout, stderr io.Writer
}

// subcommands build the subcommands; each file adds its own in init.
var subcommands []func(*state) *cobra.Command

// run builds the command tree and runs it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := &state{stdout: stdout, stderr: stderr}
	root := newRunCmd(st)
	for _, sub := range subcommands {
		root.AddCommand(sub(st))
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	groupsNeedSubcommand(root)
	usageArgs(root)
	return root.ExecuteContext(ctx)
}

// groupsNeedSubcommand makes each command group below the root (profile,
// k8s: commands that only hold subcommands) refuse a missing or unknown
// subcommand with one line and exit 2; cobra would print the group's help
// and exit 0.
func groupsNeedSubcommand(root *cobra.Command) {
	for _, cmd := range root.Commands() {
		if cmd.Runnable() || !cmd.HasSubCommands() {
			continue
		}
		cmd.Args = cobra.ArbitraryArgs
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.RunE = func(c *cobra.Command, args []string) error {
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			known := strings.Join(names, ", ")
			if len(args) == 0 {
				return usageError(fmt.Errorf("%s needs a subcommand: %s (--help for more)", c.CommandPath(), known))
			}
			return usageError(fmt.Errorf("unknown command %q for %q (known: %s)", args[0], c.CommandPath(), known))
		}
		groupsNeedSubcommand(cmd)
	}
}

// usageArgs makes argument errors of cmd and its subcommands usage
// errors (exit 2), as flag errors are.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError(err)
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// fleetFlags are the run flags shared by the root command and any command
// that drives fleets (compare).
type fleetFlags struct {
	cfg       fleet.Config
	profile   string // --profile, looked up once: cfg.Profile
	sourceIPs string
	tlsALPN   string
	relay     relayFlags
	secret    auth.SecretSource
}

// addFleetFlags registers the fleet's flags on fs, defaults from
// fleet.DefaultConfig.
func addFleetFlags(fs *pflag.FlagSet, ff *fleetFlags) {
	ff.cfg = fleet.DefaultConfig()
	c := &ff.cfg
	fs.StringVar(&c.Capture, "capture", "", "pcap/pcapng file whose client flow is replayed (required)")
	fs.IntVar(&c.Flow, "flow", -1, "flow index as listed by replay inspect (-1: the longest)")
	fs.Var(profile.FlowSetValue{S: &c.Flows}, "flows", "all, or flow indexes like 0,2 (replay inspect), optionally weighted like 0:3,1:1: replay these recorded clients in one fleet, client i playing the (i mod F)-th of the F flows, or with weights, of each W clients (W their sum) the first w0 flow 0 and so on; all skips the flows that cannot be replayed and says why")
	fs.Var(addrPortValue{&c.Client}, "client", "ADDR:PORT: replay the flow of this recorded client, as listed by replay inspect (instead of --flow)")
	fs.IntVar(&c.MaxFrame, "max-frame", 0, "largest frame read from the capture and from the relay, in bytes (the relay's --max-frame; 0: 65536)")
	fs.Uint16Var(&c.ServerPort, "server-port", 0, fmt.Sprintf("the server's port in the capture, to tell a flow's client side when neither a SYN, a join nor the frame kinds do (0: %d)", wire.DefaultPort))
	fs.Var(mibValue{&c.CaptureMemory}, "max-memory", memoryUsage)
	fs.Var(targetValue{Addr: &c.Target, TLS: &c.TLS.Enabled}, "target", "the server: host:port, or a URL whose scheme says TLS (wss://host:port/path, mqtts://host:8883, tls://host:port; the path is the recording's) (default: start the relay binary as a child process on 127.0.0.1)")
	addTLSFlags(fs, ff)
	fs.Var(keyLogValue{k: &c.KeyLog, path: new(string)}, "tls-keylog", keyLogUsage)
	fs.StringVar(&c.Transport, "transport", "", "tcp, udp or websocket (default: the capture's, or the profile's)")
	fs.StringVar(&ff.profile, "profile", profile.Default, "protocol profile: "+strings.Join(profile.Builtin, ", ")+", or a profile file (docs/profiles.md)")
	fs.StringVar(&c.Variant, "variant", "", "the profile's way of logging in, whatever the recording shows (socketio: websocket or polling; default: the one the recording shows)")
	fs.StringVar(&c.RecordedUser, "recorded-user", "", "the recorded user id, when the profile cannot place it (rewritten per client)")
	fs.StringVar(&c.RecordedRoom, "recorded-room", "", "the recorded room, when the profile cannot place it")
	fs.IntVar(&c.Clients, "clients", c.Clients, "number of replayed clients")
	fs.IntVar(&c.Senders, "senders", 0, "K clients play the loop, the rest only receive (1:N): spread over the rooms of --room-size (the first of each room), else the first K; 0: all send (N:N)")
	fs.Var(session.LoopValue{Text: &c.Loop, Points: &c.LoopPoints}, "loop", "A,B: repeat [A,B) of the flow (offsets like 12s, 1m30s or frame indexes like #120); empty: play once")
	fs.Float64Var(&c.Speed, "speed", c.Speed, "replay speed factor (2: twice as fast)")
	fs.BoolVar(&c.ReceiveOnly, "receive-only", false, "every client plays the login part, then only heartbeats and receives")
	fs.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, fmt.Sprintf("heartbeat interval of receive-only clients (and after a script played once); 0: none (default: the profile's heartbeat.interval, else %v)", fleet.DefaultHeartbeat))
	// The default is the profile's: shown in the usage rather than as -1ns.
	fs.Lookup("heartbeat").DefValue = "0s"
	fs.StringVar(&c.UserIDFormat, "user-id-format", c.UserIDFormat, "user id of client i (fmt, one %d)")
	fs.StringVar(&c.Room, "room", "", "room name (default: the recorded one)")
	fs.IntVar(&c.RoomSize, "room-size", 0, "spread clients over rooms of M members, named <room>-<k> (0: one room)")
	fs.BoolVar(&c.RewritePayload, "rewrite-payload", false, "also rewrite recorded user ids inside payload bytes")
	fs.Var(&c.WSDeflate, "ws-deflate", "permessage-deflate over WebSocket: recorded (offer what the recording offered; compress when the server accepts) or off (strip the offer)")
	fs.StringVar(&ff.secret.File, "auth-secret-file", "", "file holding the secret to sign joins with (the relay's); or $"+auth.EnvSecret)
	fs.StringVar(&ff.secret.Flag, "auth-secret", "", "the secret itself: visible to every local user in ps, prefer --auth-secret-file or $"+auth.EnvSecret)
	fs.DurationVar(&c.LoginInterval, "login-interval", c.LoginInterval, "cooldown between two login attempts")
	fs.IntVar(&c.PauseEvery, "pause-every", 0, "pause the ramp after every N login attempts (0: never)")
	fs.DurationVar(&c.Pause, "pause", 0, "length of a ramp pause")
	fs.DurationVar(&c.LoginTimeout, "login-timeout", c.LoginTimeout, "a login fails if joined does not arrive within this")
	fs.DurationVar(&c.Duration, "duration", 0, "length of the whole run (0: until Ctrl-C)")
	fs.DurationVar(&c.Hold, "after-logins", 0, "end the run this long after every login has its result (joined or failed), however long the ramp took (0: none; with --duration, the first to come ends it)")
	fs.DurationVar(&c.DrainTimeout, "drain-deliveries", c.DrainTimeout, fmt.Sprintf("after the last send, wait for deliveries in flight until none came for %v, at most this long", fleet.DrainQuiet))
	fs.Var(cli.Addr{P: &c.Metrics, Listen: true, Off: true}, "metrics", `HTTP address of /metrics ("off" or "": none)`)
	fs.DurationVar(&c.ProgressInterval, "progress-interval", c.ProgressInterval, "period of the progress line")
	fs.BoolVar(&c.PlainSyscalls, "plain-syscalls", false, "read and write each socket with its own read(2) and write(2) rather than batches of them in one io_uring call (used where the kernel allows it)")
	fs.StringVar(&ff.sourceIPs, "source-ips", "", "comma-separated local addresses to spread connections over (past ~28k ports per address)")
	addRelayFlags(fs, &ff.relay)
}

// addTLSFlags registers the fleet's TLS flags (fleet.TLS).
func addTLSFlags(fs *pflag.FlagSet, ff *fleetFlags) {
	t := &ff.cfg.TLS
	fs.BoolVar(&t.Enabled, "tls", t.Enabled, "connect over TLS (a wss://, mqtts://, tls:// --target says so too); a profile that upgrades in band (nats) starts TLS where its login says")
	fs.StringVar(&t.CAFile, "tls-ca", t.CAFile, "PEM file of the CA certificates that verify the server (default: the system's roots)")
	fs.BoolVar(&t.Insecure, "tls-insecure", t.Insecure, "do not verify the server's certificate (said as a warning at the start)")
	fs.StringVar(&t.ServerName, "tls-server-name", t.ServerName, "server name sent (SNI) and verified (default: the target's host)")
	fs.StringVar(&t.CertFile, "tls-cert", t.CertFile, "PEM client certificate (with --tls-key)")
	fs.StringVar(&t.KeyFile, "tls-key", t.KeyFile, "PEM key of --tls-cert")
	fs.Var(&t.MinVersion, "tls-min-version", "lowest TLS version offered: 1.2 or 1.3 (default 1.2)")
	fs.StringVar(&ff.tlsALPN, "tls-alpn", "", "comma-separated ALPN protocols offered, in order (h2,http/1.1; default: none)")
	fs.BoolVar(&t.Resume, "tls-resume", t.Resume, "resume TLS sessions with tickets (one session cache for the fleet); the summary says which was used")
}

// config returns the fleet configuration after flag parsing; warnings (a
// secret on the command line) go to stderr.
func (ff *fleetFlags) config(stderr io.Writer) (fleet.Config, error) {
	c := ff.cfg
	secret, warnings, err := ff.secret.Load(os.Getenv)
	if err != nil {
		return c, usageError(err)
	}
	c.AuthSecret = string(secret)
	// The fleet reads a zero speed as "not set" (1); typed on the command
	// line it is a mistake like any other speed that is not positive.
	if c.Speed <= 0 || math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) {
		return c, usageError(fmt.Errorf("--speed %v: must be a positive factor (1: as recorded, 2: twice as fast)", c.Speed))
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "replay: warning:", w)
	}
	if c.Metrics == "off" { // as the relay's --metrics off
		c.Metrics = ""
	}
	// The profile is resolved here, once: the fleet, compare and the
	// checks below use what it is, not its name.
	if c.Profile, err = profile.Lookup(ff.profile); err != nil {
		return c, usageError(fmt.Errorf("--profile: %w", err))
	}
	if ff.tlsALPN != "" {
		for _, p := range strings.Split(ff.tlsALPN, ",") {
			c.TLS.ALPN = append(c.TLS.ALPN, strings.TrimSpace(p))
		}
	}
	if ff.sourceIPs != "" {
		for _, ip := range strings.Split(ff.sourceIPs, ",") {
			c.SourceIPs = append(c.SourceIPs, strings.TrimSpace(ip))
		}
	}
	return c, nil
}

func newRunCmd(st *state) *cobra.Command {
	var (
		ff         fleetFlags
		sf         shardFlags
		summary    string
		relayLog   string
		logLevel   string
		cpuprofile string
		maxLoss    float64
	)
	cmd := &cobra.Command{
		Use:   "replay --capture FILE [flags]",
		Short: "replay one recorded client session as a fleet of clients against a relay",
		Example: `  replay --capture captures/vr-session.pcap --loop=12s,48s --clients 500
  replay --capture captures/vr-session.pcap --clients 200 --senders 20 --loop=12s,48s --login-interval 200ms`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := ff.config(st.stderr)
			if err != nil {
				return err
			}
			shard, err := sf.resolve()
			if err != nil {
				return err
			}
			cfg.Shard = shard
			cfg.Levels, cfg.AtLevel = sf.levels, sf.atLevel(shard, st.stderr)
			if cfg.MetricsListener, err = sf.metricsListener(); err != nil {
				return usageError(err)
			}
			log, err := newLogger(logLevel, st.stderr)
			if err != nil {
				return usageError(err)
			}
			defer log.Sync()
			cfg.Log, cfg.Out = log, st.stderr
			if cpuprofile != "" {
				stop, err := startCPUProfile(cpuprofile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if cfg.Target == "" {
				// Every flag checked before the relay child starts; its
				// address is not known yet: any valid one stands for it.
				check := cfg
				check.Target = wire.Loopback(wire.DefaultPort)
				if err := check.Validate(); err != nil {
					return err
				}
				if err := check.CheckHost(); err != nil {
					return err
				}
				if err := childRelayFits(cfg); err != nil {
					return err
				}
				if cfg.Shard.Sharded() {
					return usageError(fmt.Errorf("--shard needs --target: every shard must load the same relay"))
				}
				path, err := relayLogPath(relayLog, summary)
				if err != nil {
					return err
				}
				child, err := startChildRelay(cmd.Context(), st, ff.relay, path)
				if err != nil {
					return err
				}
				defer child.stop(st)
				cfg.Target, cfg.ServerPIDs = child.TCP, []int{child.PID()}
			}
			return runFleet(cmd.Context(), st, cfg, &sf, summary, maxLoss)
		},
	}
	addFleetFlags(cmd.Flags(), &ff)
	addShardFlags(cmd.Flags(), &sf)
	cmd.Flags().StringVar(&summary, "summary", "", `also write the summary as JSON to this file ("-": one line on stdout, the table on stderr)`)
	cmd.Flags().StringVar(&relayLog, "relay-log", "", "log file of the relay started without --target (default: relay.log beside --summary, else a temporary file)")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	addMaxLossFlag(cmd.Flags(), &maxLoss)
	// Hidden: for profiling the fleet itself (go tool pprof FILE).
	cmd.Flags().StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	cmd.Flags().MarkHidden("cpuprofile")
	return cmd
}

// relayLogPath is where the relay child's log goes: --relay-log, else
// relay.log beside the summary, else a new temporary file.
func relayLogPath(flag, summary string) (string, error) {
	switch {
	case flag != "":
		return flag, nil
	case summary != "":
		return filepath.Join(filepath.Dir(summary), "relay.log"), nil
	}
	f, err := os.CreateTemp("", "reprise-relay-*.log")
	if err != nil {
		return "", fmt.Errorf("relay log: %w", err)
	}
	f.Close()
	return f.Name(), nil
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}

// addMaxLossFlag registers --max-loss on fs.
func addMaxLossFlag(fs *pflag.FlagSet, p *float64) {
	fs.Float64Var(p, "max-loss", fleet.DefaultMaxLoss, "fail the run (exit 1) when more than this percentage of the deliveries owed were lost (a sharded fleet's loss is judged by replay merge, on the merged figures; negative: never)")
}

func runFleet(ctx context.Context, st *state, cfg fleet.Config, sf *shardFlags, summaryPath string, maxLoss float64) error {
	f, err := fleet.New(cfg)
	if err != nil {
		return err
	}
	metrics := "off"
	if a := f.MetricsAddr(); a != nil {
		metrics = "http://" + a.String() + "/metrics"
	}
	if cfg.Shard.Sharded() {
		fmt.Fprintf(st.stderr, "replay: shard %v: %d of %d clients -> %s (metrics %s)\n", cfg.Shard, cfg.Shard.Clients(cfg.Clients), cfg.Clients, f.Target(), metrics)
	} else {
		fmt.Fprintf(st.stderr, "replay: %d clients -> %s (metrics %s)\n", cfg.Clients, f.Target(), metrics)
	}
	// The fleet is ready (script loaded, sockets bound): its /metrics
	// answers (counters at zero: a driver's baseline, before it lets a
	// held barrier start the fleet), and it waits for the common start.
	f.ServeMetrics()
	s := starter{sf: sf, shard: cfg.Shard}
	defer s.close()
	start, err := s.start(ctx)
	if err != nil {
		f.Close()
		return err
	}
	if !start.IsZero() {
		fmt.Fprintf(st.stderr, "replay: shard %v starts at %s (in %v)\n", cfg.Shard, start.UTC().Format(time.RFC3339Nano), time.Until(start).Round(time.Millisecond))
	}
	sum, runErr := f.RunAt(ctx, start)
	if runErr != nil && !errors.Is(runErr, fleet.ErrNoLogin) {
		return runErr
	}
	if runErr != nil {
		// What ran so far, its answer, then the one line.
		if err := sum.WriteText(st.stdout); err != nil {
			return err
		}
		if err := writeAnswer(st.stdout, sum, maxLoss, runErr); err != nil {
			return err
		}
		if summaryPath != "" && summaryPath != "-" {
			if err := writeFile(summaryPath, sum.WriteJSON); err != nil {
				return err
			}
		}
		return runErr
	}
	// A run in which no client logged in measured nothing; one that found
	// the server broken fails. The card says so in its words.
	verdict := sum.Check(maxLoss)
	table := st.stdout
	if summaryPath == "-" {
		// The JSON on stdout as one line (a pod's log is what `replay
		// merge` reads), the table and the answer on stderr.
		table = st.stderr
	}
	if err := sum.WriteText(table); err != nil {
		return err
	}
	if err := writeAnswer(table, sum, maxLoss, verdict); err != nil {
		return err
	}
	switch summaryPath {
	case "-":
		if err := sum.WriteJSONLine(st.stdout); err != nil {
			return err
		}
	case "":
	default:
		if err := writeFile(summaryPath, sum.WriteJSON); err != nil {
			return err
		}
	}
	return verdict
}

// writeFile writes a file through fn and reports the first error, the
// close's included.
func writeFile(path string, fn func(io.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fn(out); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	return cli.NewLogger(level, w, cli.LogConsole)
}

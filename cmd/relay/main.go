// Command relay is reprise's reference relay server: rooms over TCP and UDP
// (docs/protocol.md), Prometheus metrics on /metrics (docs/metrics.md).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/relay"
)

func main() {
	// The first signal shuts down cleanly (clients get shutting_down); a
	// second one exits at once.
	cli.Main("relay", "", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}

// usageError marks bad arguments (exit 2).
func usageError(err error) error { return cli.UsageError{Err: err} }

// run parses args, starts the relay and serves until ctx ends. It prints
// one "listening ..." line with the bound addresses to stdout (tests read
// the ports from it when given port 0).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg      relay.Config
		secret   auth.SecretSource
		logLevel string
	)
	cmd := &cobra.Command{
		Use:           "relay",
		Short:         "reprise's reference relay: rooms over TCP and UDP",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("udp") {
				cfg.UDP = relay.UDPSameAsTCP
			}
			// A room limit not given follows the sender's: the library
			// turns it off with the sender's (Config.setDefaults).
			if !cmd.Flags().Changed("room-rate-messages") {
				cfg.RoomRateMessages = 0
			}
			if !cmd.Flags().Changed("room-rate-bytes") {
				cfg.RoomRateBytes = 0
			}
			for _, name := range []string{"rate-messages-burst", "rate-bytes-burst", "room-rate-messages-burst", "room-rate-bytes-burst"} {
				if v, _ := cmd.Flags().GetInt(name); cmd.Flags().Changed(name) && v <= 0 {
					return usageError(fmt.Errorf("--%s %d: a burst is at least 1 (to turn a limit off, give its rate a negative value)", name, v))
				}
			}
			log, err := newLogger(logLevel, stderr)
			if err != nil {
				return err
			}
			defer log.Sync()
			var warnings []string
			if cfg.AuthSecret, warnings, err = secret.Load(os.Getenv); err != nil {
				return err
			}
			for _, w := range warnings {
				log.Warn(w)
			}
			m := relay.ReadMachine()
			from := memorySource(m, cfg.MaxMemory)
			goLimit := setGoMemoryLimit(m, cfg.MaxMemory)
			if cfg.MaxMemory == 0 {
				// Read before Go's limit was set from it.
				cfg.MaxMemory = int64(m.MemoryLimit())
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			srv, err := relay.New(cfg, log, reg)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "listening tcp=%s udp=%s metrics=%s\n", srv.Addr(), addrOrOff(srv.UDPAddr()), addrOrOff(srv.MetricsAddr()))
			rc := srv.Config()
			fmt.Fprintf(stdout, "limits max-connections=%s max-rooms=%s per-source connections=%s rooms=%s (open files %d, memory %d MiB)\n",
				capText(rc.MaxConnections), capText(rc.MaxRooms), capText(rc.MaxConnectionsPerSource), capText(rc.MaxRoomsPerSource), m.OpenFiles, m.Memory>>20)
			fmt.Fprintf(stdout, "memory max-memory=%d MiB (%s) go-limit=%s queue-budget=%s per-source=%s\n",
				rc.MaxMemory>>20, from, mibText(goLimit), mibText(rc.QueueBudget), mibText(rc.QueueBudgetPerSource))
			log.Info("relay started", zap.Stringer("tcp", srv.Addr()), zap.String("udp", addrOrOff(srv.UDPAddr())),
				zap.String("metrics", addrOrOff(srv.MetricsAddr())), zap.Int("max_connections", rc.MaxConnections),
				zap.Int("max_rooms", rc.MaxRooms), zap.Int("max_connections_per_source", rc.MaxConnectionsPerSource),
				zap.Int("max_rooms_per_source", rc.MaxRoomsPerSource), zap.Uint64("open_files", m.OpenFiles), zap.Uint64("memory_bytes", m.Memory),
				zap.String("memory_from", from), zap.Int64("max_memory", rc.MaxMemory), zap.Int64("go_memory_limit", goLimit),
				zap.Int64("queue_budget", rc.QueueBudget), zap.Int64("queue_budget_per_source", rc.QueueBudgetPerSource))
			err = srv.Run(ctx)
			log.Info("relay stopped")
			return err
		},
	}
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError(fmt.Errorf("unexpected argument %q (flags only)", args[0]))
		}
		return nil
	}
	f := cmd.Flags()
	d := relay.DefaultConfig()
	cfg.Listen, cfg.Metrics = d.Listen, d.Metrics
	f.Var(cli.Addr{P: &cfg.Listen, Listen: true}, "listen", "TCP address to serve clients on")
	f.Var(cli.Addr{P: &cfg.UDP, Listen: true, Off: true, Also: []string{relay.UDPSameAsTCP}}, "udp", `UDP address (default: the --listen host and port; "" or "off": no UDP)`)
	f.Var(cli.Addr{P: &cfg.Metrics, Listen: true, Off: true}, "metrics", `HTTP address of /metrics ("" or "off": none)`)
	f.IntVar(&cfg.MaxFrame, "max-frame", d.MaxFrame, "largest frame length accepted and sent, bytes (at least 1188, a padded UDP join)")
	f.IntVar(&cfg.MaxRoomMembers, "max-room-members", d.MaxRoomMembers, "members per room (0: the protocol's cap, 65535)")
	f.IntVar(&cfg.MaxConnections, "max-connections", d.MaxConnections, "TCP connections plus UDP sessions; the default is sized from this machine's open-file limit and memory (negative: no limit)")
	f.IntVar(&cfg.MaxRooms, "max-rooms", d.MaxRooms, "rooms in all; the default is sized from this machine's memory (negative: no limit)")
	f.IntVar(&cfg.MaxConnectionsPerSource, "max-connections-per-source", d.MaxConnectionsPerSource, "TCP connections plus UDP sessions from one source address (negative: no limit)")
	f.IntVar(&cfg.MaxRoomsPerSource, "max-rooms-per-source", d.MaxRoomsPerSource, "rooms the connections and sessions of one source address may be in (negative: no limit)")
	f.Float64Var(&cfg.RoomRateMessages, "room-rate-messages", d.RoomRateMessages, "frames per second per member that all members of a room together may send into it, sustained (a room of 10 takes 10 times this); over it sends are dropped (negative: no limit)")
	f.IntVar(&cfg.RoomRateMessagesBurst, "room-rate-messages-burst", d.RoomRateMessagesBurst, "frames per member a room may take at once above --room-rate-messages (at least 1)")
	f.Float64Var(&cfg.RoomRateBytes, "room-rate-bytes", d.RoomRateBytes, "bytes per second per member that all members of a room together may send into it, sustained (negative: no limit)")
	f.IntVar(&cfg.RoomRateBytesBurst, "room-rate-bytes-burst", d.RoomRateBytesBurst, "bytes per member a room may take at once above --room-rate-bytes (at least one --max-frame frame)")
	f.IntVar(&cfg.MaxPending, "max-pending", d.MaxPending, "outbound queue cap per connection, bytes; over it a client is a slow consumer")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", d.WriteTimeout, "deadline of one write to a client; over it a client is a slow consumer")
	f.DurationVar(&cfg.WriteCoalesce, "write-coalesce", d.WriteCoalesce, "how long a connection's writer waits for more of a burst (other senders of the same tick) before it writes (0: at once)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", d.IdleTimeout, "close a joined client that sent nothing for this long")
	f.DurationVar(&cfg.JoinTimeout, "join-timeout", d.JoinTimeout, "close a connection that has not joined within this")
	f.DurationVar(&cfg.UDPConfirmTimeout, "udp-confirm-timeout", d.UDPConfirmTimeout, "end a UDP session whose client has not sent back its token within this (address validation)")
	f.IntVar(&cfg.UDPPendingPerSource, "udp-max-unconfirmed-per-source", d.UDPPendingPerSource, "unconfirmed UDP sessions one source address may hold")
	f.IntVar(&cfg.UDPMaxPending, "udp-max-unconfirmed", d.UDPMaxPending, "unconfirmed UDP sessions in all")
	f.IntVar(&cfg.UDPWorkers, "udp-workers", d.UDPWorkers, "UDP sockets sharing the port (SO_REUSEPORT), each with its own reading and fan-out goroutine (0: one per CPU)")
	f.IntVar(&cfg.UDPReadBuffer, "udp-rcvbuf", d.UDPReadBuffer, "receive buffer of each UDP socket, bytes (-1: the kernel's default); drops past it: relay_udp_receive_drops_total")
	f.IntVar(&cfg.UDPCoalesce, "udp-coalesce", d.UDPCoalesce, "most bytes of a datagram packing several frames for one UDP client (-1: one frame per datagram, for clients that read only one)")
	f.DurationVar(&cfg.UDPHold, "udp-hold", d.UDPHold, "how long a UDP worker that emptied its socket waits for more of a burst, and a client's datagram with room for more frames (0: at once)")
	f.IntVar(&cfg.HeartbeatMisses, "heartbeat-misses", d.HeartbeatMisses, "remove a client that heartbeats after this many of its heartbeat intervals without a frame (at least 5s, at most --idle-timeout; negative: off)")
	f.Float64Var(&cfg.RateMessages, "rate-messages", d.RateMessages, "frames per second one sender may send, sustained (negative: no limit)")
	f.IntVar(&cfg.RateMessagesBurst, "rate-messages-burst", d.RateMessagesBurst, "frames one sender may send at once above --rate-messages")
	f.Float64Var(&cfg.RateBytes, "rate-bytes", d.RateBytes, "bytes per second one sender may send, sustained (negative: no limit)")
	f.IntVar(&cfg.RateBytesBurst, "rate-bytes-burst", d.RateBytesBurst, "bytes one sender may send at once above --rate-bytes (at least one --max-frame frame)")
	f.DurationVar(&cfg.RateLimitGrace, "rate-limit-grace", d.RateLimitGrace, "disconnect a sender whose frames are dropped for this long without a second's break")
	f.DurationVar(&cfg.FrameTimeout, "frame-timeout", d.FrameTimeout, "close a connection whose frame is not complete this long after its first byte")
	f.Int64Var(&cfg.PartialBudget, "partial-budget", d.PartialBudget, "bytes held in partial frames over all connections; past it the connection with the largest is closed (negative: no cap)")
	f.Var(mibFlag{&cfg.MaxMemory, false}, "max-memory", "memory the relay may use, MiB; Go's soft memory limit is set to 90 % of it unless GOMEMLIMIT is (default: GOMEMLIMIT, else the memory cgroup's limit, v1 or v2, else the machine's memory)")
	f.Var(mibFlag{&cfg.QueueBudget, true}, "queue-budget", "MiB the outbound queues and partial frames of all connections may hold together; past it the connections holding the most are cut as memory_budget (default: a quarter of --max-memory; negative: none)")
	f.Var(mibFlag{&cfg.QueueBudgetPerSource, true}, "queue-budget-per-source", "MiB of --queue-budget the connections of one source address may hold (default: a quarter of it; negative: none)")
	f.StringVar(&secret.File, "auth-secret-file", "", "file holding the secret joins' tokens must be signed with (docs/protocol.md); or $"+auth.EnvSecret)
	f.StringVar(&secret.Flag, "auth-secret", "", "the secret itself: visible to every local user in ps, prefer --auth-secret-file or $"+auth.EnvSecret)
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd.ExecuteContext(ctx)
}

// goLimitShare: with no GOMEMLIMIT, Go's soft memory limit is this share
// of the relay's memory limit when that is the container's or
// --max-memory, so the GC works harder before the container's limit kills
// the relay, and a little is left for what Go does not count (the
// kernel's socket buffers a cgroup v2 charges).
const goLimitShare = 0.9

// setGoMemoryLimit sets Go's soft memory limit from the container's limit
// or --max-memory (flag bytes, 0: not given), unless GOMEMLIMIT set one,
// and returns the limit in force (0: none).
func setGoMemoryLimit(m relay.Machine, flag int64) int64 {
	if m.GoLimit > 0 {
		return int64(m.GoLimit)
	}
	lim := flag
	if lim <= 0 && m.MemoryFrom != "meminfo" {
		lim = int64(m.Memory)
	}
	if lim <= 0 {
		return 0
	}
	lim = int64(float64(lim) * goLimitShare)
	debug.SetMemoryLimit(lim)
	return lim
}

// memorySource says where --max-memory's value came from.
func memorySource(m relay.Machine, flag int64) string {
	switch {
	case flag > 0:
		return "--max-memory"
	case m.GoLimit > 0:
		return "GOMEMLIMIT"
	}
	return m.MemoryFrom
}

// mibFlag is a byte count given in MiB; neg allows negative values (none).
type mibFlag struct {
	b   *int64
	neg bool
}

func (v mibFlag) String() string {
	if v.b == nil || *v.b == 0 {
		return "0"
	}
	return strconv.FormatInt(*v.b>>20, 10)
}

func (v mibFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n > 1<<30 || n < -1<<30:
		return fmt.Errorf("%q is not a size in MiB", s)
	case n == 0 || n < 0 && !v.neg:
		return fmt.Errorf("%q: at least 1 MiB", s)
	}
	*v.b = n << 20
	return nil
}

func (mibFlag) Type() string { return "MiB" }

// mibText is a byte count as printed: MiB, or "none".
func mibText(n int64) string {
	if n <= 0 {
		return "none"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

// capText is a cap as printed: its value, or "none".
func capText(n int) string {
	if n <= 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

func addrOrOff(a net.Addr) string {
	if a == nil {
		return "off"
	}
	return a.String()
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	return cli.NewLogger(level, w, cli.LogJSON)
}

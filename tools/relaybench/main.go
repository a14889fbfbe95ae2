// Command relaybench is the relay's load benchmark (make bench-relay). It
// starts the relay binary as its own process on 127.0.0.1 and either
//
//   - fanout: rooms × members TCP clients, each sending othercasts of
//     --payload bytes at --rate Hz for --duration, and reports delivered/s,
//     the relay's CPU seconds per million deliveries (from
//     /proc/<pid>/stat), send→deliver latency p50/p99 (HdrHistogram), the
//     relay's RSS and its slow-consumer disconnects; or
//   - idle: --idle-conns joined, silent TCP connections, and reports the
//     relay's RSS per connection.
//
// Every load is bounded in time and count and stays on loopback.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	relayBin  string
	mode      string
	rooms     int
	members   int
	rate      float64
	payload   int
	duration  time.Duration
	warmup    time.Duration
	idleConns int
	relayArgs string
	burst     bool
}

func main() {
	var o options
	flag.StringVar(&o.relayBin, "relay", "bin/relay", "relay binary to start")
	flag.StringVar(&o.mode, "mode", "fanout", "fanout or idle")
	flag.IntVar(&o.rooms, "rooms", 16, "rooms (fanout)")
	flag.IntVar(&o.members, "members", 32, "members per room (fanout)")
	flag.Float64Var(&o.rate, "rate", 72, "sends per second per client (fanout)")
	flag.IntVar(&o.payload, "payload", 200, "payload bytes per send (fanout)")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measured time (fanout)")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured sending before the measurement (fanout)")
	flag.IntVar(&o.idleConns, "idle-conns", 10000, "connections (idle)")
	flag.StringVar(&o.relayArgs, "relay-args", "", "extra relay flags, space separated")
	flag.BoolVar(&o.burst, "burst", false, "a room's members send in the same tick (rooms staggered) instead of each at its own phase (fanout)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, w io.Writer) error {
	r, err := startRelay(o)
	if err != nil {
		return err
	}
	defer r.stop()
	switch o.mode {
	case "fanout":
		return fanout(ctx, o, r, w)
	case "idle":
		return idle(ctx, o, r, w)
	}
	return fmt.Errorf("--mode %q: want fanout or idle", o.mode)
}

// relayProc is the relay under test, a separate process.
type relayProc struct {
	cmd          *exec.Cmd
	tcp, metrics string
	done         chan error
}

var listenLine = regexp.MustCompile(`^listening tcp=(\S+) udp=\S+ metrics=(\S+)`)

func startRelay(o options) (*relayProc, error) {
	args := []string{"--listen", "127.0.0.1:0", "--udp", "off", "--metrics", "127.0.0.1:0", "--log-level", "warn",
		"--max-room-members", "0", "--idle-timeout", "10m"}
	if o.mode == "idle" {
		// Every connection comes from 127.0.0.1: the relay's per-source
		// caps would stop them at a quarter of --max-connections.
		args = append(args, "--max-connections-per-source", "-1")
	}
	args = append(args, strings.Fields(o.relayArgs)...)
	cmd := exec.Command(o.relayBin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay %s (make build first): %w", o.relayBin, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	m := listenLine.FindStringSubmatch(line)
	if err != nil || m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("relay did not start (first line %q): %v", line, err)
	}
	r := &relayProc{cmd: cmd, tcp: m[1], metrics: m[2], done: make(chan error, 1)}
	go func() { io.Copy(io.Discard, out); r.done <- cmd.Wait() }()
	return r, nil
}

func (r *relayProc) stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
}

// cpuSeconds is the relay's user+system CPU time from /proc/<pid>/stat.
func (r *relayProc) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that ends the command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (100 per second on
	// Linux).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, errors.New("short /proc/pid/stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/pid/stat: %w", err)
	}
	return (ut + st) / 100, nil
}

// rssBytes is the relay's resident set size from /proc/<pid>/status.
func (r *relayProc) rssBytes() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc/pid/status")
}

// writeCounts is the relay's write and delivery counters at one moment.
type writeCounts struct{ writes, delivered float64 }

func (r *relayProc) writeStats() (writeCounts, error) {
	w, err1 := r.metric("relay_writes_total")
	d, err2 := r.metric("relay_delivered_messages_total")
	return writeCounts{w, d}, errors.Join(err1, err2)
}

// metric scrapes one unlabelled sample from the relay's /metrics.
func (r *relayProc) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(rest, 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

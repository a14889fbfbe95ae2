// Command fidelity measures how faithfully a replay kept the recorded send
// schedule, from a packet capture of the replay (scripts/timing-fidelity.sh
// takes it with tcpdump on lo; make bench-fidelity).
//
// The fleet plays the recorded client's frames at their recorded offsets
// from each client's join: for each replayed client in the capture it cuts
// the client→server frames from the reassembled TCP stream or the
// datagrams (internal/capture, so a frame split over segments or several
// frames in one segment count as frames, not packets), aligns them with
// the recorded script from the first send on, and compares the gap
// between each two successive frames with the recorded gap of the same
// two frames. It prints one tab-separated row per capture: clients and
// gaps compared, median and p99 of |gap error|, the share of gaps within
// 1 ms and 5 ms, how late the last frame of a client was against its
// schedule and how late its frames of the last second were (median and
// worst over clients).
//
//	fidelity --recording captures/vr-session.pcap --server-port 40123 replay.pcap
//
// It is for the bundled reprise protocol without --loop (a loop's wrap has
// no recorded gap) and N:N replays: receive-only clients are counted and
// left out. It is not for captures that lost packets: a client whose
// stream had to be resynchronised is counted and left out, and datagrams
// the capture missed would shift the alignment (the script reports
// tcpdump's own drops).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(1)
	}
}

type options struct {
	recording  string
	flow       int
	speed      float64
	serverPort uint
	label      string
	header     bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.recording, "recording", "captures/vr-session.pcap", "the capture the replay played")
	fs.IntVar(&o.flow, "flow", -1, "the recorded flow the replay played, as replay inspect lists them (-1: the longest, replay's default)")
	fs.Float64Var(&o.speed, "speed", 1, "the replay's --speed")
	fs.UintVar(&o.serverPort, "server-port", uint(wire.DefaultPort), "the port the replayed server listened on (tells the client side of a flow)")
	fs.StringVar(&o.label, "label", "", "first column of each row (default: the capture's path)")
	fs.BoolVar(&o.header, "header", true, "print the header row")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("usage: fidelity [flags] REPLAY.pcap...: no replay capture given")
	}
	if o.serverPort == 0 || o.serverPort > 65535 {
		return fmt.Errorf("--server-port %d: want 1 to 65535", o.serverPort)
	}
	s, err := readSchedule(ctx, o.recording, o.flow, o.speed, stderr)
	if err != nil {
		return err
	}
	if o.header {
		fmt.Fprintln(stdout, header)
	}
	for _, path := range fs.Args() {
		res, err := measure(ctx, s, path, uint16(o.serverPort), stderr)
		if err != nil {
			return err
		}
		label := o.label
		if label == "" {
			label = path
		}
		fmt.Fprintln(stdout, res.row(label))
	}
	return nil
}

// readSchedule reads the recorded flow's schedule.
func readSchedule(ctx context.Context, path string, flow int, speed float64, warn io.Writer) (schedule, error) {
	c, err := capture.ReadFileContext(ctx, path, capture.Options{Framer: profile.RepriseFramer(0), ServerPort: wire.DefaultPort})
	if err != nil {
		return schedule{}, fmt.Errorf("recording: %w", err)
	}
	warnings(warn, path, c)
	var fl *capture.Flow
	switch {
	case flow < 0:
		fl = c.Longest()
	case flow < len(c.Flows):
		fl = c.Flows[flow]
	}
	if fl == nil {
		return schedule{}, fmt.Errorf("recording %s: no flow %d (it has %d)", path, flow, len(c.Flows))
	}
	s, err := newSchedule(fl.ClientFrames, speed)
	if err != nil {
		return schedule{}, fmt.Errorf("recording %s, %s: %w", path, fl, err)
	}
	return s, nil
}

// measure reads one replay's capture and compares its clients.
func measure(ctx context.Context, s schedule, path string, port uint16, warn io.Writer) (result, error) {
	c, err := capture.ReadFileContext(ctx, path, capture.Options{Framer: profile.RepriseFramer(0), ServerPort: port})
	if err != nil {
		return result{}, fmt.Errorf("replay capture: %w", err)
	}
	warnings(warn, path, c)
	res, err := compare(s, c.Flows)
	if err != nil {
		return res, fmt.Errorf("replay capture %s: %w", path, err)
	}
	return res, nil
}

// warnings says what reading a capture skipped or could not read (a
// file cut short, packets out of order): a row measured over part of a
// capture must not pass for the whole.
func warnings(w io.Writer, path string, c *capture.Capture) {
	for _, m := range c.Warnings {
		fmt.Fprintf(w, "fidelity: warning: %s: %s\n", path, m)
	}
}

const header = "run\tframes\tclients\tgaps\terr_p50_ms\terr_p99_ms\twithin_1ms_%\twithin_5ms_%\tdrift_p50_ms\tdrift_max_ms\tend_late_p50_ms\tend_late_max_ms\tunmatched\tsize_diff\tidle\tbroken"

func (r result) row(label string) string {
	return fmt.Sprintf("%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\t%d",
		label, r.frames, r.clients, r.gaps, ms(r.p50), ms(r.p99), 100*r.within1, 100*r.within5,
		ms(r.driftP50), ms(r.driftMax), ms(r.endLateP50), ms(r.endLateMax), r.unmatched, r.sizeDiff, r.idle, r.broken)
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// Command vrclient behaves like a VR client in a shared space: it joins a
// room, sends head-and-hands poses at 72 Hz, voice at 50 Hz in talking
// bursts, occasional object syncs (some unicast, some to the owner) and
// heartbeats, then leaves. Given --seed its session is the same every time.
// It is the sample the bundled captures were recorded from.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

func main() {
	cli.Main("vrclient", "", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stderr) })
}

// usageError marks bad arguments (exit 2, as every reprise command).
func usageError(err error) error { return cli.UsageError{Err: err} }

type options struct {
	target, transport, room, user, sentLog, secret string
	duration, heartbeat                            time.Duration
	seed                                           uint64
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	var o options
	cmd := &cobra.Command{
		Use:           "vrclient",
		Short:         "a sample VR client: joins a room, sends poses, voice, object syncs and heartbeats, then leaves",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			if err := o.check(); err != nil {
				return usageError(err)
			}
			return play(ctx, o, stderr)
		},
	}
	cmd.SetArgs(args)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	check := cmd.Args
	cmd.Args = func(c *cobra.Command, a []string) error {
		if err := check(c, a); err != nil {
			return usageError(err)
		}
		return nil
	}
	fs := cmd.Flags()
	o.target = wire.Loopback(wire.DefaultPort)
	fs.Var(cli.Addr{P: &o.target}, "target", "relay address")
	fs.StringVar(&o.transport, "transport", "tcp", "tcp or udp")
	fs.StringVar(&o.room, "room", "lobby", "room to join")
	fs.StringVar(&o.user, "user", "alice", "user id")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "how long to stay in the room")
	fs.DurationVar(&o.heartbeat, "heartbeat", 60*time.Second, "heartbeat interval (0: none)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the session's randomness")
	fs.StringVar(&o.sentLog, "sent-log", "", "write every frame sent, hex, one per line (UDP: without the token)")
	fs.StringVar(&o.secret, "auth-secret", "", "sign the join with this relay secret")
	return cmd.Execute()
}

// check validates the options.
func (o options) check() error {
	if o.transport != "tcp" && o.transport != "udp" {
		return fmt.Errorf("--transport %q: want tcp or udp", o.transport)
	}
	return errors.Join(wire.CheckID("--room", o.room), wire.CheckID("--user", o.user))
}

// play runs one session against the relay.
func play(ctx context.Context, o options, stderr io.Writer) error {
	udp := o.transport == "udp"
	dial := client.Dial
	if udp {
		dial = client.DialUDP
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := dial(dctx, o.target)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	var log *bufio.Writer
	if o.sentLog != "" {
		f, err := os.Create(o.sentLog)
		if err != nil {
			return fmt.Errorf("--sent-log: %w", err)
		}
		defer f.Close()
		log = bufio.NewWriter(f)
		defer log.Flush()
	}
	c.OnSend(func(frame []byte) { logFrame(log, frame) })
	var token []byte
	if o.secret != "" {
		token = auth.Sign([]byte(o.secret), o.user, time.Now().Add(24*time.Hour))
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	joined, err := c.Join(o.room, o.user, token)
	if err != nil {
		return fmt.Errorf("join %s as %s: %w", o.room, o.user, err)
	}
	_ = c.SetDeadline(time.Time{})

	room := newRoomView(o.user, joined)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); room.receive(c) }()

	counts, err := sendPlan(ctx, c, plan(planConfig{Seed: o.seed, Duration: o.duration, Heartbeat: o.heartbeat, UDP: udp}), room)
	if err == nil {
		err = c.Leave()
	}
	// Let the relay's last frames arrive, then stop the receiver.
	time.Sleep(200 * time.Millisecond)
	c.Close()
	wg.Wait()
	fmt.Fprintf(stderr, "vrclient: %s in %s over %s: sent %d poses, %d voice, %d objects, %d heartbeats; received %d frames\n",
		o.user, o.room, o.transport, counts[kindPose], counts[kindVoice], counts[kindObject], counts[kindHeartbeat], room.received())
	return err
}

// sendPlan sends each event at its time (from now), until the plan or ctx
// ends, and counts what it sent by kind.
func sendPlan(ctx context.Context, c *client.Conn, evs []event, room *roomView) ([4]int, error) {
	var counts [4]int
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for _, ev := range evs {
		if wait := time.Until(start.Add(ev.at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return counts, nil
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return counts, nil
		}
		var err error
		if ev.kind == kindHeartbeat {
			err = c.Heartbeat(time.Now().UnixNano())
		} else {
			err = c.Send(build(ev, room))
		}
		if err != nil {
			return counts, err
		}
		counts[ev.kind]++
	}
	return counts, nil
}

// build turns an event into a send: a trace timestamp from now, and a
// target for unicasts (another member, or the owner when alone).
func build(ev event, room *roomView) wire.Send {
	m := wire.Send{Mode: ev.mode, HasTrace: true, Trace: time.Now().UnixNano(), Payload: ev.payload}
	if m.Mode == wire.Unicast {
		if peer := room.peer(); peer != "" {
			m.Targets = []string{peer}
		} else {
			m.Mode = wire.Ownercast
		}
	}
	return m
}

func logFrame(w *bufio.Writer, frame []byte) {
	if w == nil {
		return
	}
	w.WriteString(hex.EncodeToString(frame))
	w.WriteByte('\n')
}

// roomView tracks the other members, fed by the receiving goroutine.
type roomView struct {
	mu      sync.Mutex
	self    string
	members []string
	count   int
}

func newRoomView(self string, j client.Joined) *roomView {
	r := &roomView{self: self}
	for _, m := range j.Members {
		if m != self {
			r.members = append(r.members, m)
		}
	}
	return r
}

// receive reads frames until the connection closes.
func (r *roomView) receive(c *client.Conn) {
	for {
		f, err := c.Recv()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.count++
		switch f.Type {
		case wire.TypeMemberJoined:
			r.members = append(r.members, string(f.User))
		case wire.TypeMemberLeft:
			for i, m := range r.members {
				if m == string(f.User) {
					r.members = append(r.members[:i], r.members[i+1:]...)
					break
				}
			}
		}
		r.mu.Unlock()
	}
}

// peer is the longest-present other member, or "".
func (r *roomView) peer() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.members) == 0 {
		return ""
	}
	return r.members[0]
}

func (r *roomView) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

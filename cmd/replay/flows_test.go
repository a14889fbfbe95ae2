package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// recordPubSub records, through one `record proxy`, a real mosquitto_sub
// (the subscriber) and a real mosquitto_pub publishing msgs messages at
// 20 Hz on topic: two connections, two flows of one capture.
func recordPubSub(t *testing.T, port int, topic string, msgs int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pubsub.pcap")
	proxy, listen := startRecordProxy(t, fmt.Sprintf("127.0.0.1:%d", port), out)
	host, lport, _ := strings.Cut(listen, ":")
	// -d prints the SUBACK: the publisher starts once the subscription
	// holds, so the recorded subscriber gets every message.
	// stdbuf: its stdout is a pipe, where stdio would hold the line.
	sub := testproc.Start(t, "stdbuf", "-oL", needTool(t, "mosquitto_sub"), "-d", "-h", host, "-p", lport, "-i", "rec-sub", "-t", topic,
		"-C", strconv.Itoa(msgs), "-W", "60")
	for end := time.Now().Add(20 * time.Second); !strings.Contains(sub.Stdout.String(), "SUBACK"); {
		if time.Now().After(end) || sub.Exited() {
			t.Fatalf("mosquitto_sub never subscribed:\n%s%s", sub.Stdout, sub.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pub := exec.Command(needTool(t, "mosquitto_pub"), "-h", host, "-p", lport, "-i", "rec-pub", "-t", topic, "-m", "hello from the publisher",
		"--repeat", strconv.Itoa(msgs), "--repeat-delay", "0.05")
	if b, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v\n%s", err, b)
	}
	select {
	case <-sub.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("mosquitto_sub did not get its %d messages:\n%s", msgs, sub.Stdout)
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("mosquitto_sub: %v\n%s%s", err, sub.Stdout, sub.Stderr)
	}
	if err := proxy.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, proxy.Stderr)
	}
	return out
}

// TestFlowsPubSubMosquitto records a real subscriber and a real publisher
// on two connections and replays both in one fleet with --flows all: 20
// clients, client i playing flow i mod 2, so 10 publishers and 10
// subscribers. Both roles ran: every publisher's 50 messages reached
// mosquitto (its $SYS received counter, and a separate real mosquitto_sub
// on the topic counts them), and the fleet's subscribers got exactly what
// the broker sent out, less what went to that counter and the $SYS
// monitor; the summary lists 10 clients per flow.
func TestFlowsPubSubMosquitto(t *testing.T) {
	t.Parallel()
	const msgs, clients, topic = 50, 20, "rooms/flows"
	port, _, _ := startMosquitto(t)
	capPath := recordPubSub(t, port, topic, msgs)
	insp, err := execReplay("inspect", "--profile", "mqtt", capPath)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, insp)
	}

	mon := startSysMonitor(t, port)
	counter := testproc.Start(t, needTool(t, "mosquitto_sub"), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-i", "counter", "-t", topic,
		// One line per message whatever its payload (the fleet's carry binary trace stamps).
		"-F", "message")
	recv0, sent0, own0 := mon.settled(t)
	res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", port),
		"--flows", "all", "--clients", strconv.Itoa(clients), "--login-interval", "2ms", "--duration", "8s",
		"--drain-deliveries", "30s")
	mustOK(t, res)
	recv1, sent1, own1 := mon.settled(t)
	counted := strings.Count(counter.Stdout.String(), "message\n")
	s := res.sum

	if len(s.Flows) != 2 || s.Flows[0].Clients != clients/2 || s.Flows[1].Clients != clients/2 {
		t.Fatalf("summary flows %+v, want 2 flows of %d clients\n%s", s.Flows, clients/2, res.stdout)
	}
	for _, fc := range s.Flows {
		if !strings.Contains(res.stdout, fmt.Sprintf("flow %d (client %s)", fc.Flow, fc.Client)) {
			t.Errorf("the printed summary lacks flow %d:\n%s", fc.Flow, res.stdout)
		}
	}
	if s.LoginsSucceeded != clients || len(s.LoginsFailed) != 0 {
		t.Fatalf("logins %d failed %v\n%s%s", s.LoginsSucceeded, s.LoginsFailed, res.stdout, res.stderr)
	}
	// Both roles: half the clients subscribed (the recorded subscriber's
	// SUBSCRIBE), the other half published.
	if s.FramesSent["subscribe"] != clients/2 || s.FramesSent["connect"] != clients {
		t.Errorf("frames sent %v: want %d subscribe and %d connect", s.FramesSent, clients/2, clients)
	}
	// The publishers' side: each of the 10 sent its recorded 50.
	wantSent := int64(clients / 2 * msgs)
	brokerRecv := recv1 - recv0
	if s.MessagesSent != wantSent || brokerRecv != float64(wantSent) || counted != int(wantSent) {
		t.Errorf("fleet sent %d PUBLISH, mosquitto received %v, the counting subscriber got %d; want %d each", s.MessagesSent, brokerRecv, counted, wantSent)
	}
	// The subscribers' side: what the broker delivered to the fleet.
	brokerToFleet := sent1 - sent0 - float64(own1-own0) - float64(counted)
	if s.MessagesReceived == 0 || float64(s.MessagesReceived) != brokerToFleet {
		t.Errorf("the fleet's subscribers received %d, mosquitto sent %v to the fleet", s.MessagesReceived, brokerToFleet)
	}
	if max := int64(clients / 2 * int(wantSent)); s.MessagesReceived > max {
		t.Errorf("the fleet received %d, more than 10 subscribers x %d publishes", s.MessagesReceived, wantSent)
	}
	t.Logf("summary:\n%s", res.stdout)
	t.Logf("flows %+v: fleet sent %d received %d; mosquitto received %v, sent to the fleet %v; counting subscriber %d",
		s.Flows, s.MessagesSent, s.MessagesReceived, brokerRecv, brokerToFleet, counted)
}

// TestFlowsBundled replays both flows of the bundled capture (alice and
// bob) in one fleet against the relay child, and checks what --flows does
// with a loop that one flow's timeline does not hold (flow 1 ends at
// 57.4 s): all skips that flow and says why, a list is an error, as are
// --flows with --flow and an index the capture does not have.
func TestFlowsBundled(t *testing.T) {
	t.Parallel()
	capPath := filepath.Join("..", "..", "captures", "vr-session.pcap")
	run := []string{"--capture", capPath, "--clients", "4", "--login-interval", "1ms", "--duration", "2s"}
	t.Run("both", func(t *testing.T) {
		res := replay(t, append(run, "--flows", "all", "--loop=1s,3s")...)
		mustOK(t, res)
		s := res.sum
		if len(s.Flows) != 2 || s.Flows[0].Flow != 0 || s.Flows[1].Flow != 1 || s.Flows[0].Clients != 2 || s.Flows[1].Clients != 2 {
			t.Fatalf("flows %+v, want flows 0 and 1 with 2 clients each\n%s", s.Flows, res.stdout)
		}
		if s.LoginsSucceeded != 4 || s.MessagesSent == 0 || s.MessagesReceived == 0 {
			t.Fatalf("logins %d sent %d received %d\n%s%s", s.LoginsSucceeded, s.MessagesSent, s.MessagesReceived, res.stdout, res.stderr)
		}
	})
	t.Run("weighted", func(t *testing.T) {
		// 8 clients at 3:1: clients 0-2 and 4-6 play flow 0, 3 and 7 flow 1.
		res := replay(t, "--capture", capPath, "--clients", "8", "--login-interval", "1ms", "--duration", "2s",
			"--flows", "0:3,1:1", "--loop=1s,3s")
		mustOK(t, res)
		s := res.sum
		if len(s.Flows) != 2 || s.Flows[0].Clients != 6 || s.Flows[1].Clients != 2 {
			t.Fatalf("flows %+v, want 6 clients on flow 0 and 2 on flow 1\n%s", s.Flows, res.stdout)
		}
		var logins, sent, recv int64
		for _, fc := range s.Flows {
			logins, sent, recv = logins+fc.Logins, sent+fc.Sent, recv+fc.Received
			if fc.Logins != int64(fc.Clients) {
				t.Errorf("flow %d: %d logins for %d clients", fc.Flow, fc.Logins, fc.Clients)
			}
		}
		if logins != s.LoginsSucceeded || sent != s.MessagesSent || recv != s.MessagesReceived || sent == 0 {
			t.Errorf("flows add up to %d logins, %d sent, %d received; the fleet's %d, %d, %d",
				logins, sent, recv, s.LoginsSucceeded, s.MessagesSent, s.MessagesReceived)
		}
		if !strings.Contains(res.stdout, "6 clients, 6 logins") || !strings.Contains(strings.Join(s.Notes, "\n"), "weights 3, 1") {
			t.Errorf("summary or notes lack the weighted flows:\n%s\n%q", res.stdout, s.Notes)
		}
	})
	t.Run("loop past one flow", func(t *testing.T) {
		res := replay(t, append(run, "--flows", "all", "--loop=58s,59s")...)
		mustOK(t, res)
		if len(res.sum.Flows) != 1 || res.sum.Flows[0].Flow != 0 || res.sum.Flows[0].Clients != 4 {
			t.Fatalf("flows %+v, want flow 0 alone with 4 clients", res.sum.Flows)
		}
		skipped := false
		for _, n := range res.sum.Notes {
			skipped = skipped || (strings.HasPrefix(n, "--flows all: skipped flow 1") && strings.Contains(n, "past the flow's end"))
		}
		if !skipped {
			t.Errorf("no note says flow 1 was skipped and why: %q", res.sum.Notes)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"listed flow cannot loop", []string{"--flows", "0,1", "--loop=58s,59s"}, "--flows: flow 1"},
		{"with --flow", []string{"--flows", "all", "--flow", "1"}, "pick one"},
		{"no such flow", []string{"--flows", "0,5"}, "the capture has 2 flows"},
		{"bad list", []string{"--flows", "0,x"}, "want \"all\" or flow indexes"},
		{"bad weight", []string{"--flows", "0:0,1"}, "weight \"0\" is not a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runReplay(t, append(append([]string{"--metrics", ""}, run...), tc.args...)...)
			if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, want 2 with %q\n%s", res.code, tc.want, res.stderr)
			}
		})
	}
}

// TestFlowsShardsMosquitto records a real subscriber and a real publisher
// and replays both with --flows all as 2 shard processes at a barrier,
// then merges their summaries: the merged per-flow figures are the sums
// of the shards', they add up to the fleet's totals, and they equal the
// broker's counts: the publishers' flow sent what mosquitto received, the
// subscribers' flow received what mosquitto sent to the fleet.
func TestFlowsShardsMosquitto(t *testing.T) {
	t.Parallel()
	const msgs, clients, shards, topic = 30, 12, 2, "rooms/shards"
	port, _, _ := startMosquitto(t)
	capPath := recordPubSub(t, port, topic, msgs)
	mon := startSysMonitor(t, port)
	counter := testproc.Start(t, needTool(t, "mosquitto_sub"), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-i", "counter", "-t", topic,
		"-F", "message")
	recv0, sent0, own0 := mon.settled(t)

	dir := t.TempDir()
	runShardsAt(t, func(barrier string) []*exec.Cmd {
		cmds := make([]*exec.Cmd, shards)
		for i := range shards {
			cmds[i] = exec.Command(bins["replay"], "--profile", "mqtt", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", port),
				"--flows", "all", "--clients", strconv.Itoa(clients), "--login-interval", "5ms", "--duration", "6s",
				"--drain-deliveries", "30s", "--shard", fmt.Sprintf("%d/%d", i, shards), "--barrier", barrier,
				"--summary", filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		}
		return cmds
	})

	merged := filepath.Join(dir, "merged.json")
	if out, err := exec.Command(bins["replay"], "merge", "--summary", merged,
		filepath.Join(dir, "shard-0.json"), filepath.Join(dir, "shard-1.json")).CombinedOutput(); err != nil {
		t.Fatalf("replay merge: %v\n%s", err, out)
	}
	recv1, sent1, own1 := mon.settled(t)
	counted := strings.Count(counter.Stdout.String(), "message\n")
	s, _ := readSummary(t, merged)
	if len(s.Flows) != 2 {
		t.Fatalf("merged flows %+v, want 2", s.Flows)
	}

	// The merged per-flow figures are the shards' sums, flow by flow.
	var want [2]fleet.FlowClients
	for i := range shards {
		sh, _ := readSummary(t, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		var logins, sent, recv int64
		for k, fc := range sh.Flows {
			want[k].Logins += fc.Logins
			want[k].Sent += fc.Sent
			want[k].Received += fc.Received
			logins, sent, recv = logins+fc.Logins, sent+fc.Sent, recv+fc.Received
		}
		if logins != sh.LoginsSucceeded || sent != sh.MessagesSent || recv != sh.MessagesReceived {
			t.Errorf("shard %d: flows add up to %d logins, %d sent, %d received; its totals %d, %d, %d",
				i, logins, sent, recv, sh.LoginsSucceeded, sh.MessagesSent, sh.MessagesReceived)
		}
	}
	for k, fc := range s.Flows {
		if fc.Clients != clients/2 || fc.Logins != want[k].Logins || fc.Sent != want[k].Sent || fc.Received != want[k].Received {
			t.Errorf("merged flow %d: %+v; want %d clients and the shards' sums %+v", k, fc, clients/2, want[k])
		}
	}

	// Against the broker: one flow publishes, the other receives.
	pub, sub := s.Flows[0], s.Flows[1]
	if pub.Sent == 0 {
		pub, sub = sub, pub
	}
	wantSent := int64(clients / 2 * msgs)
	brokerRecv := recv1 - recv0
	brokerToFleet := sent1 - sent0 - float64(own1-own0) - float64(counted)
	if pub.Logins != clients/2 || sub.Logins != clients/2 || s.LoginsSucceeded != clients {
		t.Errorf("logins: publishers' flow %d, subscribers' %d, fleet %d; want %d, %d, %d", pub.Logins, sub.Logins, s.LoginsSucceeded, clients/2, clients/2, clients)
	}
	if pub.Sent != wantSent || brokerRecv != float64(wantSent) || counted != int(wantSent) || sub.Sent != 0 {
		t.Errorf("publishers' flow sent %d (subscribers' %d), mosquitto received %v, the counting subscriber got %d; want %d", pub.Sent, sub.Sent, brokerRecv, counted, wantSent)
	}
	if sub.Received == 0 || float64(sub.Received) != brokerToFleet || pub.Received != 0 {
		t.Errorf("subscribers' flow received %d (publishers' %d), mosquitto sent %v to the fleet", sub.Received, pub.Received, brokerToFleet)
	}
	t.Logf("merged flows %+v; mosquitto received %v, sent to the fleet %v", s.Flows, brokerRecv, brokerToFleet)
}

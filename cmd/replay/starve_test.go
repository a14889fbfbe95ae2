package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// starve is how a starved host treats the fleet in replayStarved: it
// runs for run out of every stop+run, as a process whose threads a busy
// host leaves waiting (at load 20 on 2 cores a thread waits hundreds of
// milliseconds for its turn).
type starve struct {
	stop, run time.Duration
	// max bounds the starving (the test's own bound: the run's drain
	// bound holds the fleet).
	max time.Duration
	// after, when set, begins the starving that long after the fleet's
	// first login attempt instead of at its drain.
	after time.Duration
}

// replayStarved is replay with the fleet starved during its drain: from
// its "draining" line (the sends ended) until "drain ended", the test
// stops the process (SIGSTOP) and lets it go on (SIGCONT) in turn, so
// its readers run late, in short turns, with deliveries waiting in their
// sockets. It returns the result and how many times it stopped the
// fleet.
func replayStarved(t *testing.T, how starve, args ...string) (result, int) {
	t.Helper()
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	cmd := exec.Command(bins["replay"], append([]string{"--metrics", "", "--summary", sumPath, "--log-level", "debug"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	draining, ended := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ended) // at "drain ended", or when the process ends
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		opened := false
		for sc.Scan() {
			line := sc.Text()
			errb.WriteString(line + "\n")
			switch {
			case !opened && how.after > 0 && strings.Contains(line, "login attempt"):
				opened = true
				time.AfterFunc(how.after, func() { close(draining) })
			case !opened && strings.Contains(line, "sends ended: draining"):
				opened = true
				close(draining)
			case opened && strings.Contains(line, "drain ended"):
				for sc.Scan() { // the rest, after the starving ends
					errb.WriteString(sc.Text() + "\n")
				}
				return
			}
		}
		if !opened {
			close(draining)
		}
	})
	stops := 0
	<-draining
starving:
	for end := time.Now().Add(how.max); time.Now().Before(end); {
		select {
		case <-ended:
			break starving
		default:
		}
		if cmd.Process.Signal(syscall.SIGSTOP) != nil {
			break
		}
		stops++
		time.Sleep(how.stop)
		cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(how.run)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	wg.Wait()
	err = cmd.Wait()
	r := result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode(), took: time.Since(began)}
	if err != nil && r.code <= 0 {
		t.Fatalf("run replay: %v\n%s", err, r.stderr)
	}
	r.sum = summaryIfWritten(t, sumPath)
	return r, stops
}

// TestMQTTStarvedDrain: a fleet starved of CPU (stopped for 250 ms out
// of every 255, from a second before its sends end until its drain ends)
// against mosquitto over WebSockets, whose fan-out the fleet cannot know
// (the mqtt profiles' fanout: server, so no delivery is owed to wait
// for): when the drain ends the fleet has counted every PUBLISH mosquitto
// sent it, exactly, by its $SYS counters. The drain ends only once every
// client's reader has read its socket to the end since the quiet began
// (readmark.go). One that ended at the first quiet gap did so, in one
// run of three here, with 128 of 200 readers behind and 69,615 of 91,000
// deliveries counted (the leave read the rest; a loaded host's
// TestMQTTMosquitto/websocket ended 3.6 % short).
func TestMQTTStarvedDrain(t *testing.T) {
	t.Parallel() // its own mosquitto on ports of its own; it starves only its own fleet, and its drain counts exactly however slow
	tcp, ws, _ := startMosquitto(t)
	py := python(t)
	mon := startSysMonitor(t, tcp)
	target := fmt.Sprintf("127.0.0.1:%d", ws)
	capPath := recordThrough(t, target, py, filepath.Join("testdata", "mqttclient.py"), "LISTEN_PORT", "websockets", "20")
	loop := suggestedLoopOf(t, "mqtt-ws", capPath)
	recv0, sent0, own0 := mon.settled(t)
	res, stops := replayStarved(t, starve{stop: 250 * time.Millisecond, run: 5 * time.Millisecond, max: time.Minute, after: 2 * time.Second},
		"--profile", "mqtt-ws", "--capture", capPath, "--target", target,
		"--clients", "200", "--senders", "10", "--loop", loop, "--login-interval", "2ms", "--duration", "3s",
		"--drain-deliveries", "30s")
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 200 || s.MessagesSent == 0 {
		t.Fatalf("logins %d, sent %d\n%s", s.LoginsSucceeded, s.MessagesSent, res.stdout)
	}
	if stops == 0 {
		t.Fatalf("the fleet was never stopped:\n%s", testproc.Tail(res.stderr, 20))
	}
	drained := drainEnd.FindStringSubmatch(res.stderr)
	if drained == nil {
		t.Fatalf("no drain ended line:\n%s", testproc.Tail(res.stderr, 20))
	}
	recv1, sent1, own1 := mon.settled(t)
	brokerSent := sent1 - sent0 - float64(own1-own0)
	t.Logf("stopped %d times; fleet sent %d, received %s by the drain's end (%s readers behind) and %d in all; mosquitto received %v sent %v; took %v",
		stops, s.MessagesSent, drained[1], drained[2], s.MessagesReceived, recv1-recv0, brokerSent, res.took.Round(time.Millisecond))
	if brokerSent != float64(s.MessagesReceived) || drained[1] != fmt.Sprint(s.MessagesReceived) {
		t.Errorf("mosquitto sent %v PUBLISH to the fleet; the fleet received %s by its drain's end (%s readers behind) and %d in all",
			brokerSent, drained[1], drained[2], s.MessagesReceived)
	}
}

// drainEnd is the fleet's debug line at the drain's end: what it had
// received, and how many readers were still behind.
var drainEnd = regexp.MustCompile(`drain ended\s.*"received": (\d+), "readers_behind": (\d+)`)

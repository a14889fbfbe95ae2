package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// writeTwoFlows writes a capture of two acme flows: the first short, the
// second longer (the one replay plays by default); bad makes one of them
// a stream the acme framing refuses (a length over its maximum).
func writeTwoFlows(t *testing.T, badLongest bool) string {
	t.Helper()
	good := [][]byte{acmeMsg(0x01, []byte("alice001")), acmeMsg(0x02, []byte("T0K3N-42"), []byte("hello 00"), make([]byte, 8))}
	bad := [][]byte{{0xff, 0xff, 0x02, 'x'}}
	short, long := good, [][]byte{bad[0], bad[0], bad[0]}
	if !badLongest {
		short, long = bad, append(append([][]byte(nil), good...), good[1], good[1])
	}
	var flows []tcpFlow
	for _, sent := range [][][]byte{short, long} {
		f := tcpFlow{end: time.Second}
		for j, m := range sent {
			f.msgs = append(f.msgs, tcpMsg{time.Duration(j+1) * 100 * time.Millisecond, true, m})
		}
		f.msgs = append(f.msgs, tcpMsg{150 * time.Millisecond, false, acmeMsg(0x81, []byte("T0K3N-42"))})
		flows = append(flows, f)
	}
	return writeTCPFlows(t, "two.pcap", 9000, flows...)
}

// TestProfileCheckJudgesReplaysFlow: on a two-flow capture, inspect
// --profile marks the flow replay plays by default (the longest), and
// profile check judges that one: ok when it fits, and when only the other
// fits, a failure that names it.
func TestProfileCheckJudgesReplaysFlow(t *testing.T) {
	acme := "../../examples/profiles/acme-binary.yaml"
	fits := writeTwoFlows(t, false)
	out, err := exec.Command(bins["replay"], "inspect", "--profile", acme, fits).CombinedOutput()
	if err != nil || strings.Count(string(out), "take this flow by default") != 1 || !strings.Contains(string(out), "flow #1") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	if out, err := execReplay("profile", "check", acme, "--capture", fits); err != nil || !strings.Contains(out, "ok for flow #1") {
		t.Fatalf("check of a fitting default flow: %v\n%s", err, out)
	}
	other := writeTwoFlows(t, true)
	out2, err := execReplay("profile", "check", acme, "--capture", other)
	if err == nil || !strings.Contains(out2, "does not fit flow #1") || !strings.Contains(out2, "it fits flow #0") {
		t.Fatalf("check where only the shorter flow fits: %v\n%s", err, out2)
	}
	if out, err := execReplay("profile", "check", acme, "--capture", other, "--flow", "0"); err != nil || !strings.Contains(out, "ok for flow #0") {
		t.Fatalf("check --flow 0: %v\n%s", err, out)
	}
}

// TestInspectFramesWithProfile: inspect --frames --profile lists the
// flow's messages as the profile cuts them, not the profile's report.
func TestInspectFramesWithProfile(t *testing.T) {
	out, err := execReplay("inspect", "--profile", "nats", "--frames", "testdata/profiles/nats.pcap")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "26 client messages") || !strings.Contains(out, `pub              60  "PUB lobby 44\r\nhello 0 from rec-user-01`) || strings.Contains(out, "suggested --loop") {
		t.Fatalf("inspect --frames --profile nats:\n%s", out)
	}
}

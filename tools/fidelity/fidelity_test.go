package main

import (
	"bytes"
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	recordedTCP = "../../captures/vr-session.pcap"
	recordedUDP = "../../captures/vr-session-udp.pcap"
)

// readRecorded reads a bundled capture once for all the tests (a read
// takes seconds under -race); the tests only read it.
var readRecorded = sync.OnceValue(func() map[string]*capture.Capture {
	m := map[string]*capture.Capture{}
	for _, path := range []string{recordedTCP, recordedUDP} {
		c, err := capture.ReadFile(path, capture.Options{Framer: profile.RepriseFramer(0), ServerPort: wire.DefaultPort})
		if err != nil {
			panic(err) // the repository's own capture
		}
		m[path] = c
	}
	return m
})

// recorded is the longest flow of a bundled capture.
func recorded(t *testing.T, path string) *capture.Flow {
	t.Helper()
	return readRecorded()[path].Longest()
}

// segment is what a test writes as one TCP segment: some frames' bytes,
// at a time.
type segment struct {
	at   time.Time
	data []byte
}

// writeTCP writes a capture of one client's connection carrying segs and
// reads it back as the tool reads a replay.
func writeTCP(t *testing.T, segs []segment) []*capture.Flow {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replay.pcap")
	w, err := capture.Create(path, layers.LinkTypeEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	client, server := netip.MustParseAddrPort("127.0.0.1:50000"), netip.MustParseAddrPort("127.0.0.1:7400")
	conn, err := w.OpenTCP(segs[0].at, client, server)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := conn.Data(s.at, true, s.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Close(segs[len(segs)-1].at, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := capture.ReadFile(path, capture.Options{Framer: profile.RepriseFramer(0), ServerPort: wire.DefaultPort})
	if err != nil {
		t.Fatal(err)
	}
	return c.Flows
}

// played is the recorded script as a replay sends it: the frames from the
// join to before the leave, then a leave of the fleet's own.
func played(fl *capture.Flow) []capture.Frame {
	i := slices.IndexFunc(fl.ClientFrames, func(f capture.Frame) bool { return kind(f) == wire.TypeJoin })
	j := slices.IndexFunc(fl.ClientFrames, func(f capture.Frame) bool { return kind(f) == wire.TypeLeave })
	out := slices.Clone(fl.ClientFrames[i:j])
	leave := fl.ClientFrames[j]
	leave.Time = out[len(out)-1].Time.Add(time.Millisecond)
	return append(out, leave)
}

// TestCompareTCPSegments writes the bundled recording's client stream cut
// into segments in several ways and checks the gap errors the tool finds
// against the ones the timestamps written imply: the frames are cut from
// the reassembled stream (a frame over two segments is one frame, timed
// by the segment that completed it; two frames in one segment share its
// time), whatever the packets.
func TestCompareTCPSegments(t *testing.T) {
	fl := recorded(t, recordedTCP)
	s, err := newSchedule(fl.ClientFrames, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The first 1,500 frames (15 s) and the leave: enough of every kind
	// of gap, and quick under -race.
	script := played(fl)
	script = append(script[:1500:1500], script[len(script)-1])
	first := slices.IndexFunc(script, func(f capture.Frame) bool { return kind(f) == wire.TypeSend })
	// Each case gives the segments and when each frame of the script
	// should be seen complete.
	for _, tt := range []struct {
		name string
		cut  func(fr []capture.Frame) (segs []segment, seen []time.Time)
	}{
		{"one frame a segment", func(fr []capture.Frame) ([]segment, []time.Time) {
			var segs []segment
			var seen []time.Time
			for _, f := range fr {
				segs = append(segs, segment{f.Time, f.Bytes})
				seen = append(seen, f.Time)
			}
			return segs, seen
		}},
		{"each frame split over two segments 50us apart", func(fr []capture.Frame) ([]segment, []time.Time) {
			var segs []segment
			var seen []time.Time
			for _, f := range fr {
				h := len(f.Bytes) / 2
				segs = append(segs, segment{f.Time, f.Bytes[:h]}, segment{f.Time.Add(50 * time.Microsecond), f.Bytes[h:]})
				seen = append(seen, f.Time.Add(50*time.Microsecond))
			}
			return segs, seen
		}},
		{"two frames a segment, at the second's time", func(fr []capture.Frame) ([]segment, []time.Time) {
			var segs []segment
			var seen []time.Time
			for i := 0; i < len(fr); i += 2 {
				if i+1 == len(fr) {
					segs = append(segs, segment{fr[i].Time, fr[i].Bytes})
					seen = append(seen, fr[i].Time)
					break
				}
				at := fr[i+1].Time
				segs = append(segs, segment{at, append(slices.Clone(fr[i].Bytes), fr[i+1].Bytes...)})
				seen = append(seen, at, at)
			}
			return segs, seen
		}},
		{"a frame's tail in the next frame's segment", func(fr []capture.Frame) ([]segment, []time.Time) {
			// Segment k holds the end of frame k-1 and the start of
			// frame k: each frame completes with the next one's segment.
			var segs []segment
			var seen []time.Time
			var carry []byte
			for i, f := range fr {
				h := len(f.Bytes) / 2
				segs = append(segs, segment{f.Time, append(carry, f.Bytes[:h]...)})
				carry = slices.Clone(f.Bytes[h:])
				if i > 0 {
					seen = append(seen, f.Time)
				}
			}
			last := fr[len(fr)-1].Time.Add(time.Millisecond)
			segs = append(segs, segment{last, carry})
			return segs, append(seen, last)
		}},
		{"late by 3 ms from the 100th send on", func(fr []capture.Frame) ([]segment, []time.Time) {
			var segs []segment
			var seen []time.Time
			for i, f := range fr {
				at := f.Time
				if i >= first+100 {
					at = at.Add(3 * time.Millisecond)
				}
				segs = append(segs, segment{at, f.Bytes})
				seen = append(seen, at)
			}
			return segs, seen
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			segs, seen := tt.cut(script)
			flows := writeTCP(t, segs)
			if len(flows) != 1 || len(flows[0].ClientFrames) != len(script) {
				t.Fatalf("read back %d flows, want 1 with %d frames", len(flows), len(script))
			}
			got, ok := compareClient(s, flows[0].ClientFrames)
			if !ok {
				t.Fatal("no send found")
			}
			// The script's frames from its first send, and the leave.
			var want []int64
			var lates []int64
			for i := first; i < len(script)-1; i++ {
				late := int64(seen[i].Sub(seen[first]) - (s.at[i] - s.at[first]))
				lates = append(lates, late)
				if i > first {
					want = append(want, int64(seen[i].Sub(seen[i-1])-(s.at[i]-s.at[i-1])))
				}
			}
			if !slices.Equal(got.errs, want) {
				t.Errorf("%d gap errors, want %d; first differing: %s", len(got.errs), len(want), firstDiff(got.errs, want))
			}
			if wantDrift := lates[len(lates)-1] - slices.Min(lates); got.drift != wantDrift {
				t.Errorf("drift %v, want %v", time.Duration(got.drift), time.Duration(wantDrift))
			}
			// The median lateness of the frames of the last second.
			var end []int64
			for i := first; i < len(script)-1; i++ {
				if seen[len(script)-2].Sub(seen[i]) <= time.Second {
					end = append(end, lates[i-first]-slices.Min(lates))
				}
			}
			slices.Sort(end)
			if want := end[(len(end)-1)/2]; got.endLate != want {
				t.Errorf("lateness over the last second %v, want %v", time.Duration(got.endLate), time.Duration(want))
			}
			if got.matched != len(script)-1-first || got.unmatched != 1 || got.sizeDiff != 0 {
				t.Errorf("matched %d unmatched %d size_diff %d, want %d, 1 (the leave), 0", got.matched, got.unmatched, got.sizeDiff, len(script)-1-first)
			}
		})
	}
}

func firstDiff(a, b []int64) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return time.Duration(a[i]).String() + " at " + time.Duration(b[i]).String() + "'s place"
		}
	}
	return "none (lengths differ)"
}

// TestCompareRecordingWithItself reads each bundled capture as if it were
// a replay of its longest flow: that flow keeps its schedule exactly (every
// gap error 0, no drift), and the capture's other client, which played
// another script, does not.
func TestCompareRecordingWithItself(t *testing.T) {
	for _, path := range []string{recordedTCP, recordedUDP} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			c := readRecorded()[path]
			longest := c.Longest()
			s, err := newSchedule(longest.ClientFrames, 1)
			if err != nil {
				t.Fatal(err)
			}
			res, err := compare(s, []*capture.Flow{longest})
			if err != nil {
				t.Fatal(err)
			}
			if want := len(s.kinds) - s.firstSend - 1; res.gaps != want || res.clients != 1 {
				t.Errorf("%d clients, %d gaps; want 1, %d (every gap from the first send)", res.clients, res.gaps, want)
			}
			if res.p50 != 0 || res.p99 != 0 || res.within1 != 1 || res.driftMax != 0 {
				t.Errorf("against itself: %s", res.row("self"))
			}
			var other *capture.Flow
			for _, f := range c.Flows {
				if f != longest && f.ClientCount > 0 {
					other = f
				}
			}
			res, err = compare(s, []*capture.Flow{other})
			if err != nil {
				t.Fatal(err)
			}
			if res.p99 == 0 || res.within1 == 1 {
				t.Errorf("another client's flow against this schedule: %s", res.row("other"))
			}
		})
	}
}

// TestSpeed: at --speed 2 the recorded gaps count half, so the recording
// against its own schedule at speed 2 is off by half of every gap.
func TestSpeed(t *testing.T) {
	fl := recorded(t, recordedTCP)
	s, err := newSchedule(fl.ClientFrames, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := compareClient(s, fl.ClientFrames)
	i := slices.IndexFunc(fl.ClientFrames, func(f capture.Frame) bool { return kind(f) == wire.TypeSend })
	for k, e := range got.errs[:50] {
		gap := fl.ClientFrames[i+k+1].Time.Sub(fl.ClientFrames[i+k].Time)
		if d := time.Duration(e) - gap/2; d < -1 || d > 1 {
			t.Fatalf("gap %d of %v: error %v, want half of it", k, gap, time.Duration(e))
		}
	}
}

// TestReceiveOnlyAndEmpty: a client that only joined and sent heartbeats
// is counted as idle, and a capture with nothing to compare is an error.
func TestReceiveOnlyAndEmpty(t *testing.T) {
	fl := recorded(t, recordedTCP)
	s, err := newSchedule(fl.ClientFrames, 1)
	if err != nil {
		t.Fatal(err)
	}
	var segs []segment
	for _, f := range fl.ClientFrames {
		if kind(f) == wire.TypeJoin || kind(f) == wire.TypeHeartbeat {
			segs = append(segs, segment{f.Time, f.Bytes})
		}
	}
	res, err := compare(s, writeTCP(t, segs))
	if err == nil || res.idle != 1 || res.clients != 0 {
		t.Errorf("receive-only: idle %d clients %d err %v; want 1, 0 and an error", res.idle, res.clients, err)
	}
	if _, err := newSchedule(fl.ClientFrames[len(fl.ClientFrames)-3:], 1); err == nil {
		t.Error("a recording with no join: no error")
	}
}

// TestReplayGolden runs the tool on captures tcpdump took of real replays
// against the relay (testdata/README.md says how; each file is named
// replay-TRANSPORT-PORT.pcap) and compares its rows with the golden
// files: the frames the fleet sent cut from real segmentation, the UDP
// login's own heartbeats before the first send and each client's leave
// after the script.
func TestReplayGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "replay-*-*.pcap"))
	if err != nil || len(files) < 2 {
		t.Fatalf("testdata holds %d replay captures (%v), want one per transport", len(files), err)
	}
	for _, pcap := range files {
		name := strings.TrimSuffix(filepath.Base(pcap), ".pcap")
		t.Run(name, func(t *testing.T) {
			parts := strings.Split(name, "-") // replay, transport, port
			recording := map[string]string{"tcp": recordedTCP, "udp": recordedUDP}[parts[1]]
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"--recording", recording, "--server-port", parts[2], "--label", parts[1], pcap}, &out, &errOut)
			if err != nil {
				t.Fatalf("%v (%s)", err, errOut.String())
			}
			testproc.Golden(t, filepath.Join("testdata", name+".golden"), out.Bytes(), *update, "-update")
			// Every client compared, none left out, and only each
			// client's leave after the script.
			f := strings.Split(strings.Split(out.String(), "\n")[1], "\t")
			if f[2] == "0" || f[12] != f[2] || f[14] != "0" || f[15] != "0" {
				t.Errorf("clients %s unmatched %s idle %s broken %s; want some, one leave each, 0, 0", f[2], f[12], f[14], f[15])
			}
		})
	}
}

// TestUsage: a run that measured nothing says why in one error.
func TestUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "no replay capture given"},
		{[]string{"--server-port", "70000", "x.pcap"}, "--server-port 70000"},
		{[]string{"--recording", "testdata/none.pcap", "x.pcap"}, "recording"},
		{[]string{"--recording", recordedTCP, "--flow", "7", "x.pcap"}, "no flow 7"},
		{[]string{"--recording", recordedTCP, recordedTCP + ".none"}, "replay capture"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one saying %q", tt.args, err, tt.want)
		}
	}
}

// TestCutCaptureWarns: a replay capture cut short (tcpdump killed
// mid-write) is measured over what it holds, and the tool says so on
// stderr: a row over part of a capture must not pass for the whole.
func TestCutCaptureWarns(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "replay-tcp-*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no TCP replay capture in testdata (%v)", err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	if err := os.WriteFile(cut, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	port := strings.TrimSuffix(strings.Split(filepath.Base(files[0]), "-")[2], ".pcap")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--recording", recordedTCP, "--server-port", port, cut}, &out, &errOut); err != nil {
		t.Fatalf("%v (%s)", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "fidelity: warning: "+cut+": file ends inside packet") {
		t.Errorf("stderr %q: want a warning that the capture was cut short", errOut.String())
	}
}

package capture

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
	"github.com/reprise-harness/reprise/internal/wire"
)

// bundled are the captures the repository ships.
var bundled = []string{"../../captures/vr-session.pcap", "../../captures/vr-session-udp.pcap"}

// TestReorderedBundledCaptures: the bundled captures reordered like a
// multi-queue NIC (capturetest.Reorder; `go run ./testdata/reorder` writes
// the same files) read as the originals: the same flows, every frame equal
// to the original's, and offsets that never go backwards. The stalled
// queue holds packets past the time-order window, so they come late and
// take the time of the packet before them: TCP segments wait in
// reassembly, datagrams go back in order by their trace stamps (the other
// frames of a UDP flow are then only the same set).
func TestReorderedBundledCaptures(t *testing.T) {
	nics := map[string]capturetest.NIC{
		"nic":   {Seed: 1},
		"stall": {Seed: 2, Stall: 1500 * time.Millisecond},
	}
	for _, path := range bundled {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		orig, err := Read(bytes.NewReader(data), rep(Options{}))
		if err != nil {
			t.Fatal(err)
		}
		for name, nic := range nics {
			t.Run(fmt.Sprintf("%s/%s", path[len("../../captures/"):], name), func(t *testing.T) {
				var buf bytes.Buffer
				overtaken, err := capturetest.Reorder(bytes.NewReader(data), &buf, nic)
				if err != nil {
					t.Fatal(err)
				}
				if overtaken < 100 {
					t.Fatalf("only %d packets overtaken", overtaken)
				}
				got, err := Read(&buf, rep(Options{}))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d packets overtaken; warnings %q", overtaken, got.Warnings)
				if len(got.Flows) != len(orig.Flows) {
					t.Fatalf("%d flows, the original has %d", len(got.Flows), len(orig.Flows))
				}
				for i, f := range got.Flows {
					o := orig.Flows[i]
					wantNotes := len(o.Notes)
					if f.Transport == UDP && nic.Stall > 0 {
						wantNotes += 2 // each way: "came out of their sender's order (by the trace stamp)"
					}
					if f.Client != o.Client || f.Server != o.Server || len(f.Notes) != wantNotes {
						t.Errorf("flow %d: %s with notes %q, the original %s with %q", i, f, f.Notes, o, o.Notes)
					}
					if f.Transport == UDP && nic.Stall > 0 {
						sameUDP(t, fmt.Sprintf("flow %d client", i), f.ClientFrames, o.ClientFrames)
						sameUDP(t, fmt.Sprintf("flow %d server", i), f.ServerFrames, o.ServerFrames)
					} else {
						equalFrames(t, fmt.Sprintf("flow %d client", i), f.ClientFrames, frameBytes(o.ClientFrames))
						equalFrames(t, fmt.Sprintf("flow %d server", i), f.ServerFrames, frameBytes(o.ServerFrames))
					}
					forward(t, f)
				}
			})
		}
	}
}

// sameUDP checks that got holds want's frames, each sender's traced ones
// in want's order.
func sameUDP(tb testing.TB, what string, got, want []Frame) {
	tb.Helper()
	traced := func(fs []Frame) (bySender map[string][]string, all map[string]int) {
		all, bySender = map[string]int{}, map[string][]string{}
		var f wire.Frame
		for _, fr := range fs {
			all[string(fr.Bytes)]++
			if _, err := wire.Decode(fr.Bytes, len(fr.Bytes), &f); err == nil && f.HasTrace {
				k := f.Type.String() + " " + string(f.User)
				bySender[k] = append(bySender[k], string(fr.Bytes))
			}
		}
		return bySender, all
	}
	g, gAll := traced(got)
	w, wAll := traced(want)
	if !maps.Equal(gAll, wAll) {
		tb.Errorf("%s: %d frames, not the original's %d", what, len(got), len(want))
	}
	if len(w) == 0 || !maps.EqualFunc(g, w, slices.Equal) {
		tb.Errorf("%s: traced frames not in their senders' order", what)
	}
}

// forward checks that a flow's offsets never go backwards, either way.
func forward(tb testing.TB, f *Flow) {
	tb.Helper()
	for _, frs := range [][]Frame{f.ClientFrames, f.ServerFrames} {
		for i, fr := range frs {
			if fr.Offset < 0 || (i > 0 && fr.Offset < frs[i-1].Offset) {
				tb.Fatalf("flow %s: frame %d (packet %d) at %v, the frame before at %v", f, i, fr.Packet, fr.Offset, frs[max(i-1, 0)].Offset)
			}
		}
	}
}

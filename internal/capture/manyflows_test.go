package capture

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestWriteFlows: the many-flow generator writes flows the reader takes
// whole: a join, the sends and a leave each, a joined reply.
func TestWriteFlows(t *testing.T) {
	var buf bytes.Buffer
	if _, err := capturetest.WriteFlows(&buf, capturetest.Flows{N: 20, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	c, err := Read(&buf, rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Flows) != 20 || len(c.Warnings) > 0 {
		t.Fatalf("%d flows, warnings %q", len(c.Flows), c.Warnings)
	}
	for _, f := range c.Flows {
		if len(f.ClientFrames) != 5 || kind(f.ClientFrames[0]) != wire.TypeJoin || kind(f.ClientFrames[4]) != wire.TypeLeave ||
			len(f.ServerFrames) != 1 || kind(f.ServerFrames[0]) != wire.TypeJoined || len(f.Notes) > 0 {
			t.Fatalf("flow %s: client %v, server %v, notes %q", f, frameBytes(f.ClientFrames), frameBytes(f.ServerFrames), f.Notes)
		}
		if ok, why := Inspection.Usable(f); !ok {
			t.Fatalf("flow %s: %s", f, why)
		}
	}
}

// TestManyFlowsHeap logs what one short flow costs while reading (the
// figure behind flowCost).
func TestManyFlowsHeap(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	var buf bytes.Buffer
	if _, err := capturetest.WriteFlows(&buf, capturetest.Flows{N: n, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := Read(&buf, rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	frames := 0
	for _, f := range c.Flows {
		for _, fr := range append(f.ClientFrames, f.ServerFrames...) {
			frames += len(fr.Bytes) + frameOverhead
		}
	}
	perFlow := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(n)
	t.Logf("%d flows: %d bytes per flow held after reading, %d of them frames", n, perFlow, frames/n)
	runtime.KeepAlive(c)
}

// TestMemoryBudget: a capture of more flows than the budget holds stops
// with one *MemoryError naming the packet (no partial capture, no
// silently dropped frames); a budget it fits reads every flow.
func TestMemoryBudget(t *testing.T) {
	var buf bytes.Buffer
	if _, err := capturetest.WriteFlows(&buf, capturetest.Flows{N: 2000, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	c, err := Read(bytes.NewReader(data), rep(Options{MaxMemory: 4 << 20}))
	var me *MemoryError
	if !errors.As(err, &me) || c != nil {
		t.Fatalf("capture %v, error %v; want a MemoryError and no capture", c != nil, err)
	}
	if me.Packet < 100 || me.Flows < 100 || me.Flows >= 2000 || !strings.Contains(err.Error(), fmt.Sprintf("capture packet %d: ", me.Packet)) {
		t.Errorf("error %q (packet %d, %d flows)", err, me.Packet, me.Flows)
	}
	c, err = Read(bytes.NewReader(data), rep(Options{MaxMemory: 64 << 20}))
	if err != nil || len(c.Flows) != 2000 {
		t.Fatalf("%v", err)
	}
}

// TestSelect: a read that selects one flow holds that flow's frames only;
// the others are found and counted; the selected flow equals an
// unselected read's.
func TestSelect(t *testing.T) {
	var buf bytes.Buffer
	if _, err := capturetest.WriteFlows(&buf, capturetest.Flows{N: 50, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	all, err := Read(bytes.NewReader(buf.Bytes()), rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	want := all.Flows[17]
	one, err := Read(bytes.NewReader(buf.Bytes()), rep(Options{Select: func(a, b netip.AddrPort) bool {
		return (a == want.Client && b == want.Server) || (b == want.Client && a == want.Server)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Flows) != 50 {
		t.Fatalf("%d flows", len(one.Flows))
	}
	for i, f := range one.Flows {
		if f.ClientCount != want.ClientCount || f.ServerCount != want.ServerCount {
			t.Fatalf("flow %d: counted %d and %d frames, want %d and %d", i, f.ClientCount, f.ServerCount, want.ClientCount, want.ServerCount)
		}
		if i != 17 && len(f.ClientFrames)+len(f.ServerFrames) > 0 {
			t.Fatalf("flow %d kept frames", i)
		}
	}
	equalFrames(t, "client", one.Flows[17].ClientFrames, frameBytes(want.ClientFrames))
	equalFrames(t, "server", one.Flows[17].ServerFrames, frameBytes(want.ServerFrames))
}

// TestSummarizeHoldsLittlePerFlow: a read as inspect does it
// (Options.Summarize) of 5,000 flows holds under heldPerFlow each once
// done (the fuzz target checks the same of every input), and its
// summary equals that of a read that keeps every frame.
func TestSummarizeHoldsLittlePerFlow(t *testing.T) {
	var buf bytes.Buffer
	if _, err := capturetest.WriteFlows(&buf, capturetest.Flows{N: 5000, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	held, flows := summarizedHeld(t, buf.Bytes())
	t.Logf("a summarising read of %d flows holds %d bytes beside what inspect prints: %d per flow (bound %d + %d per flow)", flows, held, held/int64(max(flows, 1)), heldBase, heldPerFlow)
	full, err := Read(bytes.NewReader(buf.Bytes()), rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Read(bytes.NewReader(buf.Bytes()), summarizing(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := inspect(full).WriteJSON(&a); err != nil {
		t.Fatal(err)
	}
	if err := Inspection.Write(&b, sum, -1, nil, true); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("summarised read's summary (%d bytes) differs from the full read's (%d bytes)", b.Len(), a.Len())
	}
}

// TestSummarizeEqualsFull: on every capture in testdata, inspect's
// summary from a summarising read equals the one from a read that keeps
// every frame.
func TestSummarizeEqualsFull(t *testing.T) {
	var paths []string
	for _, g := range []string{"testdata/*.pcap*", "testdata/realtool/*.pcap*", "testdata/hostile/*", "../../captures/*.pcap*"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) < 10 {
		t.Fatalf("only %d captures in testdata", len(paths))
	}
	for _, p := range paths {
		full, ferr := ReadFile(p, rep(Options{}))
		sum, serr := ReadFile(p, summarizing(Options{}))
		if (ferr == nil) != (serr == nil) || (full == nil) != (sum == nil) {
			t.Fatalf("%s: full read %v, summarising read %v", p, ferr, serr)
		}
		if full == nil {
			continue
		}
		var a, b bytes.Buffer
		if err := inspect(full).WriteText(&a); err != nil {
			t.Fatal(err)
		}
		if err := Inspection.Write(&b, sum, -1, nil, false); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Errorf("%s: summaries differ:\nfull:\n%s\nsummarised:\n%s", p, a.String(), b.String())
		}
	}
}

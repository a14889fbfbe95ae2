package capture

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/wire"
)

// outOfOrderFlows writes n TCP flows whose first data segment is missing,
// so every flow buffers a page out of order until reassembly gives up.
func outOfOrderFlows(tb testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, PCAP, layers.LinkTypeRaw, DefaultSnaplen)
	if err != nil {
		tb.Fatal(err)
	}
	payload := wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: make([]byte, 1200)})
	for i := 0; i < n; i++ {
		b := newTCP(fmt.Sprintf("10.%d.%d.1:%d", i>>16&255, i>>8&255, 1024+i&255), "10.0.0.1:7400", uint32(i))
		b.handshake(tb)
		b.seq[0] += 500 // the segment before this one was not captured
		b.send(tb, 0, payload)
		for _, p := range b.pkts {
			if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: p.t}, p.ip); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestManyOutOfOrderFlows checks that reassembly buffers stay within the
// memory budget however many flows wait for missing bytes.
func TestManyOutOfOrderFlows(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	data := outOfOrderFlows(t, n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// The budget for flows and frames is half of MaxMemory: 20,000 flows
	// at tcpFlowCost (80 MiB) and their 1.2 KB frames fit 256 MiB; at 200
	// MiB the final flush ran out of it and, before that was an error,
	// 2,383 flows silently lost their frames.
	c, err := Read(bytes.NewReader(data), rep(Options{MaxMemory: 256 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(c.Flows) != n {
		t.Fatalf("%d flows, want %d (warnings %q)", len(c.Flows), n, c.Warnings)
	}
	// Every flow's frames after the gap are still found once reassembly
	// gives up waiting.
	for _, f := range c.Flows {
		if len(f.ClientFrames) == 0 || !f.Resynced {
			t.Fatalf("flow %s: %d frames, resynced %v", f, len(f.ClientFrames), f.Resynced)
		}
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perFlow := grown / int64(n)
	t.Logf("%d out-of-order flows: heap grew %d MiB (%d bytes per flow, frames included)", n, grown>>20, perFlow)
	if perFlow > 4<<10 {
		t.Fatalf("%d bytes per flow", perFlow)
	}
}

// TestBudgetReachedInFinalFlush: a budget that the frames handed on by
// the final flush exceed is an error naming it, not a capture whose later
// flows silently hold no frames.
func TestBudgetReachedInFinalFlush(t *testing.T) {
	// Reading holds each live flow's state and no frames (every flow
	// waits for its gap): a budget with room for that and less than one
	// frame more is reached when the final flush hands the frames on
	// (before the flows' state is released).
	n := 2000
	data := outOfOrderFlows(t, n)
	_, err := Read(bytes.NewReader(data), rep(Options{MaxMemory: 2 * (int64(n)*tcpFlowCost + frameOverhead)}))
	var me *MemoryError
	if !errors.As(err, &me) {
		t.Fatalf("err %v, want a *MemoryError", err)
	}
}

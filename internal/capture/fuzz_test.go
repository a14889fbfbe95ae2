package capture

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
)

var updateHostile = flag.Bool("update-hostile", false, "rewrite testdata/hostile and the fuzz seeds")

// readWithDeadline reads a capture in a goroutine and fails the test if it
// takes over 2 s, so a loop fails like a panic.
func readWithDeadline(tb testing.TB, data []byte) (*Capture, error) {
	tb.Helper()
	type result struct {
		c   *Capture
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Read(bytes.NewReader(data), rep(Options{MaxMemory: fuzzMemory}))
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		return r.c, r.err
	case <-time.After(2 * time.Second):
		tb.Fatalf("reading a %d-byte capture took over 2 s", len(data))
		return nil, nil
	}
}

// fuzzMemory is the reading budget of the fuzz and hostile tests.
const fuzzMemory = 64 << 20

// fuzzMemCeiling fails a fuzz input whose reading allocates more: what a
// capture costs must depend on its packets, never on the values in them
// (a timestamp, a length field).
const fuzzMemCeiling = 256 << 20

func FuzzReadCapture(f *testing.F) {
	for _, tc := range hostileCases {
		f.Add(tc.file)
	}
	for _, tc := range mendedCases(f) {
		f.Add(tc.file)
	}
	// Captures by real tools: timestamps from 2100 and 1970, a port reused
	// after an RST, duplicated datagrams, a mid-connection start.
	real, err := filepath.Glob("testdata/realtool/*.pcap*")
	if err != nil || len(real) == 0 {
		f.Fatalf("no real-tool captures: %v", err)
	}
	for _, p := range real {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	b := tcpSession(f, cliAddr, srvAddr, 0xFFFFFF00, nil)
	for _, format := range []Format{PCAP, PCAPNG} {
		data, err := os.ReadFile(writeCapture(f, format, layers.LinkTypeEthernet, b.pkts))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := readWithDeadline(t, data)
		if c != nil {
			// The summary must be writable, and small, for any input.
			var js bytes.Buffer
			if err := inspect(c).WriteJSON(&js); err != nil {
				t.Fatalf("inspect JSON: %v", err)
			}
			if js.Len() > 64*len(data)+(1<<20) {
				t.Fatalf("inspect JSON of %d bytes for a %d-byte capture", js.Len(), len(data))
			}
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > fuzzMemCeiling {
			t.Fatalf("reading a %d-byte capture allocated %d MiB (ceiling %d MiB)", len(data), alloc>>20, fuzzMemCeiling>>20)
		}
		if err == nil && c == nil {
			t.Fatal("nil capture without an error")
		}
		if c == nil {
			return
		}
		// Per-flow state is charged to the budget: no input holds more
		// flows than it pays for.
		if most := int(fuzzMemory / 2 / udpFlowCost); len(c.Flows) > most {
			t.Fatalf("%d flows under a budget for %d", len(c.Flows), most)
		}
		for _, fl := range c.Flows {
			for _, fr := range append(fl.ClientFrames, fl.ServerFrames...) {
				if len(fr.Bytes) < 5 || fr.Packet < 1 || fr.Packet > c.Packets {
					t.Fatalf("bad frame: %d bytes, packet %d of %d", len(fr.Bytes), fr.Packet, c.Packets)
				}
			}
		}
		summarizedHeld(t, data)
	})
}

// Bounds of what a read as inspect does it (Options.Summarize) holds once
// done: heldPerFlow a flow, beside what inspect prints of it (notes,
// users, rooms, rates), and heldBase in all.
const (
	heldPerFlow = 1 << 10
	heldBase    = 256 << 10
)

// summarizedHeld reads data as inspect does and fails t if what the
// capture holds after is more than heldPerFlow per flow: a flow's
// reassembly state and frames are released, whatever the input.
func summarizedHeld(t *testing.T, data []byte) (held int64, flows int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, _ := Read(bytes.NewReader(data), summarizing(Options{MaxMemory: fuzzMemory}))
	runtime.GC()
	runtime.ReadMemStats(&after)
	if c == nil {
		return 0, 0
	}
	printed := int64(0)
	for _, fl := range c.Flows {
		if len(fl.ClientFrames)+len(fl.ServerFrames) > 0 || fl.Summary == nil {
			t.Fatalf("flow %s: %d frames kept, summary %v: a summarising read keeps none", fl, len(fl.ClientFrames)+len(fl.ServerFrames), fl.Summary != nil)
		}
		for _, s := range fl.Notes {
			printed += int64(len(s)) + 16
		}
		printed += Inspection.Printed(fl.Summary)
	}
	for _, w := range c.Warnings {
		printed += int64(len(w)) + 16
	}
	held = int64(after.HeapAlloc) - int64(before.HeapAlloc) - printed
	if bound := heldBase + int64(len(c.Flows))*heldPerFlow; held > bound {
		t.Fatalf("a summarising read of %d flows holds %d bytes beside what inspect prints, over %d", len(c.Flows), held, bound)
	}
	runtime.KeepAlive(c)
	return held, len(c.Flows)
}

// TestWriteCorpus writes the hostile corpus and fuzz seeds to testdata when
// run with -update-hostile.
func TestWriteCorpus(t *testing.T) {
	if !*updateHostile {
		t.Skip("run with -update-hostile to rewrite testdata/hostile and testdata/fuzz")
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll("testdata/hostile", 0o755))
	must(os.MkdirAll("testdata/fuzz/FuzzReadCapture", 0o755))
	seed := func(name string, data []byte) {
		must(os.WriteFile(filepath.Join("testdata/fuzz/FuzzReadCapture", name), []byte("go test fuzz v1\n[]byte("+quoteGo(data)+")\n"), 0o644))
	}
	for _, tc := range hostileCases {
		must(os.WriteFile(filepath.Join("testdata/hostile", tc.name), tc.file, 0o644))
		seed(tc.name, tc.file)
	}
	for _, tc := range mendedCases(t) {
		must(os.WriteFile(filepath.Join("testdata/hostile", tc.name), tc.file, 0o644))
		seed(tc.name, tc.file)
	}
	b := tcpSession(t, cliAddr, srvAddr, 0xFFFFFF00, nil)
	for _, format := range []Format{PCAP, PCAPNG} {
		data, err := os.ReadFile(writeCapture(t, format, layers.LinkTypeLinuxSLL, b.pkts))
		must(err)
		seed([]string{"session_pcap", "session_pcapng"}[format], data)
	}
}

func quoteGo(b []byte) string {
	var s bytes.Buffer
	s.WriteByte('"')
	for _, c := range b {
		s.WriteString(`\x`)
		s.WriteByte("0123456789abcdef"[c>>4])
		s.WriteByte("0123456789abcdef"[c&15])
	}
	s.WriteByte('"')
	return s.String()
}

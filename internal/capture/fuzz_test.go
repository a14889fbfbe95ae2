package capture

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
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
		c, err := Read(bytes.NewReader(data), Options{MaxMemory: 64 << 20})
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

func FuzzReadCapture(f *testing.F) {
	for _, tc := range hostileCases {
		f.Add(tc.file)
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
		c, err := readWithDeadline(t, data)
		if err == nil && c == nil {
			t.Fatal("nil capture without an error")
		}
		if c == nil {
			return
		}
		for _, fl := range c.Flows {
			for _, fr := range append(fl.ClientFrames, fl.ServerFrames...) {
				if len(fr.Bytes) < 5 || fr.Packet < 1 || fr.Packet > c.Packets {
					t.Fatalf("bad frame: %d bytes, packet %d of %d", len(fr.Bytes), fr.Packet, c.Packets)
				}
			}
		}
	})
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

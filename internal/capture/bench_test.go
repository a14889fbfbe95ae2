package capture

import (
	"os"
	"testing"
)

// BenchmarkReadBundledCapture reads captures/vr-session.pcap (60 s of the
// sample client and a peer over TCP).
func BenchmarkReadBundledCapture(b *testing.B) {
	const path = "../../captures/vr-session.pcap"
	st, err := os.Stat(path)
	if err != nil {
		b.Skip("no bundled capture")
	}
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		c, err := ReadFile(path, rep(Options{}))
		if err != nil || len(c.Flows) == 0 {
			b.Fatal(err)
		}
	}
}

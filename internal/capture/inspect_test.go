package capture

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

func TestInspect(t *testing.T) {
	b := tcpSession(t, cliAddr, srvAddr, 1000, nil)
	c := readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, b.pkts))
	s := Inspect(c)
	f := s.Flows[0]
	if !f.Longest || f.ClientFrames != 12 || f.FramesByKind["send"] != 9 || f.FramesByKind["joined"] != 1 {
		t.Fatalf("summary %+v", f)
	}
	if strings.Join(f.Users, ",") != "alice" || strings.Join(f.Rooms, ",") != "lobby" {
		t.Fatalf("users %q rooms %q", f.Users, f.Rooms)
	}
	// The joined reply goes out right after the first client segment; the
	// first send completes after it.
	if f.LoginEndFrame != 1 || f.LoginEndS <= 0 {
		t.Fatalf("login end frame %d at %v", f.LoginEndFrame, f.LoginEndS)
	}
	total := 0
	for _, n := range f.ClientPerSecond {
		total += n
	}
	if total != f.ClientFrames {
		t.Fatalf("per-second counts add up to %d, want %d", total, f.ClientFrames)
	}
	var text, js bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flow 0 (longest", "tcp 10.1.2.3:40001 -> 10.1.2.4:7400", "client: 12 frames", "join 1, leave 1, send 9, heartbeat 1", "users: alice; rooms: lobby", "login ends at"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Flows[0].ClientBytes != f.ClientBytes {
		t.Fatalf("json round trip: %v %+v", err, back)
	}
}

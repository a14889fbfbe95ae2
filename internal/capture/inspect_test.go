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
	s := inspect(c)
	var js bytes.Buffer
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	// The fields of profile.FlowSummary this test reads.
	var sum struct {
		Flows []struct {
			Longest         bool           `json:"longest"`
			ClientFrames    int            `json:"client_frames"`
			ClientBytes     int64          `json:"client_bytes"`
			FramesByKind    map[string]int `json:"frames_by_kind"`
			Users           []string       `json:"users"`
			Rooms           []string       `json:"rooms"`
			LoginEndS       float64        `json:"login_end_s"`
			LoginEndFrame   int            `json:"login_end_frame"`
			ClientPerSecond []int          `json:"client_msgs_per_s"`
		} `json:"flows"`
	}
	if err := json.Unmarshal(js.Bytes(), &sum); err != nil || len(sum.Flows) != 1 {
		t.Fatalf("json: %v, %d flows", err, len(sum.Flows))
	}
	f := sum.Flows[0]
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
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flow 0 (longest", "tcp 10.1.2.3:40001 -> 10.1.2.4:7400", "client: 12 frames", "join 1, leave 1, send 9, heartbeat 1", "users: alice; rooms: lobby", "login ends at"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if f.ClientBytes <= 0 {
		t.Fatalf("client bytes %d", f.ClientBytes)
	}
}

package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// mendedCase is a capture as busy hosts and broken clocks write them: it
// reads without error, gives flows frames the clean session's frames, and
// says what was mended in notes (warnings or flow notes) holding each of
// notes.
type mendedCase struct {
	name  string
	file  []byte
	flows int // flows with the whole session's frames
	notes []string
}

// year50 is the size of the clock errors below.
const year50 = 50 * 365 * 24 * time.Hour

// mendedCases builds the corpus; each file is also in testdata/hostile
// (-update-hostile) and a fuzz seed.
func mendedCases(tb testing.TB) []mendedCase {
	session := func() []ipPkt { return tcpSession(tb, cliAddr, srvAddr, 1000, nil).pkts }
	pcap := func(pkts []ipPkt) []byte { return writeRawPcap(tb, layers.LinkTypeEthernet, pkts) }

	// Reordered: pairs of packets swapped in the file, each keeping its time.
	reordered := session()
	for i := 4; i+1 < len(reordered); i += 3 {
		reordered[i], reordered[i+1] = reordered[i+1], reordered[i]
	}
	// One client segment 4 s late: the stream waits for it, and the frames
	// after it are timed when it came.
	late := session()
	held := late[6]
	held.t = late[len(late)-3].t.Add(4 * time.Second)
	late = append(append(late[:6:6], late[7:len(late)-2]...), held, late[len(late)-2], late[len(late)-1])
	for i := len(late) - 2; i < len(late); i++ {
		late[i].t = held.t.Add(time.Duration(i) * time.Millisecond)
	}
	glitch := session()
	glitch[9].t = glitch[9].t.Add(year50)
	glitch[10].t = glitch[10].t.Add(year50)
	step := session()
	for i := 12; i < len(step); i++ {
		step[i].t = step[i].t.Add(year50)
	}
	first := tcpSession(tb, cliAddr, srvAddr, 1000, nil).pkts
	second := tcpSession(tb, cliAddr, srvAddr, 777777, nil).pkts
	for i := range second {
		second[i].t = second[i].t.Add(30 * time.Second)
	}
	reused := append(first[:len(first)-2:len(first)-2], second...)
	snap := pcap(session())
	binary.LittleEndian.PutUint32(snap[16:], 524288)

	return []mendedCase{
		{"tcp_reordered", pcap(reordered), 1, []string{"packets were earlier than a packet before them in the file (first: packet 6", "read in time order"}},
		{"tcp_segment_4s_late", pcap(late), 1, nil},
		{"clock_glitch_2_packets", pcap(glitch), 1, []string{"packets 10-11: 2 timestamps from 2076-02-", "are far from the packets around them: taken as 2026-03-01T12:00:00.09Z"}},
		{"clock_step_forward_50_years", pcap(step), 1, []string{"packet 13: the capture's clock steps forward by about 50 years here (the packets after agree; no session holds such a silence): later timestamps are shifted to continue from packet 12"}},
		{"tcp_port_reused_without_fin", pcap(reused), 2, nil},
		{"pcap_snaplen_524288", snap, 1, nil},
	}
}

// TestMendedCaptures reads each case: no error, every frame of the
// session in each flow, offsets forward, a flow no longer than the clean
// session's (no clock error stretches it), and the expected notes.
func TestMendedCaptures(t *testing.T) {
	cf, sf := sessionFrames()
	clean := readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, tcpSession(t, cliAddr, srvAddr, 1000, nil).pkts)).Flows[0].Duration()
	for _, tc := range mendedCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			c, err := readWithDeadline(t, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			notes := append([]string(nil), c.Warnings...)
			if len(c.Flows) != tc.flows {
				t.Fatalf("%d flows, want %d; warnings %q", len(c.Flows), tc.flows, c.Warnings)
			}
			for _, f := range c.Flows {
				equalFrames(t, "client", f.ClientFrames, cf)
				equalFrames(t, "server", f.ServerFrames, sf)
				forward(t, f)
				if d := f.Duration(); d > clean+5*time.Second {
					t.Errorf("flow %s lasts %v, the clean session %v", f, d, clean)
				}
				notes = append(notes, f.Notes...)
			}
			all := strings.Join(notes, "\n")
			for _, n := range tc.notes {
				if !strings.Contains(all, n) {
					t.Errorf("no note %q in:\n%s", n, all)
				}
			}
			if len(tc.notes) == 0 && all != "" {
				t.Errorf("notes:\n%s", all)
			}
		})
	}
}

// TestMendedCorpusOnDisk: the files in testdata/hostile named after a
// mended case read without error.
func TestMendedCorpusOnDisk(t *testing.T) {
	for _, tc := range mendedCases(t) {
		data, err := os.ReadFile(filepath.Join("testdata/hostile", tc.name))
		if errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is not in testdata/hostile: run go test -run TestWriteCorpus -update-hostile", tc.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, tc.file) {
			t.Errorf("testdata/hostile/%s differs from the case: run go test -run TestWriteCorpus -update-hostile", tc.name)
		}
		if _, err := readWithDeadline(t, data); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

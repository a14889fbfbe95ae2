package capture

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Captures written by real tools (tcpdump, editcap, mergecap, tshark:
// testdata/realtool/make.sh) of tools/corpusclient against the relay on a
// free port (never 7400).

func readReal(t *testing.T, name string) *Capture {
	t.Helper()
	c, err := ReadFile("testdata/realtool/"+name, rep(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func joined(ss []string) string { return strings.Join(ss, "\n") }

// TestPortReusedAfterRST: three connections from one client port, the
// first two closed by an RST: three flows, each with its own join and
// frames, and no "bytes missing" note.
func TestPortReusedAfterRST(t *testing.T) {
	c := readReal(t, "rst-reuse.pcap")
	if len(c.Flows) != 3 {
		t.Fatalf("%d flows, want 3", len(c.Flows))
	}
	for i, f := range c.Flows {
		var users []string
		for _, fr := range f.ClientFrames {
			if kind(fr) == wire.TypeJoin {
				var j wire.Frame
				wire.Decode(fr.Bytes, len(fr.Bytes), &j)
				users = append(users, string(j.User))
			}
		}
		sends := 0
		for _, fr := range f.ServerFrames {
			if kind(fr) == wire.TypeDeliver {
				sends++
			}
		}
		if want := []string{"conn-0", "conn-1", "conn-2"}[i]; len(users) != 1 || users[0] != want || sends != 3 {
			t.Errorf("flow %d: joins %v, %d deliveries; want %s and 3", i, users, sends, want)
		}
		if n := joined(f.Notes); strings.Contains(n, "missing") {
			t.Errorf("flow %d: false gap note: %s", i, n)
		}
		if f.ClientBy != ClientBySYN {
			t.Errorf("flow %d: client told by %q", i, f.ClientBy)
		}
	}
}

// TestDuplicateDatagrams: a pcapng merged by mergecap from captures on lo
// and any holds every datagram twice; the copies are dropped with a
// warning, and the flow is the session once (one join, one leave).
func TestDuplicateDatagrams(t *testing.T) {
	c := readReal(t, "udp-dup-merged.pcapng")
	if len(c.Flows) != 1 {
		t.Fatalf("%d flows", len(c.Flows))
	}
	f := c.Flows[0]
	kinds := map[wire.Type]int{}
	for _, fr := range f.ClientFrames {
		kinds[kind(fr)]++
	}
	if kinds[wire.TypeJoin] != 1 || kinds[wire.TypeLeave] != 1 || kinds[wire.TypeSend] != 5 {
		t.Errorf("client frames by kind %v, want one join, five sends, one leave", kinds)
	}
	if w := joined(c.Warnings); !strings.Contains(w, "13 UDP datagrams were copies") || !strings.Contains(w, "first: packet 2, a copy of packet 1") {
		t.Errorf("warnings:\n%s", w)
	}
}

// TestMidConnectionServerFirst: a capture cut (by tshark) after alice's
// join, on a port other than 7400, where the relay talks to alice first:
// her flow's client side is alice, told by the frame kinds, and inspect
// says replay cannot use it (no join).
func TestMidConnectionServerFirst(t *testing.T) {
	c := readReal(t, "midconn-server-first.pcap")
	var alice *Flow
	for _, f := range c.Flows {
		if f.ClientBy != ClientBySYN {
			alice = f
		}
	}
	if alice == nil {
		t.Fatalf("no mid-connection flow: %d flows", len(c.Flows))
	}
	if alice.ClientBy != ClientByKinds {
		t.Errorf("client told by %q, want %q", alice.ClientBy, ClientByKinds)
	}
	for _, fr := range alice.ClientFrames {
		if !kind(fr).FromClient() {
			t.Errorf("client frame of kind %s: sides swapped", kind(fr))
		}
	}
	if len(alice.ClientFrames) == 0 || alice.Server.Port() == wire.DefaultPort {
		t.Errorf("flow %s with %d client frames", alice, len(alice.ClientFrames))
	}
	var text strings.Builder
	inspect(c).WriteText(&text)
	if !strings.Contains(text.String(), "not usable: no join frame") || !strings.Contains(text.String(), "client side told by: frame kinds") {
		t.Errorf("inspect:\n%s", text.String())
	}
}

// TestTimestampOutliers: one packet dated 2100 and one dated 1970 (editcap)
// take their neighbours' time, each with a warning naming it; the flows
// are as without them, and the JSON summary is written.
func TestTimestampOutliers(t *testing.T) {
	c := readReal(t, "dates-2100-1970.pcap")
	clean := readReal(t, "rst-reuse.pcap")
	w := joined(c.Warnings)
	if !strings.Contains(w, "packet 10: timestamp 2100-01-01") || !strings.Contains(w, "packet 20: timestamp 1970-01-01") {
		t.Errorf("warnings:\n%s", w)
	}
	if len(c.Flows) != len(clean.Flows) {
		t.Fatalf("%d flows, %d without the bad dates", len(c.Flows), len(clean.Flows))
	}
	for i := range c.Flows {
		if d, want := c.Flows[i].Duration(), clean.Flows[i].Duration(); d > want+time.Millisecond || d < want-5*time.Millisecond {
			t.Errorf("flow %d lasts %v, %v without the bad dates", i, d, want)
		}
	}
	if err := inspect(c).WriteJSON(io.Discard); err != nil {
		t.Error(err)
	}
}

// TestTimestampBackwards: a packet 2 ms earlier than the one before it
// (editcap) is read in its time's place, with a warning naming it;
// offsets never go backwards.
func TestTimestampBackwards(t *testing.T) {
	c := readReal(t, "backwards-2ms.pcap")
	if w := joined(c.Warnings); !strings.Contains(w, "1 packets were earlier than a packet before them in the file (first: packet 17, by up to 1.988ms): read in time order") {
		t.Errorf("warnings:\n%s", w)
	}
	for _, f := range c.Flows {
		for _, frs := range [][]Frame{f.ClientFrames, f.ServerFrames} {
			for i := 1; i < len(frs); i++ {
				if frs[i].Offset < frs[i-1].Offset {
					t.Errorf("flow %s: frame %d at %v before frame %d at %v", f, i, frs[i].Offset, i-1, frs[i-1].Offset)
				}
			}
		}
	}
}

// TestClock is the timestamp mending on its own.
func TestClock(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   []time.Time
		want []time.Duration
		note string
	}{
		{"in order", []time.Time{at(0), at(1), at(2)}, []time.Duration{0, 1, 2}, ""},
		{"outlier inside", []time.Time{at(0), far, at(2)}, []time.Duration{0, 0, 2}, "packet 2: timestamp 2100"},
		{"outlier first", []time.Time{far, at(1), at(2)}, []time.Duration{1, 1, 2}, "packet 1: timestamp 2100"},
		{"outlier last", []time.Time{at(0), at(1), far}, []time.Duration{0, 1, 1}, "packet 3"},
		{"year 1", []time.Time{at(0), {}, at(2)}, []time.Duration{0, 0, 2}, "packet 2"},
		// Small disorder is the time-order window's (TestTimeOrder).
		{"backwards", []time.Time{at(0), at(5), at(3), at(6)}, []time.Duration{0, 5, 3, 6}, ""},
		{"long silence", []time.Time{at(0), at(1), at(2 * time.Hour), at(2*time.Hour + 1)}, []time.Duration{0, 1, 2 * time.Hour, 2*time.Hour + 1}, "packet 3: 2h0m0s with no packet before it (the packets after agree): kept as a silence"},
		{"clock steps back", []time.Time{at(3 * time.Hour), at(3*time.Hour + 1), at(0), at(1)}, []time.Duration{3 * time.Hour, 3*time.Hour + 1, 3*time.Hour + 1, 3*time.Hour + 2}, "steps back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var notes []string
			c := newClock(func(f string, a ...any) { notes = append(notes, fmtS(f, a...)) })
			var got []time.Duration
			out := func(p rawPacket) { got = append(got, p.ci.Timestamp.Sub(base)) }
			for i, ts := range tt.in {
				p := rawPacket{n: i + 1}
				p.ci.Timestamp = ts
				c.push(p, out)
			}
			c.flush(out)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v", got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("packet %d at %v, want %v", i+1, got[i], tt.want[i])
				}
			}
			if n := joined(notes); (tt.note == "") != (n == "") || !strings.Contains(n, tt.note) {
				t.Errorf("notes %q, want one containing %q", n, tt.note)
			}
		})
	}
}

func fmtS(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// TestGapNamesPackets: a capture missing one packet (editcap deleted a
// delivery): the note names the packet before the gap and the one the
// stream goes on in, and only that flow has it.
func TestGapNamesPackets(t *testing.T) {
	c := readReal(t, "missing-packet.pcap")
	if len(c.Flows) != 3 {
		t.Fatalf("%d flows", len(c.Flows))
	}
	if n := joined(c.Flows[0].Notes); !strings.Contains(n, "26 bytes missing from the capture after packet 6 (stream offset 29; the stream goes on in packet 10)") {
		t.Errorf("flow 0 notes:\n%s", n)
	}
	for _, f := range c.Flows[1:] {
		if len(f.Notes) > 0 {
			t.Errorf("flow %s: notes %q", f, f.Notes)
		}
	}
}

// TestSnapCutDatagrams: UDP datagrams cut by a 100-byte snap length
// (editcap -s 100): the cut joins are said to be cut, not "not a protocol
// frame", and inspect says why replay cannot use the flow.
func TestSnapCutDatagrams(t *testing.T) {
	c := readReal(t, "udp-snap-100.pcapng")
	if w := joined(c.Warnings); !strings.Contains(w, "cut by the snap length (first: packet 1)") {
		t.Errorf("warnings:\n%s", w)
	}
	var text strings.Builder
	inspect(c).WriteText(&text)
	if !strings.Contains(text.String(), "or the join was cut") || !strings.Contains(text.String(), "client side told by: frame kinds") {
		t.Errorf("inspect:\n%s", text.String())
	}
}

// TestOutOfOrderByTime: a client segment held back past 300 later
// segments (3 s at 10 ms apart: far more than the 128 pages the reader
// once waited for) still fills its hole; one held back past 5 s of
// capture time is given up with a note, and its late bytes are noted as
// dropped when they arrive.
func TestOutOfOrderByTime(t *testing.T) {
	send := func(i int) []byte {
		return wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: fmt.Appendf(nil, "pose %04d", i)})
	}
	for _, tt := range []struct {
		name  string
		after int // segments sent before the held one arrives
		lost  bool
	}{
		{"3 s late", 300, false},
		{"6 s late", 600, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newTCP("10.0.0.1:50000", "10.0.0.2:7400", 1000)
			b.handshake(t)
			b.send(t, 0, wire.AppendJoin(nil, "lobby", "alice", nil, 0))
			held, heldSeq := send(0), b.seq[0]
			b.seq[0] += uint32(len(held))
			for i := 1; i <= tt.after; i++ {
				b.send(t, 0, send(i))
			}
			b.raw(t, 0, heldSeq, tcpFlags{ack: true, psh: true}, held)
			b.fin(t)
			c := readPath(t, writeCapture(t, PCAP, layers.LinkTypeEthernet, b.pkts))
			f := onlyFlow(t, c)
			notes := joined(f.Notes)
			if !tt.lost {
				if len(f.ClientFrames) != tt.after+2 || notes != "" {
					t.Errorf("%d client frames (want %d), notes %q", len(f.ClientFrames), tt.after+2, notes)
				}
				return
			}
			if !strings.Contains(notes, "bytes missing from the capture") || !strings.Contains(notes, "came after their gap was given up") {
				t.Errorf("notes:\n%s", notes)
			}
		})
	}
}

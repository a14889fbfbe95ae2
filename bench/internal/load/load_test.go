package load

import (
	"bytes"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, s := range []Stamp{
		{},
		{SentNs: 1_700_000_000_123_456_789, Room: 15, Member: 31, Seq: 1},
		{SentNs: -1, Room: 1<<32 - 1, Member: 1<<32 - 1, Seq: 1<<64 - 1},
	} {
		p := make([]byte, 200)
		EncodePayload(p, s)
		got, err := DecodePayload(p)
		if err != nil || got != s {
			t.Errorf("round trip of %+v: got %+v, %v", s, got, err)
		}
	}
	if _, err := DecodePayload(make([]byte, HeaderLen-1)); err == nil {
		t.Error("a payload shorter than the stamp decoded without error")
	}
}

func stamp(room, member uint32, seq uint64, sent int64) []byte {
	p := make([]byte, 40)
	EncodePayload(p, Stamp{SentNs: sent, Room: room, Member: member, Seq: seq})
	return p
}

// TestTrackerAccounting feeds one receiver (member 1 of room 3, rooms of 4)
// a sequence with every kind of fault and checks each count.
func TestTrackerAccounting(t *testing.T) {
	var win Window
	win.Set(1000, 2000)
	tr := NewTracker(3, 1, 4, &win)
	feed := []struct {
		p   []byte
		now int64
	}{
		{stamp(3, 0, 1, 500), 600},      // before the window: counted, no latency
		{stamp(3, 0, 2, 1000), 4000},    // in window, 3 µs
		{stamp(3, 2, 1, 1500), 1500},    // in window, 0 → recorded as 1 µs
		{stamp(3, 0, 5, 1600), 9000},    // gap: 3 and 4 skipped
		{stamp(3, 0, 4, 1700), 9000},    // late arrival of 4: a duplicate/reorder
		{stamp(3, 1, 1, 1700), 9000},    // own message: misrouted
		{stamp(2, 0, 1, 1700), 9000},    // another room: misrouted
		{stamp(3, 9, 1, 1700), 9000},    // member index outside the room: misrouted
		{stamp(3, 3, 1, 2000), 9000},    // at the window's end: not in window
		{[]byte("short"), 9000},         // malformed
		{stamp(3, 2, 2, 1999), 101_999}, // in window, 100 µs
	}
	for _, f := range feed {
		tr.Observe(f.p, f.now)
	}
	want := Counts{Received: 7, InWindow: 5, Gaps: 2, Dups: 1, Misrouted: 3, Malformed: 1}
	if tr.Counts != want {
		t.Errorf("counts = %+v, want %+v", tr.Counts, want)
	}
	if got := tr.Unique(); got != 6 {
		t.Errorf("unique = %d, want 6", got)
	}
	if got := tr.Hist.TotalCount(); got != 5 {
		t.Errorf("latencies recorded = %d, want 5 (one per in-window delivery)", got)
	}
	if got := tr.Hist.Max(); got < 99 || got > 101 {
		t.Errorf("max latency = %d µs, want ≈100", got)
	}
	if tr.Progress() != 0 {
		t.Error("progress visible before Publish")
	}
	tr.Publish()
	if tr.Progress() != 7 {
		t.Errorf("progress = %d, want 7", tr.Progress())
	}
}

// TestScan feeds each protocol a stream of replies whole, split at every
// byte, and checks the deliveries and events come out the same.
func TestScan(t *testing.T) {
	pay := func(seq uint64) []byte { return stamp(0, 2, seq, 7) }
	var rep []byte
	rep = wire.AppendJoined(rep, 0, "u0.0", []string{"u0.0", "u0.1"})
	rep = wire.AppendMemberJoined(rep, "u0.2")
	rep = wire.AppendDeliver(rep, wire.Othercast, "u0.2", true, 7, pay(1))
	rep = wire.AppendDeliver(rep, wire.Othercast, "u0.2", true, 7, pay(2))
	var nats []byte
	nats = append(nats, "INFO {\"server_id\":\"x\"}\r\nPONG\r\n"...)
	for seq := uint64(1); seq <= 2; seq++ {
		nats = append(nats, "MSG room.0 1 40\r\n"...)
		nats = append(nats, pay(seq)...)
		nats = append(nats, "\r\n"...)
	}
	nats = append(nats, "PING\r\n"...)
	for _, tc := range []struct {
		proto     Protocol
		stream    []byte
		wantOther uint64
		wantReply string
	}{
		{Reprise{}, rep, 1, ""},
		{NATS{}, nats, 1, "PONG\r\n"},
	} {
		for split := 0; split <= len(tc.stream); split++ {
			var ev Events
			var got [][]byte
			deliver := func(p []byte) { got = append(got, bytes.Clone(p)) }
			buf := append([]byte(nil), tc.stream[:split]...)
			n, err := tc.proto.Scan(buf, &ev, deliver)
			if err != nil {
				t.Fatalf("%s split %d: first part: %v", tc.proto.Name(), split, err)
			}
			buf = append(buf[n:], tc.stream[split:]...)
			n, err = tc.proto.Scan(buf, &ev, deliver)
			if err != nil || n != len(buf) {
				t.Fatalf("%s split %d: second part: used %d of %d, %v", tc.proto.Name(), split, n, len(buf), err)
			}
			if !ev.Ready || ev.Other != tc.wantOther || string(ev.Reply) != tc.wantReply || len(got) != 2 {
				t.Fatalf("%s split %d: ready %v other %d reply %q deliveries %d", tc.proto.Name(), split, ev.Ready, ev.Other, ev.Reply, len(got))
			}
			for i, p := range got {
				if !bytes.Equal(p, pay(uint64(i+1))) {
					t.Fatalf("%s split %d: delivery %d = %x", tc.proto.Name(), split, i, p)
				}
			}
		}
	}
}

func TestScanErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		proto  Protocol
		stream []byte
	}{
		{"relay error frame", Reprise{}, wire.AppendError(nil, wire.ErrRoomFull, "full")},
		{"oversized frame", Reprise{}, []byte{0xff, 0xff, 0xff, 0xff, 0x84}},
		{"nats -ERR", NATS{}, []byte("-ERR 'Authorization Violation'\r\n")},
		{"nats bad MSG size", NATS{}, []byte("MSG room.0 1 4x\r\n")},
		{"nats endless control line", NATS{}, bytes.Repeat([]byte("A"), natsMaxControl+1)},
	} {
		var ev Events
		if _, err := tc.proto.Scan(tc.stream, &ev, func([]byte) {}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestPublishEncodings(t *testing.T) {
	p := stamp(0, 0, 1, 1)
	var f wire.Frame
	b := Reprise{}.AppendPublish(nil, 0, 42, p)
	if _, err := wire.Decode(b, wire.DefaultMaxFrame, &f); err != nil || f.Mode != wire.Othercast || !f.HasTrace || f.Trace != 42 || !bytes.Equal(f.Payload, p) {
		t.Errorf("reprise publish decodes to %+v, %v", f, err)
	}
	want := "PUB room.7 40\r\n" + string(p) + "\r\n"
	if got := string(NATS{}.AppendPublish(nil, 7, 42, p)); got != want {
		t.Errorf("nats publish = %q, want %q", got, want)
	}
}

func TestSlotAt(t *testing.T) {
	start := time.Unix(100, 0)
	const period = 12 * time.Millisecond
	for _, tc := range []struct {
		name                 string
		k, s, slots, senders int
		want                 slot
	}{
		{"burst: one slot, all senders, on the tick", 3, 0, 1, 32, slot{start.Add(36 * time.Millisecond), 0, 32}},
		{"spread: first sender on the tick", 0, 0, 32, 32, slot{start, 0, 1}},
		{"spread: sender 8 a quarter period in", 1, 8, 32, 32, slot{start.Add(15 * time.Millisecond), 8, 9}},
		{"spread: last sender", 0, 31, 32, 32, slot{start.Add(period * 31 / 32), 31, 32}},
		{"uneven: 4 slots over 10 senders", 0, 3, 4, 10, slot{start.Add(9 * time.Millisecond), 7, 10}},
	} {
		if got := slotAt(start, period, tc.k, tc.s, tc.slots, tc.senders); !got.at.Equal(tc.want.at) || got.lo != tc.want.lo || got.hi != tc.want.hi {
			t.Errorf("%s: got %v [%d,%d), want %v [%d,%d)", tc.name, got.at.Sub(start), got.lo, got.hi, tc.want.at.Sub(start), tc.want.lo, tc.want.hi)
		}
	}
	// Every sender is in exactly one slot of a tick.
	for _, slots := range []int{1, 3, 7, 32} {
		seen := 0
		for s := 0; s < slots; s++ {
			sl := slotAt(start, period, 0, s, slots, 32)
			if sl.lo != seen {
				t.Fatalf("%d slots: slot %d starts at %d, want %d", slots, s, sl.lo, seen)
			}
			seen = sl.hi
		}
		if seen != 32 {
			t.Errorf("%d slots cover %d of 32 senders", slots, seen)
		}
	}
}

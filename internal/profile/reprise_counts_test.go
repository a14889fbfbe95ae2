package profile

import (
	"testing"

	"github.com/reprise-harness/reprise/internal/hdrcounts"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestRepriseDeliveryCounts: what a logged-in reprise client counts for
// a stream of every kind of deliver frame (each mode, stamped or not, ids
// of 1 to 64 bytes, a sender skipping a sequence, one arriving late)
// with other frames among them: the same whether the stream comes whole
// (the decode loop) or split at every offset (frames completed across
// reads, the parser's slow path), and whether latencies are counted into
// lent counts or appended. Messages are the deliver frames, Casts the
// broadcasts and othercasts, Numbered the stamped ones among those, Lost
// the gap (2) less the late arrival (1).
func TestRepriseDeliveryCounts(t *testing.T) {
	const now = int64(1_700_000_000_123_456_789)
	long := string(make([]byte, 64))
	var stream []byte
	var msgs, casts, numbered, stamped int64
	add := func(mode wire.Mode, sender string, traced bool, seq uint64) {
		stream = wire.AppendDeliver(stream, mode, sender, traced, stampSeq(now-int64(seq)*1000_000, seq), []byte("payload"))
		msgs++
		cast := mode == wire.Broadcast || mode == wire.Othercast
		if cast {
			casts++
		}
		if traced {
			stamped++
			if cast {
				numbered++
			}
		}
	}
	for seq := uint64(1); seq <= 6; seq++ {
		if seq != 3 { // b skips 3: a gap of 1
			add(wire.Othercast, "b", true, seq)
		}
		add(wire.Broadcast, "replay-0001-long-id", true, seq)
		if seq != 4 && seq != 5 { // c skips 4 and 5 (2), then 5 comes late (-1)
			add(wire.Broadcast, "c", true, seq)
		}
		add(wire.Broadcast, long, false, seq)
		add(wire.Unicast, "d", true, seq)
		add(wire.Manycast, "e", false, seq)
		add(wire.Ownercast, "f", true, seq)
		stream = wire.AppendHeartbeatReply(stream, now, now)
	}
	add(wire.Broadcast, "c", true, 5)
	const lost = 1 + 2 - 1

	for _, lend := range []bool{false, true} {
		for split := 0; split < len(stream); split++ {
			c := &repriseClient{r: &Reprise{}, seqs: roomSeqs{t: &senderTable{}}, joined: true}
			var ev, sum Events
			var h *hdrcounts.Counts
			if lend {
				h = hdrcounts.New()
			}
			var lat int64
			for _, part := range [][]byte{stream[:split], stream[split:]} {
				ev.Reset()
				ev.Latency = h
				if err := c.Feed(part, now, &ev); err != nil {
					t.Fatalf("split at %d: %v", split, err)
				}
				sum.Frames += ev.Frames
				sum.Messages += ev.Messages
				sum.Casts += ev.Casts
				sum.Numbered += ev.Numbered
				sum.Lost += ev.Lost
				lat += int64(len(ev.Latencies))
			}
			if h != nil {
				lat = h.Total()
			}
			if sum.Messages != msgs || sum.Frames != msgs+6 || sum.Casts != casts || sum.Numbered != numbered || sum.Lost != lost || lat != stamped {
				t.Fatalf("lend %v, split at %d: %d frames, %d messages, %d casts, %d numbered, %d lost, %d latencies; want %d, %d, %d, %d, %d, %d",
					lend, split, sum.Frames, sum.Messages, sum.Casts, sum.Numbered, sum.Lost, lat, msgs+6, msgs, casts, numbered, lost, stamped)
			}
		}
	}
}

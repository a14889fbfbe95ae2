package report

import (
	"math"
	"strings"
	"testing"
)

// TestServerDropsNamed: frames the relay's rate limits dropped are named
// as the server dropping traffic, with the limit that did it, and the
// deliveries owed but never received as loss; the loss of numbered casts
// no longer blames UDP (a TCP run has it too).
func TestServerDropsNamed(t *testing.T) {
	nan := Num(math.NaN())
	rs := RunStats{RateLimitedFrames: 0, RoomRateLimitedFrames: 54000, DeliveriesExpected: 4171, DeliveriesReceived: 1, LossPct: 2,
		HostBusyS: 0, ScheduleLagP99Ms: 0, RelayUDPReceiveDrops: nan, HostOtherCoresMax: nan, SampledS: 10}
	got := strings.Join(runWarnings(rs, nil, ""), "\n")
	for _, want := range []string{
		"the server dropped traffic: the relay's rate limits dropped 54000 frames (54000 by the room's limit",
		"deliveries lost: 4170 of the 4171 the server owed the clients never arrived (99.976%)",
		"gaps in their senders' sequences",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "UDP loss") {
		t.Errorf("a loss blamed on UDP:\n%s", got)
	}
	for _, w := range runWarnings(rs, nil, "") {
		if strings.HasPrefix(w, "the server dropped") && warningCause(w) != CauseServerDropped {
			t.Errorf("%q grouped as %v", w, warningCause(w))
		}
	}
}

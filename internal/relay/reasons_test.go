package relay

import (
	"testing"

	"github.com/reprise-harness/reprise/internal/wire"
)

// TestReasonLabels: each reason's String is its label: an error code's
// name for the reasons that are codes (the code the client is sent), the
// metric's own word for the others, all distinct.
func TestReasonLabels(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range []CloseReason{CloseClosed, CloseLeave, CloseUnconfirmed, CloseMemoryBudget} {
		if r.Code() != 0 || seen[r.String()] {
			t.Errorf("%v: code %v, or its label twice", r, r.Code())
		}
		seen[r.String()] = true
	}
	for _, code := range wire.ErrorCodes() {
		r := closeFor(code)
		if r.Code() != code || r.String() != code.String() || seen[r.String()] {
			t.Errorf("closeFor(%v): code %v, label %q", code, r.Code(), r)
		}
		if rj := rejectFor(code); rj.String() != code.String() {
			t.Errorf("rejectFor(%v): label %q", code, rj)
		}
	}
	want := map[RejectReason]string{RejectGarbage: "garbage", RejectUnknownSession: "unknown_session", RejectWrongSource: "wrong_source"}
	for r, w := range want {
		if r.String() != w {
			t.Errorf("%d: %q, want %q", r, r, w)
		}
	}
	if UndeliveredUnconfirmed.String() != "unconfirmed" || UndeliveredDatagramTooLarge.String() != "datagram_too_large" {
		t.Error("undelivered labels")
	}
}

// TestCloseFrameAndLabelAgree: a connection closed for a code gets that
// code's error frame and is counted under the same reason.
func TestCloseFrameAndLabelAgree(t *testing.T) {
	s, stop := startServer(t, Config{})
	defer stop()
	for _, code := range []wire.ErrorCode{wire.ErrIdleTimeout, wire.ErrReplaced, wire.ErrFrameTimeout} {
		c := newTCPClient(s, -1, nil)
		c.close(code, "why")
		_, reason := c.out.state()
		q, _, _ := c.out.take(nil)
		var f wire.Frame
		if _, err := wire.Decode(q[0].b, wire.DefaultMaxFrame, &f); err != nil {
			t.Fatal(err)
		}
		if f.Code != code || reason.Code() != code || reason.String() != f.Code.String() {
			t.Errorf("closed for %v: frame %v, reason %v", code, f.Code, reason)
		}
	}
}

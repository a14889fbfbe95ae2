package fleet

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// script is a recorded session of "alice": the join, then from 100 ms a
// traced othercast every 20 ms until 300 ms.
func script() []session.Frame {
	fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
	for t := 100; t < 300; t += 20 {
		fr = append(fr, session.Frame{Offset: ms(t), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: []byte("pose")})})
	}
	return fr
}

func testConfig() Config {
	c := DefaultConfig()
	c.Frames = script()
	c.Metrics = ""
	c.LoginInterval = 5 * time.Millisecond
	c.ProgressInterval = time.Second
	return c
}

func TestFleetNN(t *testing.T) {
	c := testConfig()
	c.Clients = 4
	c.Loop = "100ms,300ms"
	c.Duration = time.Second
	var out bytes.Buffer
	c.Out = &out
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteText(&out)
	t.Log(out.String())
	if s.LoginsSucceeded != 4 || s.MessagesReceived != 3*s.MessagesSent {
		t.Errorf("summary %+v", s)
	}
}

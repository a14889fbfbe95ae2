package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The scripted client is the one real client whose session `record proxy`
// records: it joins by its URL, waits for the joined message, then sends
// one text message of exactly --size bytes every 1/--rate s for
// --duration, reading whatever the room sends meanwhile. Each message is
//
//	{"type":"msg","ts":"0000000000000000000","pad":"xxx…"}
//
// with a 19-digit "ts" the replay stamps (bench/wsroom.yaml: latency in a
// JSON string, decimal) and k6's script fills with its own clock.

// stampDigits is the width of the recorded "ts": a decimal int64.
const stampDigits = 19

// message builds a message of exactly size bytes.
func message(size int) ([]byte, error) {
	head := `{"type":"msg","ts":"` + strings.Repeat("0", stampDigits) + `","pad":"`
	tail := `"}`
	pad := size - len(head) - len(tail)
	if pad < 0 {
		return nil, fmt.Errorf("--size %d: at least %d bytes", size, len(head)+len(tail))
	}
	return []byte(head + strings.Repeat("x", pad) + tail), nil
}

func runClient(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wsroom client", flag.ContinueOnError)
	url := fs.String("url", "ws://127.0.0.1:7600/ws?room=lobby&user=alice01", "the room's URL")
	size := fs.Int("size", 200, "bytes per message")
	rate := fs.Float64("rate", 20, "messages per second")
	dur := fs.Duration("duration", 10*time.Second, "how long to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate <= 0 {
		return fmt.Errorf("--rate %v: must be > 0", *rate)
	}
	msg, err := message(*size)
	if err != nil {
		return err
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, _, err := d.DialContext(ctx, *url, nil)
	if err != nil {
		return fmt.Errorf("dial %s: %w", *url, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, first, err := c.ReadMessage(); err != nil {
		return fmt.Errorf("joined message: %w", err)
	} else if !strings.HasPrefix(string(first), `{"type":"joined"`) {
		return fmt.Errorf("first message %q: want joined", first)
	}
	c.SetReadDeadline(time.Time{})
	got := make(chan int, 1)
	go func() { // owned: ends when c closes (deferred above)
		n := 0
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	sent, err := send(ctx, c, msg, time.Duration(float64(time.Second) / *rate), *dur)
	// A close frame, then a moment for the proxy to record the server's.
	c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	time.Sleep(100 * time.Millisecond)
	c.Close()
	fmt.Fprintf(stdout, "client sent=%d received=%d\n", sent, <-got)
	return err
}

// send writes msg every gap for dur, on absolute times (a late tick does
// not shift the ones after it).
func send(ctx context.Context, c *websocket.Conn, msg []byte, gap, dur time.Duration) (int, error) {
	start := time.Now()
	n := 0
	for i := 0; time.Duration(i)*gap < dur; i++ {
		if w := time.Until(start.Add(time.Duration(i) * gap)); w > 0 {
			select {
			case <-ctx.Done():
				return n, nil
			case <-time.After(w):
			}
		}
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			if errors.Is(err, websocket.ErrCloseSent) {
				return n, nil
			}
			return n, fmt.Errorf("send %d: %w", n+1, err)
		}
		n++
	}
	return n, nil
}

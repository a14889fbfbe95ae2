package fleet

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

// TestLoadedPlaysWithoutReading: a fleet given its source already loaded
// (Config.Load, as compare loads once for its runs) plays those players
// and reads no capture, however many fleets share them; without them,
// New reads the capture.
func TestLoadedPlaysWithoutReading(t *testing.T) {
	c := baseConfig()
	c.Frames = nil
	c.Target = "127.0.0.1:9" // New connects nowhere
	c.Capture, c.Profile = lookedUp(t)(writePingCapture(t, "tcp"))
	l, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c.Capture); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("New without Loaded, the capture gone: %v, want it read (not found)", err)
	}
	c.Loaded = l
	for range 2 {
		f, err := New(c)
		if err != nil {
			t.Fatalf("New with Loaded, the capture gone: %v", err)
		}
		if f.player != l.Player() {
			t.Errorf("the fleet plays %v, not the loaded player %v", f.player, l.Player())
		}
		f.Close()
	}
}

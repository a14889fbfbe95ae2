package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/relay"
)

// TestLimitsPrintedAtStart: after its listening line the relay prints the
// caps it runs with, sized from the machine unless given, and what they
// were sized from.
func TestLimitsPrintedAtStart(t *testing.T) {
	m := relay.ReadMachine()
	d := relay.DefaultConfig()
	tests := []struct {
		args []string
		want string
	}{
		{nil, fmt.Sprintf("limits max-connections=%d max-rooms=%d per-source connections=%d rooms=%d (open files %d, memory %d MiB)",
			d.MaxConnections, d.MaxRooms, d.MaxConnectionsPerSource, d.MaxRoomsPerSource, m.OpenFiles, m.Memory>>20)},
		{[]string{"--max-connections", "-1", "--max-rooms", "50", "--max-connections-per-source", "7", "--max-rooms-per-source", "-1"},
			fmt.Sprintf("limits max-connections=none max-rooms=50 per-source connections=7 rooms=none (open files %d, memory %d MiB)", m.OpenFiles, m.Memory>>20)},
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["relay"], append([]string{"--listen", "127.0.0.1:0", "--metrics", "off", "--udp", "off"}, tt.args...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 2)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var got []string
		timeout := time.After(20 * time.Second)
		for len(got) < 2 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("relay %v stopped after %q", tt.args, got)
				}
				got = append(got, l)
			case <-timeout:
				t.Fatalf("relay %v printed %q only", tt.args, got)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if !strings.HasPrefix(got[0], "listening ") || got[1] != tt.want {
			t.Errorf("relay %v printed\n%q\nwant a listening line, then\n%q", tt.args, got, tt.want)
		}
	}
}

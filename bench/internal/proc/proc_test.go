package proc

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// The command name holds a space and a ')', as a hostile one may.
	line := "4242 (we ird) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 12345 1000000 500 18446744073709551615\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("cpu = %v, %v; want 3.25s", got, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a truncated stat line parsed")
	}
}

func TestParseStatusRSS(t *testing.T) {
	got, err := parseStatusRSS([]byte("Name:\trelay\nVmPeak:\t  9999 kB\nVmRSS:\t   1234 kB\nThreads:\t4\n"))
	if err != nil || got != 1234<<10 {
		t.Errorf("rss = %d, %v; want %d", got, err, 1234<<10)
	}
	if _, err := parseStatusRSS([]byte("Name:\tzombie\n")); err == nil {
		t.Error("status without VmRSS parsed")
	}
}

// TestSelf reads this test process's own figures through the real files.
func TestSelf(t *testing.T) {
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	rss, err := RSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("own rss = %d, %v; want over 1 MiB", rss, err)
	}
}

func TestCountEstablished(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1CE8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:1CE8 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:9C40 0100007F:1CE8 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0100007F:1CE8 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
`
	if got := countEstablished([]byte(tcp), 7400); got != 1 {
		t.Errorf("established on :7400 = %d, want 1 (not the listener, the client side or TIME_WAIT)", got)
	}
}

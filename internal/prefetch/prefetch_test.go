package prefetch

import (
	"testing"
	"unsafe"
)

// TestLines: asking for lines, some of them zero, changes nothing and
// does not fault (a prefetch of any address is only a hint, but the
// addresses here are real).
func TestLines(t *testing.T) {
	buf := make([]uint64, 64)
	for i := range buf {
		buf[i] = uint64(i)
	}
	var a Addrs
	for i := range a {
		if i%3 != 2 {
			a[i] = uintptr(unsafe.Pointer(&buf[i*8]))
		}
	}
	Lines(&a)
	Lines(&Addrs{})
	for i, v := range buf {
		if v != uint64(i) {
			t.Fatalf("buf[%d] = %d after prefetching, want %d", i, v, i)
		}
	}
}

// BenchmarkLines: the cost of one call of eight addresses.
func BenchmarkLines(b *testing.B) {
	buf := make([]uint64, 1024)
	var a Addrs
	for i := range a {
		a[i] = uintptr(unsafe.Pointer(&buf[i*128]))
	}
	for b.Loop() {
		Lines(&a)
	}
}

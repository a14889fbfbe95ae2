package relay

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine-sized caps: the relay's default --max-connections and --max-rooms
// come from what the machine it starts on can hold, so that a relay left at
// its defaults refuses the connection past them (server_full) instead of
// failing at accept (out of file descriptors) or being killed (out of
// memory).
//
// A TCP connection holds one file descriptor and, at most in the steady
// state, connCost bytes of the machine: two goroutine stacks, its read
// buffer, outbound chunks and the kernel's socket buffers. A room holds
// roomCost (its member list and map, the registry's entry, a UDP session
// in it: about 2.5 KiB each measured, rounded up). Half the memory is the
// relay's to spend; fdReserve descriptors stay for the listeners, UDP
// sockets, metrics scrapes and files.
const (
	connCost  = 64 << 10
	roomCost  = 4 << 10
	fdReserve = 256
	// perSourceShare: one source address may hold this fraction of the
	// relay's connections and rooms (1/perSourceShare), so a few clients
	// with many sockets cannot take it all, and a load generator on one
	// address can still fill a quarter of it; but never fewer than
	// minPerSource (a small machine's relay is for few clients anyway).
	perSourceShare = 4
	minPerSource   = 1024
)

// perSource is a source's default share of a cap.
func perSource(n int) int { return max(n/perSourceShare, min(n, minPerSource)) }

// Machine is what the relay's caps are sized from.
type Machine struct {
	OpenFiles uint64 // RLIMIT_NOFILE's soft limit (Go raises it to the hard limit at start)
	Memory    uint64 // bytes: MemTotal, or the cgroup's memory.max if lower; 0: unknown
}

// ReadMachine reads the open-file limit and the memory available.
func ReadMachine() Machine {
	var m Machine
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		m.OpenFiles = rl.Cur
	}
	m.Memory = memTotal()
	if lim := cgroupMemory(); lim > 0 && (m.Memory == 0 || lim < m.Memory) {
		m.Memory = lim
	}
	return m
}

// MaxConnections is the default --max-connections: the descriptors left
// after fdReserve, and no more than half the memory holds.
func (m Machine) MaxConnections() int {
	n := uint64(1 << 20)
	if m.OpenFiles > 0 {
		n = min(n, max(m.OpenFiles, 2*fdReserve)-fdReserve)
	}
	if m.Memory > 0 {
		n = min(n, m.Memory/2/connCost)
	}
	return int(max(n, 64))
}

// MaxRooms is the default --max-rooms: what half the memory holds at
// roomCost each, and no more than the connections (every room has a
// member, so more could never exist).
func (m Machine) MaxRooms() int {
	n := uint64(m.MaxConnections())
	if m.Memory > 0 {
		n = min(n, m.Memory/2/roomCost)
	}
	return int(max(n, 64))
}

// memTotal is /proc/meminfo's MemTotal in bytes, 0 if unreadable.
func memTotal() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupMemory is the cgroup v2 memory.max of the relay's cgroup, 0 if
// none ("max") or unreadable.
func cgroupMemory() uint64 {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

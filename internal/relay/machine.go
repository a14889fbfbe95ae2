package relay

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
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
// A TCP connection holds one file descriptor and, in the steady state,
// about connCost bytes of the relay's memory: its state and the chunks of
// its join's member lists (about 12 KiB at a 10,000-connection flood's
// peak; it has no goroutine or read buffer of its own, loop.go), rounded
// up to leave room for the Go heap's headroom (its queued bytes count against the memory budget instead,
// budget.go; the kernel's socket buffers are not the relay's). A room holds
// roomCost (its member list and map, the registry's entry, a UDP session
// in it: about 2.5 KiB each measured, rounded up). Half the memory is the
// relay's to spend; fdReserve descriptors stay for the listeners, UDP
// sockets, metrics scrapes and files.
const (
	connCost  = 32 << 10
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
	Memory    uint64 // bytes: MemTotal, or the cgroup's limit if lower; 0: unknown
	// MemoryFrom says where Memory came from: "meminfo", "cgroup v1" or
	// "cgroup v2".
	MemoryFrom string
	// GoLimit is Go's soft memory limit when one was given (GOMEMLIMIT),
	// else 0.
	GoLimit uint64
}

// ReadMachine reads the open-file limit, the memory available (the
// machine's, or its memory cgroup's, v1 or v2, whichever is lower) and Go's
// soft memory limit if GOMEMLIMIT set one.
func ReadMachine() Machine {
	var m Machine
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		m.OpenFiles = rl.Cur
	}
	m.Memory, m.MemoryFrom = memTotal(), "meminfo"
	if lim, from := cgroupMemory("/"); lim > 0 && (m.Memory == 0 || lim < m.Memory) {
		m.Memory, m.MemoryFrom = lim, from
	}
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		m.GoLimit = uint64(l)
	}
	return m
}

// MemoryLimit is what the relay may use: Go's soft limit when one was
// given, else the machine's or its cgroup's memory; 0: unknown.
func (m Machine) MemoryLimit() uint64 {
	if m.GoLimit > 0 && (m.Memory == 0 || m.GoLimit < m.Memory) {
		return m.GoLimit
	}
	return m.Memory
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

// cgroupMemory is the memory limit of the process's memory cgroup and its
// ancestors, the lowest of them, read under root ("/" but in tests): cgroup
// v1's memory.limit_in_bytes or v2's memory.max, for the group named in
// /proc/self/cgroup. A group whose directory is not under the mount (a
// container with its own cgroup namespace sees "/" there, or a path of the
// host's) is read at the mount's top. 0 if there is no limit or none could
// be read.
func cgroupMemory(root string) (limit uint64, from string) {
	b, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var lim uint64
		var v string
		switch {
		case parts[0] == "0" && parts[1] == "":
			lim, v = groupLimit(filepath.Join(root, "sys/fs/cgroup"), parts[2], "memory.max"), "cgroup v2"
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			lim, v = groupLimit(filepath.Join(root, "sys/fs/cgroup/memory"), parts[2], "memory.limit_in_bytes"), "cgroup v1"
		}
		if lim > 0 && (limit == 0 || lim < limit) {
			limit, from = lim, v
		}
	}
	return limit, from
}

// groupLimit is the lowest limit in file of group rel and its ancestors
// under mount, 0 if none.
func groupLimit(mount, rel, file string) uint64 {
	dir := filepath.Join(mount, filepath.Clean("/"+rel))
	if _, err := os.Stat(dir); err != nil {
		dir = mount
	}
	var limit uint64
	for {
		if n := readLimit(filepath.Join(dir, file)); n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
		if len(dir) <= len(mount) {
			return limit
		}
		dir = filepath.Dir(dir)
	}
}

// noLimit: cgroup v1 writes "no limit" as the largest page-aligned int64;
// anything from here up is no limit.
const noLimit = 1 << 62

// readLimit is one limit file's value, 0 for "max", no limit or unreadable.
func readLimit(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n >= noLimit {
		return 0
	}
	return n
}

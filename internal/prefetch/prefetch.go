// Package prefetch asks the CPU to bring memory into its caches before it
// is used: a hint, with no effect on what a program computes.
//
// It is for a loop that works through many objects, each cold by the
// time it comes round again, and knows the next objects' addresses while
// it works on the current one: the fleet's poller, which reads hundreds
// of clients in turn and knows which it will read next (issue 34: each
// read began with a chain of cache misses, client after client, that a
// plain load cannot overlap with the read's system call, whose entry
// waits for outstanding loads). It is not for memory the loop is about
// to read anyway: a prefetch costs a call.
//
// On amd64 and arm64 Lines issues one prefetch instruction per address;
// elsewhere it does nothing.
package prefetch

// Max is how many addresses one call of Lines takes.
const Max = 8

// Addrs are the addresses of the cache lines one object's use touches
// first; zero entries are skipped.
type Addrs [Max]uintptr

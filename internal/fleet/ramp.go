package fleet

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"time"
)

// warnRamp warns at start when the ramp outlasts the run: the last
// clients would never attempt a login.
func (f *Fleet) warnRamp() {
	c := &f.cfg
	ramp := c.loginAt(c.Clients - 1)
	if c.Duration <= 0 || ramp <= c.Duration {
		return
	}
	reach := sort.Search(c.Clients, func(i int) bool { return c.loginAt(i) > c.Duration })
	f.warn("WARNING: the login ramp takes %v (%d clients, one every %v) but --duration is %v: only about %d clients will attempt a login; shorten --login-interval or lengthen --duration",
		ramp, c.Clients, c.LoginInterval, c.Duration, reach)
}

// rampProgress is the progress line's ramp part while logins are still to
// be attempted: this process's attempts so far, the level the ramp is at
// (when it steps through levels), and when the fleet's last login is due,
// the waits at the levels before it counted.
func (f *Fleet) rampProgress(attempts int64) string {
	c := &f.cfg
	mine := int64(c.Shard.Clients(c.Clients))
	if attempts >= mine {
		return ""
	}
	done := int(f.levelsDone.Load())
	eta := rampETA(c, time.Duration(f.now()), time.Duration(f.rampShift.Load()), done)
	level := ""
	if n := len(c.Levels); n > 0 {
		k := min(done, n-1)
		verb := "level"
		if f.holding.Load() {
			verb = "holding level"
		}
		level = fmt.Sprintf(", %s %d of %d (%d clients)", verb, k+1, n, c.Levels[k])
	}
	return fmt.Sprintf(" | ramp %d/%d%s, last login in %s", attempts, mine, level, eta)
}

// rampETA is the time to the fleet's last login at now on the run's
// clock: its place on the login schedule, shifted by the waits at the
// levels passed so far, plus one LevelHold for each level still to come
// before it. Without LevelHold it says how many holds come on top.
func rampETA(c *Config, now, shift time.Duration, levelsDone int) string {
	last := c.loginAt(c.Clients - 1)
	holds := 0
	for _, l := range c.Levels[min(levelsDone, len(c.Levels)):] {
		if l <= c.Clients-1 { // waited at before the last login
			holds++
		}
	}
	eta := max(last+shift+time.Duration(holds)*c.LevelHold-now, 0).Round(time.Second)
	switch {
	case holds == 0 || c.LevelHold > 0:
		return eta.String()
	case holds == 1:
		return eta.String() + " plus 1 level hold"
	}
	return fmt.Sprintf("%v plus %d level holds", eta, holds)
}

// checkSourceIPs makes sure every --source-ips address belongs to this
// host: connecting from another one fails with the same error as running
// out of ports, which would mislead.
func checkSourceIPs(ips []string) error {
	for _, s := range ips {
		ip := netip.MustParseAddr(s)
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		if err != nil {
			return badf("--source-ips %s: not an address of this host (%v)", s, err)
		}
		ln.Close()
	}
	return nil
}

// quoteBytes shows bytes received from a server: quoted text, with the
// hex as well when most of it is not printable.
func quoteBytes(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	q := strconv.QuoteToASCII(string(b))
	printable := 0
	for _, c := range b {
		if c >= 0x20 && c < 0x7f || c == '\r' || c == '\n' || c == '\t' {
			printable++
		}
	}
	if printable*2 < len(b) {
		q = fmt.Sprintf("%s (hex % x)", q, b)
	}
	return fmt.Sprintf("%d bytes %s", len(b), q)
}

// notesShown is how many capture notes are printed at start; the summary
// (--summary) holds them all.
const notesShown = 3

// printNotes prints the capture's and script's notes at start: how many,
// and the first few.
func (f *Fleet) printNotes() {
	if len(f.notes) == 0 {
		return
	}
	fmt.Fprintf(f.cfg.Out, "capture: %d notes (all in the summary's notes)\n", len(f.notes))
	for _, n := range f.notes[:min(len(f.notes), notesShown)] {
		fmt.Fprintf(f.cfg.Out, "  note: %s\n", n)
	}
	if len(f.notes) > notesShown {
		fmt.Fprintf(f.cfg.Out, "  ... and %d more\n", len(f.notes)-notesShown)
	}
}

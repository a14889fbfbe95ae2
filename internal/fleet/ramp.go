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
// be attempted: this process's attempts so far, and when the fleet's last
// login is due.
func (f *Fleet) rampProgress(attempts int64) string {
	c := &f.cfg
	mine := int64(c.Shard.Clients(c.Clients))
	if attempts >= mine {
		return ""
	}
	eta := max(c.loginAt(c.Clients-1)-time.Duration(f.now()), 0)
	return fmt.Sprintf(" | ramp %d/%d, last login in %v", attempts, mine, eta.Round(time.Second))
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

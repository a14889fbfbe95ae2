// Package live records a session from a network interface with libpcap
// (gopacket/pcap, cgo) into a pcap or pcapng file, writing as it goes.
//
// It is the privileged path: it needs root or CAP_NET_RAW. The recording
// proxy in internal/capture needs neither. Reading captures is
// internal/capture's job; this package only writes them.
package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/pcap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Config is what `record live` is told.
type Config struct {
	Iface    string        // interface name (default lo)
	Port     uint16        // the relay's port (default wire.DefaultPort)
	Proto    string        // tcp, udp or both (default both)
	Client   string        // host or host:port: keep one client only
	Filter   string        // a BPF filter given by hand; replaces the built one
	Out      string        // .pcap or .pcapng
	Duration time.Duration // 0: until ctx ends
	Snaplen  int           // default 262144
	Buffer   int           // kernel buffer bytes; 0: DefaultBuffer
	// Progress receives a status line about once a second (nil: none).
	Progress io.Writer
	// TLSKeyLog is a key log file (SSLKEYLOGFILE) the recorded client
	// writes: when the capture ends, its secrets go into the pcapng as a
	// Decryption Secrets Block, so the file opens decrypted.
	TLSKeyLog string
}

// Result is what a capture wrote and what libpcap saw.
type Result struct {
	Packets, Bytes    int64
	Received, Dropped int // libpcap: packets received by the filter, dropped by the kernel
	IfDropped         int // dropped by the interface or driver
	Filter            string
	Elapsed           time.Duration
	// StatsLost says libpcap's counts are missing: the handle had to be
	// closed under a read that did not return.
	StatsLost bool
	// Secrets is how many connections' TLS secrets were added.
	Secrets int
}

// DefaultBuffer is the kernel capture buffer when none is given: room for
// a few seconds of a busy loopback.
const DefaultBuffer = 32 << 20

// ErrPermission means the process may not capture.
var ErrPermission = errors.New("no permission to capture: live capture needs root or CAP_NET_RAW (try `sudo`, `setcap cap_net_raw+ep`, or `record proxy`, which needs no privileges)")

// BuildFilter makes the BPF filter for a port, a protocol and optionally
// one client (host or host:port).
func BuildFilter(port uint16, proto, client string) (string, error) {
	var f string
	switch proto {
	case "", "both":
		f = fmt.Sprintf("(tcp or udp) and port %d", port)
	case "tcp", "udp":
		f = fmt.Sprintf("%s port %d", proto, port)
	default:
		return "", fmt.Errorf("--proto %q: want tcp, udp or both", proto)
	}
	if client == "" {
		return f, nil
	}
	host, cport := client, ""
	if h, p, err := net.SplitHostPort(client); err == nil {
		host, cport = h, p
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", fmt.Errorf("--client %q: want an IP address, optionally with :port", client)
	}
	f += " and host " + ip.String()
	if cport != "" {
		n, err := strconv.ParseUint(cport, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("--client %q: bad port", client)
		}
		// The client's port is the one that is not the relay's.
		f += fmt.Sprintf(" and port %d", n)
	}
	return f, nil
}

func (c *Config) defaults() {
	if c.Iface == "" {
		c.Iface = "lo"
	}
	if c.Port == 0 {
		c.Port = wire.DefaultPort
	}
	if c.Snaplen <= 0 {
		c.Snaplen = capture.DefaultSnaplen
	}
	if c.Buffer <= 0 {
		c.Buffer = DefaultBuffer
	}
}

// Run captures until ctx ends or the duration passes, and always leaves a
// valid file behind once it has started writing. The output file is
// created (an existing one replaced) only once the capture has started:
// the interface opened and the filter set, so a capture that cannot start
// leaves an existing file as it was.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	res := Result{Filter: cfg.Filter}
	if res.Filter == "" {
		f, err := BuildFilter(cfg.Port, cfg.Proto, cfg.Client)
		if err != nil {
			return res, err
		}
		res.Filter = f
	}
	if cfg.Out == "" {
		return res, errors.New("--out: no output file given")
	}
	if cfg.TLSKeyLog != "" && capture.FormatFor(cfg.Out) != capture.PCAPNG {
		return res, fmt.Errorf("--tls-keylog: %s is a .pcap, which has no room for decryption secrets: write a .pcapng", cfg.Out)
	}
	if err := checkIface(cfg.Iface); err != nil {
		return res, err
	}
	if err := checkWritable(cfg.Out); err != nil {
		return res, err
	}
	h, err := open(cfg)
	if err != nil {
		return res, err
	}
	defer h.Close()
	if err := h.SetBPFFilter(res.Filter); err != nil {
		return res, fmt.Errorf("filter %q: %w", res.Filter, err)
	}
	file, err := os.OpenFile(cfg.Out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return res, fmt.Errorf("cannot write output file: %w", err)
	}
	w, err := capture.NewWriter(file, capture.FormatFor(cfg.Out), h.LinkType(), uint32(cfg.Snaplen))
	if err != nil {
		file.Close()
		return res, err
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "record: capturing on %s (link type %s, filter %q) into %s; Ctrl-C to stop\n", cfg.Iface, h.LinkType(), res.Filter, cfg.Out)
	}
	err = loop(ctx, cfg, h, w, &res)
	if cerr := w.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if cerr := file.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close output file: %w", cerr)
	}
	res.Packets, res.Bytes = w.Stats()
	if !res.StatsLost {
		if st, serr := h.Stats(); serr == nil {
			res.Received, res.Dropped, res.IfDropped = st.PacketsReceived, st.PacketsDropped, st.PacketsIfDropped
		}
	}
	if err == nil && cfg.TLSKeyLog != "" {
		res.Secrets, err = addSecrets(cfg.Out, cfg.TLSKeyLog)
	}
	return res, err
}

// addSecrets puts the key log's secrets into the capture; the capture
// stays as it was, without them, when the key log cannot be used.
func addSecrets(out, keyLog string) (int, error) {
	b, err := os.ReadFile(keyLog)
	if err != nil {
		return 0, fmt.Errorf("--tls-keylog: %w: %s was written without TLS secrets", err, out)
	}
	k, err := capture.ParseKeyLog(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("--tls-keylog %s: %w: %s was written without TLS secrets", keyLog, err, out)
	}
	return k.Len(), capture.InjectSecrets(out, b)
}

// checkWritable fails early, before the capture starts, when the output
// file cannot be written, without touching an existing one.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot write output file: %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("cannot write output file: %s: %w", path, err)
		}
	}
	return nil
}

// checkIface fails with the list of interfaces when name is not one.
func checkIface(name string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	names := []string{"any"}
	for _, i := range ifs {
		if i.Name == name {
			return nil
		}
		names = append(names, i.Name)
	}
	if name == "any" {
		return nil
	}
	sort.Strings(names)
	return fmt.Errorf("unknown interface %q; interfaces here: %s", name, strings.Join(names, ", "))
}

func open(cfg Config) (*pcap.Handle, error) {
	in, err := pcap.NewInactiveHandle(cfg.Iface)
	if err != nil {
		return nil, classify(cfg.Iface, err)
	}
	defer in.CleanUp()
	for _, set := range []func() error{
		func() error { return in.SetSnapLen(cfg.Snaplen) },
		func() error { return in.SetPromisc(false) },
		func() error { return in.SetTimeout(100 * time.Millisecond) },
		// No immediate mode: libpcap then uses TPACKET_V3, whose ring
		// packs packets by their real size. In immediate mode each ring
		// slot is snaplen bytes, and a 262144 snaplen leaves a handful of
		// slots: a busy moment drops packets.
		func() error { return in.SetBufferSize(cfg.Buffer) },
	} {
		if err := set(); err != nil {
			return nil, fmt.Errorf("configure capture on %s: %w", cfg.Iface, err)
		}
	}
	h, err := in.Activate()
	if err != nil {
		return nil, classify(cfg.Iface, err)
	}
	return h, nil
}

// classify turns libpcap's activation errors into the clear ones.
func classify(iface string, err error) error {
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "permission") || strings.Contains(msg, "not permitted"):
		return fmt.Errorf("capture on %s: %w", iface, ErrPermission)
	case strings.Contains(msg, "no such device"):
		return fmt.Errorf("unknown interface %q: %w", iface, err)
	}
	return fmt.Errorf("capture on %s: %w", iface, err)
}

// unblockAfter is how long the capture loop may take to notice the end of
// its run before the handle is closed under it: libpcap's read can block
// past its timeout when no packets arrive (TPACKET_V3), and the end must
// not wait for the next packet.
const unblockAfter = time.Second

func loop(ctx context.Context, cfg Config, h *pcap.Handle, w *capture.Writer, res *Result) error {
	start := time.Now()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	// A watchdog closes the handle if the loop has not returned a moment
	// after the end: the blocked read then returns (pcap_breakloop).
	done := make(chan struct{})
	var closed atomic.Bool
	defer func() { res.StatsLost = closed.Load() }()
	var watch sync.WaitGroup
	watch.Go(func() {
		select {
		case <-done:
		case <-ctx.Done():
			t := time.NewTimer(unblockAfter)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				closed.Store(true)
				h.Close()
			}
		}
	})
	defer func() { close(done); watch.Wait() }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer func() { res.Elapsed = time.Since(start) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := w.Flush(); err != nil {
				return err
			}
			progress(cfg.Progress, w, start)
		default:
		}
		data, ci, err := h.ReadPacketData()
		if err != nil {
			if errors.Is(err, pcap.NextErrorTimeoutExpired) {
				continue
			}
			if ctx.Err() != nil {
				return nil // the watchdog closed the handle
			}
			return fmt.Errorf("capture on %s: %w", cfg.Iface, err)
		}
		if err := w.WritePacket(ci, data); err != nil {
			return err
		}
	}
}

func progress(out io.Writer, w *capture.Writer, start time.Time) {
	if out == nil {
		return
	}
	p, b := w.Stats()
	fmt.Fprintf(out, "record: %d packets, %.1f KiB, %ds\n", p, float64(b)/1024, int(time.Since(start).Seconds()))
}

// Command record captures a client's session into a pcap or pcapng file:
// `record live` with libpcap, or `record proxy` as a recording proxy that
// needs no privileges.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/capture/live"
	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/wire"
)

func main() {
	// The first signal ends the capture with a valid file; a second one
	// exits at once.
	cli.Main("record", "", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stderr) })
}

// usageError marks bad arguments (exit 2).
func usageError(err error) error { return cli.UsageError{Err: err} }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "record",
		Short:         "capture a client's session into a pcap or pcapng file",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError(errors.New("say what to do: record live or record proxy (--help for more)"))
		},
	}
	root.SetErr(stderr)
	root.AddCommand(liveCmd(ctx, stderr), proxyCmd(ctx, stderr), caCmd(stderr))
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	for _, c := range append(root.Commands(), root) {
		check := c.Args
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError(err)
			}
			return nil
		}
	}
	err := root.Execute()
	// cobra's own "required flag" check is a usage error too.
	if err != nil && strings.Contains(err.Error(), "required flag") {
		return usageError(err)
	}
	return err
}

func withDuration(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

func liveCmd(ctx context.Context, stderr io.Writer) *cobra.Command {
	var cfg live.Config
	var port uint16
	cmd := &cobra.Command{
		Use:   "live",
		Short: "capture with libpcap (needs root or CAP_NET_RAW)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Port, cfg.Progress = port, stderr
			if cfg.Proto != "" && cfg.Proto != "both" && cfg.Proto != "tcp" && cfg.Proto != "udp" {
				return usageError(fmt.Errorf("--proto %q: want tcp, udp or both", cfg.Proto))
			}
			res, err := live.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if res.StatsLost {
				fmt.Fprintln(stderr, "record: WARNING: libpcap's read did not return at the end: the capture was stopped under it and its received/dropped counts are unknown")
			}
			fmt.Fprintf(stderr, "record: wrote %d packets (%d bytes) to %s in %.1fs; filter %q; libpcap received %d, dropped %d (interface %d)\n",
				res.Packets, res.Bytes, cfg.Out, res.Elapsed.Seconds(), res.Filter, res.Received, res.Dropped, res.IfDropped)
			if res.Secrets > 0 {
				fmt.Fprintf(stderr, "record: added the TLS secrets of %d connections from %s (a decryption secrets block: Wireshark and replay inspect open the file decrypted; it holds every secret of the key log)\n", res.Secrets, cfg.TLSKeyLog)
			}
			if res.Dropped > 0 || res.IfDropped > 0 {
				fmt.Fprintf(stderr, "record: WARNING: the kernel dropped %d packets: the capture has gaps (try a larger --buffer)\n", res.Dropped+res.IfDropped)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Iface, "iface", "lo", "interface to capture on")
	f.Uint16Var(&port, "port", wire.DefaultPort, "the relay's port")
	f.StringVar(&cfg.Proto, "proto", "both", "tcp, udp or both")
	f.StringVar(&cfg.Client, "client", "", "keep one client only: host or host:port")
	f.StringVar(&cfg.Out, "out", "", "output file: .pcap, or .pcapng for pcapng (required)")
	f.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	f.IntVar(&cfg.Snaplen, "snaplen", capture.DefaultSnaplen, "bytes kept per packet")
	f.IntVar(&cfg.Buffer, "buffer", live.DefaultBuffer, "kernel capture buffer in bytes")
	f.StringVar(&cfg.Filter, "filter", "", "BPF filter to use instead of the one built from the flags")
	f.StringVar(&cfg.TLSKeyLog, "tls-keylog", "", "the key log (SSLKEYLOGFILE) the recorded client writes: its secrets go into the .pcapng when the capture ends, so it opens decrypted")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func proxyCmd(ctx context.Context, stderr io.Writer) *cobra.Command {
	var listen, upstream, out string
	var duration time.Duration
	var tf tlsFlags
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "forward clients to the relay and record what passes (no privileges needed)",
		Long: `Forward clients to the upstream and record what passes: TCP per connection,
UDP per client address. With --tls-cert/--tls-key, or --ca-cert/--ca-key
(a CA from record ca: a certificate minted per server name), the proxy
terminates the clients' TLS; with --upstream-tls it speaks TLS to the
upstream. The capture holds the plaintext, as ordinary flows on the real
ports; in a .pcapng each TLS connection is noted with its version, SNI, ALPN
and cipher, which replay inspect shows.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ptls, err := tf.config(upstream, stderr)
			if err != nil {
				return err
			}
			if ptls.terminates() && capture.FormatFor(out) != capture.PCAPNG {
				fmt.Fprintf(stderr, "record: note: %s is a .pcap, which keeps no notes: its flows hold the plaintext but not that they were TLS (SNI, ALPN, version); write a .pcapng to keep them\n", out)
			}
			// Written to a temporary file beside --out, renamed over it
			// once the proxy is listening: a proxy that cannot start
			// leaves an existing file as it was.
			w, tmp, err := capture.CreateTemp(out, layers.LinkTypeEthernet, capture.DefaultSnaplen)
			if err != nil {
				return err
			}
			p, err := capture.NewProxy(capture.ProxyConfig{Listen: listen, Upstream: upstream, Writer: w, TLS: ptls.cfg})
			if err != nil {
				return errors.Join(err, w.Close(), os.Remove(tmp))
			}
			if err := os.Rename(tmp, out); err != nil {
				stopped, stop := context.WithCancel(ctx)
				stop() // Run on an ended context just releases the listeners
				return errors.Join(fmt.Errorf("create capture file: %w", err), p.Run(stopped), w.Close(), os.Remove(tmp))
			}
			fmt.Fprintf(stderr, "record: proxy on %s (tcp+udp%s) -> %s%s, writing %s (Ctrl-C to stop)\n", p.Addr(), ptls.down(), upstream, ptls.up(), out)
			runCtx, cancel := withDuration(ctx, duration)
			defer cancel()
			err = errors.Join(p.Run(runCtx), w.Close())
			packets, bytes := w.Stats()
			st := p.Stats()
			fmt.Fprintf(stderr, "record: wrote %d packets (%d bytes) to %s: %d TCP connections, %d UDP clients, %d upstream dial failures\n",
				packets, bytes, out, st.TCPConns, st.UDPClients, st.DialFailures)
			if st.TLSFailures > 0 {
				fmt.Fprintf(stderr, "record: WARNING: %d TLS handshakes failed and were not recorded; the last: %s\n", st.TLSFailures, st.LastTLSError)
			}
			if err == nil && st.TCPConns == 0 && st.UDPClients == 0 && st.TLSFailures > 0 {
				return fmt.Errorf("recorded nothing: every connection failed its TLS handshake (the last: %s)", st.LastTLSError)
			}
			return err
		},
	}
	f := cmd.Flags()
	listen, upstream = "127.0.0.1:7500", wire.Loopback(wire.DefaultPort)
	f.Var(cli.Addr{P: &listen, Listen: true}, "listen", "address clients connect to (TCP and UDP)")
	f.Var(cli.Addr{P: &upstream}, "upstream", "the relay's address")
	f.StringVar(&out, "out", "", "output file: .pcap, or .pcapng for pcapng (required)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	tf.flags(f)
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

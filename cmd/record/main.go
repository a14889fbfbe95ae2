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
	"os/signal"
	"syscall"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/capture/live"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "record",
		Short:         "capture a client's session into a pcap or pcapng file",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetErr(stderr)
	root.AddCommand(liveCmd(ctx, stderr), proxyCmd(ctx, stderr))
	root.SetArgs(args)
	return root.Execute()
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
			res, err := live.Run(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "record: wrote %d packets (%d bytes) to %s in %.1fs; filter %q; libpcap received %d, dropped %d (interface %d)\n",
				res.Packets, res.Bytes, cfg.Out, res.Elapsed.Seconds(), res.Filter, res.Received, res.Dropped, res.IfDropped)
			if res.Dropped > 0 || res.IfDropped > 0 {
				fmt.Fprintf(stderr, "record: WARNING: the kernel dropped %d packets: the capture has gaps (try a larger --buffer)\n", res.Dropped+res.IfDropped)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Iface, "iface", "lo", "interface to capture on")
	f.Uint16Var(&port, "port", capture.DefaultServerPort, "the relay's port")
	f.StringVar(&cfg.Proto, "proto", "both", "tcp, udp or both")
	f.StringVar(&cfg.Client, "client", "", "keep one client only: host or host:port")
	f.StringVar(&cfg.Out, "out", "", "output file: .pcap, or .pcapng for pcapng (required)")
	f.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	f.IntVar(&cfg.Snaplen, "snaplen", capture.DefaultSnaplen, "bytes kept per packet")
	f.IntVar(&cfg.Buffer, "buffer", live.DefaultBuffer, "kernel capture buffer in bytes")
	f.StringVar(&cfg.Filter, "filter", "", "BPF filter to use instead of the one built from the flags")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func proxyCmd(ctx context.Context, stderr io.Writer) *cobra.Command {
	var listen, upstream, out string
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "forward clients to the relay and record what passes (no privileges needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w, err := capture.Create(out, layers.LinkTypeEthernet, capture.DefaultSnaplen)
			if err != nil {
				return err
			}
			p, err := capture.NewProxy(capture.ProxyConfig{Listen: listen, Upstream: upstream, Writer: w})
			if err != nil {
				return errors.Join(err, w.Close())
			}
			fmt.Fprintf(stderr, "record: proxy on %s (tcp+udp) -> %s, writing %s (Ctrl-C to stop)\n", p.Addr(), upstream, out)
			runCtx, cancel := withDuration(ctx, duration)
			defer cancel()
			err = errors.Join(p.Run(runCtx), w.Close())
			packets, bytes := w.Stats()
			st := p.Stats()
			fmt.Fprintf(stderr, "record: wrote %d packets (%d bytes) to %s: %d TCP connections, %d UDP clients, %d upstream dial failures\n",
				packets, bytes, out, st.TCPConns, st.UDPClients, st.DialFailures)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:7500", "address clients connect to (TCP and UDP)")
	f.StringVar(&upstream, "upstream", "127.0.0.1:7400", "the relay's address")
	f.StringVar(&out, "out", "", "output file: .pcap, or .pcapng for pcapng (required)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// Command reorder writes a copy of a pcap file with its packets in the
// order a capture on a multi-queue NIC would have written them (see
// capturetest.Reorder):
//
//	go run ./internal/capture/testdata/reorder -seed 1 captures/vr-session.pcap /tmp/reordered.pcap
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
)

func main() {
	var nic capturetest.NIC
	flag.Uint64Var(&nic.Seed, "seed", 1, "random seed")
	flag.IntVar(&nic.Queues, "queues", 4, "receive queues")
	flag.IntVar(&nic.Batch, "batch", 16, "most packets a queue hands over at once")
	flag.Float64Var(&nic.Migrate, "migrate", 1.0/40, "chance per packet that its flow moves to another queue")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: reorder [flags] IN.pcap OUT.pcap")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), nic); err != nil {
		fmt.Fprintln(os.Stderr, "reorder:", err)
		os.Exit(1)
	}
}

func run(in, out string, nic capturetest.NIC) error {
	r, err := os.Open(in)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	n, err := capturetest.Reorder(r, w, nic)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d packets overtaken\n", out, n)
	return nil
}

// Command manyflows writes a capture of many short recorded clients (see
// capturetest.WriteFlows), for the memory figures in docs/performance.md:
//
//	go run ./internal/capture/testdata/manyflows -flows 300000 /tmp/300k.pcap
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
)

func main() {
	var f capturetest.Flows
	flag.IntVar(&f.N, "flows", 1000, "number of flows")
	flag.IntVar(&f.Sends, "sends", 3, "sends per flow")
	flag.IntVar(&f.Payload, "payload", 50, "bytes of payload per send")
	flag.IntVar(&f.Overlap, "overlap", 8, "flows open at once")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: manyflows [flags] OUT.pcap")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), f); err != nil {
		fmt.Fprintln(os.Stderr, "manyflows:", err)
		os.Exit(1)
	}
}

func run(path string, f capturetest.Flows) error {
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	n, err := capturetest.WriteFlows(w, f)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d flows, %d bytes\n", path, f.N, n)
	return nil
}

// Package cli holds what every reprise command (relay, record, replay,
// vrclient) shares at its edge: one exit-code table, the usage error that
// maps to exit 2, and signal handling (the first SIGINT/SIGTERM cancels
// the run so it ends cleanly, a second exits at once). It is for main
// packages only; library code returns errors and never exits.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes, the same for every command (the README's table).
const (
	ExitOK        = 0
	ExitFailure   = 1   // a failure at run time
	ExitUsage     = 2   // bad usage: flags, arguments, configuration
	ExitInterrupt = 130 // a second interrupt
)

// UsageError marks bad arguments: it exits with ExitUsage.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Code is the exit code for err: ExitOK for nil, ExitUsage for a
// UsageError or an error that is one of usage, else ExitFailure.
func Code(err error, usage ...error) int {
	if err == nil {
		return ExitOK
	}
	var u UsageError
	if errors.As(err, &u) {
		return ExitUsage
	}
	for _, target := range usage {
		if errors.Is(err, target) {
			return ExitUsage
		}
	}
	return ExitFailure
}

// Main runs run under a context that the first SIGINT or SIGTERM cancels
// (printing onFirst, when not empty, as "name: onFirst"); a second signal
// prints "name: interrupted" and exits with ExitInterrupt at once. An
// error from run is printed as one line, "name: error", and the process
// exits with Code(err, usage...).
func Main(name, onFirst string, run func(ctx context.Context) error, usage ...error) {
	os.Exit(main(name, onFirst, os.Stderr, run, usage...))
}

func main(name, onFirst string, stderr io.Writer, run func(ctx context.Context) error, usage ...error) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		if onFirst != "" {
			fmt.Fprintf(stderr, "%s: %s\n", name, onFirst)
		}
		cancel()
		<-sig
		fmt.Fprintf(stderr, "%s: interrupted\n", name)
		os.Exit(ExitInterrupt)
	}()
	err := run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return Code(err, usage...)
}

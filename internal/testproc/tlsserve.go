package testproc

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
)

// ServeTLS serves TLS with cfg on 127.0.0.1 (a free port), running
// handle on each accepted connection in a goroutine of its own, and
// returns the listener's address. The test's cleanup closes the listener
// and every connection still open, then waits for the accept loop and
// every handle to return: nothing outlives the test.
func ServeTLS(t testing.TB, cfg *tls.Config, handle func(net.Conn)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, handle)
}

// ServeTCP is ServeTLS in cleartext: a small server of the test's own
// (hostile, silent or scripted) on 127.0.0.1, stopped with the test.
func ServeTCP(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, handle)
}

// serve runs ln's accept loop and the handles for ServeTLS and ServeTCP.
func serve(t testing.TB, ln net.Listener, handle func(net.Conn)) string {
	var (
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			open[c] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

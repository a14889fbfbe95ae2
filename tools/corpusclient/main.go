// Command corpusclient plays the short client sessions that
// internal/capture/testdata/realtool/make.sh records with tcpdump: cases
// the capture reader must get right and that only real traffic shows
// (a client port reused after an RST, UDP datagrams, a server that talks
// first). It is a test tool, not part of the harness.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/wire"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "corpusclient:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("corpusclient", flag.ContinueOnError)
	target := wire.Loopback(wire.DefaultPort)
	fs.Var(cli.Addr{P: &target}, "target", "relay address host:port")
	mode := fs.String("mode", "rst-reuse", "rst-reuse, udp or talk")
	port := fs.Int("local-port", 45678, "rst-reuse: the client port every connection uses")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch *mode {
	case "rst-reuse":
		return rstReuse(target, *port)
	case "udp":
		return udp(target)
	case "talk":
		return talk(target)
	}
	return fmt.Errorf("--mode %q: rst-reuse, udp or talk", *mode)
}

func send(payload string) []byte {
	return wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: []byte(payload)})
}

// rstReuse connects three times from one local port: the first two
// connections end with an RST (SO_LINGER 0), the last with a FIN.
func rstReuse(target string, port int) error {
	for i := range 3 {
		d := net.Dialer{
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
				return errors.Join(err, serr)
			},
		}
		var c net.Conn
		var err error
		for range 50 { // the port may still be in TIME_WAIT after a FIN
			if c, err = d.Dial("tcp", target); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		tc := c.(*net.TCPConn)
		b := wire.AppendJoin(nil, "corpus", fmt.Sprintf("conn-%d", i), nil, 0)
		if _, err := tc.Write(b); err != nil {
			return err
		}
		readSome(tc)
		for k := range 3 {
			time.Sleep(20 * time.Millisecond)
			if _, err := tc.Write(send(fmt.Sprintf("conn %d send %d", i, k))); err != nil {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
		if i < 2 {
			tc.SetLinger(0) // close with an RST
		} else {
			tc.Write(wire.AppendLeave(nil))
			readSome(tc)
		}
		tc.Close()
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func readSome(c net.Conn) {
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	c.Read(buf)
	c.SetReadDeadline(time.Time{})
}

// udp joins over UDP, sends five frames 20 ms apart and leaves.
func udp(target string) error {
	c, err := net.Dial("udp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	join := wire.AppendDatagram(nil, 0)
	join = wire.AppendJoin(join, "corpus", "udp-alice", nil, wire.UDPJoinPad-wire.TokenSize-len(wire.AppendJoin(nil, "corpus", "udp-alice", nil, 0)))
	if _, err := c.Write(join); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("joined: %w", err)
	}
	var f wire.Frame
	if _, err := wire.Decode(buf[:n], wire.DefaultMaxFrame, &f); err != nil || f.Type != wire.TypeJoined {
		return fmt.Errorf("want joined, got % x", buf[:n])
	}
	for k := range 5 {
		time.Sleep(20 * time.Millisecond)
		if _, err := c.Write(append(wire.AppendDatagram(nil, f.SessionToken), send(fmt.Sprintf("udp send %d", k))...)); err != nil {
			return err
		}
	}
	_, err = c.Write(append(wire.AppendDatagram(nil, f.SessionToken), wire.AppendLeave(nil)...))
	return err
}

// talk: alice joins; a second later bob joins and sends three broadcasts,
// which the relay delivers to alice; then alice sends three frames and
// both leave. A capture cut after alice's join starts with the server
// talking to her.
func talk(target string) error {
	alice, err := net.Dial("tcp", target)
	if err != nil {
		return err
	}
	defer alice.Close()
	alice.Write(wire.AppendJoin(nil, "corpus", "alice", nil, 0))
	readSome(alice)
	time.Sleep(time.Second)
	bob, err := net.Dial("tcp", target)
	if err != nil {
		return err
	}
	defer bob.Close()
	bob.Write(wire.AppendJoin(nil, "corpus", "bob", nil, 0))
	readSome(bob)
	for k := range 3 {
		bob.Write(send(fmt.Sprintf("bob says %d", k)))
		time.Sleep(20 * time.Millisecond)
	}
	readSome(alice)
	for k := range 3 {
		alice.Write(send(fmt.Sprintf("alice says %d", k)))
		time.Sleep(20 * time.Millisecond)
	}
	readSome(bob)
	bob.Write(wire.AppendLeave(nil))
	alice.Write(wire.AppendLeave(nil))
	readSome(alice)
	return nil
}

// Command udpfloor is the floor of UDP fan-out on this machine: the least a
// server can do to relay the bench's rooms over UDP. It exists only to be
// measured beside the relay (`benchcompare --servers ...,floor`), so the
// relay's UDP CPU per delivery reads as a ratio to what the kernel costs.
//
// It speaks just enough of docs/protocol.md over UDP for the bench's load
// client: a join gets a joined with a token (no validation, no limits, no
// member list), a heartbeat gets its reply, and a send is encoded once as
// a deliver and sent to every other member of the room with one sendmmsg
// of that same datagram (one frame per datagram: no packing). One
// goroutine, one socket. It also listens on TCP at the same address, only
// so the harness can see it is up.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/net/ipv4"

	"github.com/reprise-harness/reprise/internal/wire"
)

type member struct {
	room, user string
	addr       *net.UDPAddr
}

func main() {
	addr := flag.String("addr", wire.Loopback(wire.DefaultPort), "UDP (and probe TCP) address")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "udpfloor:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return err
	}
	conn, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetReadBuffer(4 << 20)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; conn.Close() }()
	return serve(conn)
}

func serve(conn *net.UDPConn) error {
	pc := ipv4.NewPacketConn(conn)
	sessions := map[uint64]*member{}
	rooms := map[string][]*member{}
	buf := make([]byte, 64<<10)
	var out []byte
	var msgs []ipv4.Message
	next := uint64(0)
	var f wire.Frame
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return nil // closed by a signal
		}
		token, fr, err := wire.SplitDatagram(buf[:n], wire.DefaultMaxFrame)
		if err != nil || wire.DecodeBody(wire.Type(fr[wire.LenSize]), fr[wire.HeaderSize:], &f) != nil {
			continue
		}
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
		switch f.Type {
		case wire.TypeJoin:
			next++
			m := &member{room: string(f.Room), user: string(f.User), addr: to}
			sessions[next] = m
			rooms[m.room] = append(rooms[m.room], m)
			out = wire.AppendJoined(out[:0], next, string(f.User), []string{string(f.User)})
			conn.WriteToUDP(out, to)
		case wire.TypeHeartbeat:
			out = wire.AppendHeartbeatReply(out[:0], f.Timestamp, f.Timestamp)
			conn.WriteToUDP(out, to)
		case wire.TypeSend:
			m := sessions[token]
			if m == nil {
				continue
			}
			out = wire.AppendDeliver(out[:0], f.Mode, m.user, f.HasTrace, f.Trace, f.Payload)
			same := [][]byte{out} // every message is this one datagram
			msgs = msgs[:0]
			for _, r := range rooms[m.room] {
				if r != m {
					msgs = append(msgs, ipv4.Message{Buffers: same, Addr: r.addr})
				}
			}
			for len(msgs) > 0 {
				k, err := pc.WriteBatch(msgs, 0)
				if err != nil {
					break
				}
				msgs = msgs[k:]
			}
		}
	}
}

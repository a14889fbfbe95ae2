package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// FuzzUDPAmplification feeds arbitrary datagrams from never-confirmed
// sources to the UDP side of a relay whose room is busy, and checks the
// rule of docs/protocol.md: a source that has not proven its address never
// gets back more bytes than its datagram had, whatever the datagram holds.
func FuzzUDPAmplification(f *testing.F) {
	pad := func(room, user string) int {
		return wire.UDPJoinPad - wire.TokenSize - len(wire.AppendJoin(nil, room, user, nil, 0))
	}
	f.Add(wire.AppendJoin(wire.AppendDatagram(nil, 0), "busy", "x", nil, pad("busy", "x")))
	f.Add(wire.AppendJoin(wire.AppendDatagram(nil, 0), "busy", "x", nil, 0))
	f.Add(wire.AppendJoin(wire.AppendDatagram(nil, 0), "busy", "y", nil, 200)) // room for part of the list
	f.Add(wire.AppendJoin(wire.AppendDatagram(nil, 0), "new", "x", nil, 0))
	f.Add(wire.AppendHeartbeat(wire.AppendDatagram(nil, 0), 1))
	f.Add(wire.AppendSend(wire.AppendDatagram(nil, 0), wire.Send{Mode: wire.Broadcast, Payload: []byte("hi")}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 9})
	f.Add([]byte{1, 2, 3})

	// Unconfirmed sessions end at the first sweep after their datagram, so
	// the limits on them never turn every join into server_full.
	s, err := New(Config{Listen: "127.0.0.1:0", UDP: "127.0.0.1:0", Metrics: "off", UDPConfirmTimeout: time.Nanosecond}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.closeSockets)
	u, err := newUDPServer(s, s.udp)
	if err != nil {
		f.Fatal(err)
	}
	// A busy room: confirmed members with long ids, so that any reply
	// with the member list would be large.
	for i := range 40 {
		from := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(20000+i))
		user := string(rune('a'+i%26)) + "-a-member-with-a-rather-long-user-id-" + string(rune('a'+i/26))
		at(u) // as handle sets them
		u.datagram(wire.AppendJoin(wire.AppendDatagram(nil, 0), "busy", user, nil, pad("busy", user)), from)
		c := u.byAddr[from]
		if c == nil {
			f.Fatalf("member %d did not join", i)
		}
		u.datagram(wire.AppendHeartbeat(wire.AppendDatagram(nil, c.token), 1), from)
		u.flush() // as the worker's loop does after each read
	}
	// The source: a socket that counts what it gets, on a fresh loopback
	// address each time. It never learns a token, so it never proves its
	// address.
	buf := make([]byte, 64<<10)
	n := 0
	f.Fuzz(func(t *testing.T, d []byte) {
		n++
		ip := net.IPv4(127, 1, byte(n>>8), byte(n))
		victim, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ip})
		if err != nil {
			t.Fatal(err)
		}
		defer victim.Close()
		at(u)
		u.datagram(d, victim.LocalAddr().(*net.UDPAddr).AddrPort())
		u.flush()
		got := 0
		for {
			victim.SetReadDeadline(time.Now().Add(200 * time.Microsecond))
			m, err := victim.Read(buf)
			if err != nil {
				break
			}
			got += m
		}
		u.sweep(s.now())
		if got > len(d) {
			t.Fatalf("%d bytes sent back to an unproven source for a %d-byte datagram", got, len(d))
		}
	})
}

// at sets the read's clock and the datagram's arrival to now, as handle
// does for a datagram read at once.
func at(u *udpServer) {
	t := time.Now()
	u.r.clock(int64(t.Sub(u.s.epoch)), t)
	u.at = u.r.now
}

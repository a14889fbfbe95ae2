// Package load is benchcompare's load client: rooms of members that each
// send timestamped payloads at a fixed rate to the rest of their room and
// receive everyone else's, over one of two protocols (reprise's wire
// protocol or NATS's text protocol) with the same goroutine model, the same
// pacing and the same accounting. It measures send→deliver latency and
// checks that every message arrived exactly once and in order.
//
// It is a benchmark client for loopback servers, not a replay fleet: it
// sends synthetic payloads, never a recorded session.
package load

import (
	"encoding/binary"
	"fmt"
)

// HeaderLen is the part of every payload the load client reads back: send
// time, room, member and sequence number. The rest is filler.
const HeaderLen = 24

// Stamp is what a payload says about itself.
type Stamp struct {
	SentNs int64  // sender's clock, Unix nanoseconds, taken just before the write
	Room   uint32 // room index
	Member uint32 // sender's index in its room
	Seq    uint64 // per-sender sequence number, from 1
}

// EncodePayload writes s into the first HeaderLen bytes of p, which must be
// at least HeaderLen long; the rest of p is left as it is.
func EncodePayload(p []byte, s Stamp) {
	_ = p[HeaderLen-1]
	binary.BigEndian.PutUint64(p[0:], uint64(s.SentNs))
	binary.BigEndian.PutUint32(p[8:], s.Room)
	binary.BigEndian.PutUint32(p[12:], s.Member)
	binary.BigEndian.PutUint64(p[16:], s.Seq)
}

// DecodePayload reads the stamp back.
func DecodePayload(p []byte) (Stamp, error) {
	if len(p) < HeaderLen {
		return Stamp{}, fmt.Errorf("payload of %d bytes: shorter than the %d-byte stamp", len(p), HeaderLen)
	}
	return Stamp{
		SentNs: int64(binary.BigEndian.Uint64(p[0:])),
		Room:   binary.BigEndian.Uint32(p[8:]),
		Member: binary.BigEndian.Uint32(p[12:]),
		Seq:    binary.BigEndian.Uint64(p[16:]),
	}, nil
}

// Package capturetest makes capture files the way busy hosts write them,
// for tests of internal/capture and of what replays them: packets
// reordered like a multi-queue NIC does. It is not for production reading
// or writing of captures (internal/capture does that).
package capturetest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// NIC shapes the reordering. The zero value uses the defaults.
type NIC struct {
	// Queues is the number of receive queues (default 4).
	Queues int
	// Migrate is the chance per packet that its flow is steered to another
	// queue (the application thread moved; default 1/40): the packets
	// still in the old queue and those in the new one race to the file.
	Migrate float64
	// Batch is the most packets a queue hands to the capture at once
	// (interrupt coalescing; default 16).
	Batch int
	// Stall, if set, holds queue 0's packets until the capture has seen
	// packets that much later (a queue whose CPU was busy elsewhere):
	// its flows' packets come that late in the file.
	Stall time.Duration
	// Seed makes the order reproducible.
	Seed uint64
}

func (n NIC) withDefaults() NIC {
	if n.Queues <= 0 {
		n.Queues = 4
	}
	if n.Migrate <= 0 {
		n.Migrate = 1.0 / 40
	}
	if n.Batch <= 0 {
		n.Batch = 16
	}
	return n
}

type packet struct {
	ci   gopacket.CaptureInfo
	data []byte
	in   int // index in the input
}

// reorderer is the queues and the writer they drain into.
type reorderer struct {
	w         *pcapgo.Writer
	queues    [][]packet
	highest   int // the highest input index written so far
	overtaken int // packets written after one that came later in the input
}

// drain writes up to n packets of queue q.
func (r *reorderer) drain(q, n int) error {
	n = min(n, len(r.queues[q]))
	for _, p := range r.queues[q][:n] {
		if err := r.w.WritePacket(p.ci, p.data); err != nil {
			return fmt.Errorf("reorder: %w", err)
		}
		if p.in < r.highest {
			r.overtaken++
		}
		r.highest = max(r.highest, p.in)
	}
	r.queues[q] = r.queues[q][n:]
	return nil
}

// Reorder copies a pcap file, packets in the order a capture on a
// multi-queue NIC would have written them: each flow is hashed to a queue
// and now and then steered to another, the capture drains the queues in
// batches, and every packet keeps its own timestamp (so times go back and
// forth in the file, and one flow's segments and datagrams overtake each
// other where it moved queues). It returns how many packets were written
// after one that came later in the input.
func Reorder(in io.Reader, out io.Writer, nic NIC) (int, error) {
	nic = nic.withDefaults()
	pr, err := pcapgo.NewReader(in)
	if err != nil {
		return 0, fmt.Errorf("reorder: %w", err)
	}
	r := &reorderer{w: pcapgo.NewWriterNanos(out), queues: make([][]packet, nic.Queues), highest: -1}
	if err := r.w.WriteFileHeader(max(pr.Snaplen(), 65535), pr.LinkType()); err != nil {
		return 0, fmt.Errorf("reorder: %w", err)
	}
	rng := rand.New(rand.NewPCG(nic.Seed, 0x5eed))
	steer := map[uint64]int{} // flow hash → queue
	next := 0                 // the queue the capture looks at first
	for i := 0; ; i++ {
		data, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			return r.overtaken, fmt.Errorf("reorder: packet %d: %w", i+1, err)
		}
		h := flowHash(data, pr.LinkType())
		q, ok := steer[h]
		if !ok || rng.Float64() < nic.Migrate {
			q = rng.IntN(nic.Queues)
			steer[h] = q
		}
		r.queues[q] = append(r.queues[q], packet{ci, data, i})
		if nic.Stall > 0 {
			// The stalled queue lets go of what has waited long enough.
			held := 0
			for held < len(r.queues[0]) && ci.Timestamp.Sub(r.queues[0][held].ci.Timestamp) > nic.Stall {
				held++
			}
			if err := r.drain(0, held); err != nil {
				return r.overtaken, err
			}
		}
		// The capture wakes up now and then and takes a batch from the
		// next queue that holds packets.
		if rng.IntN(4) == 0 {
			for k := range nic.Queues {
				if q := (next + k) % nic.Queues; len(r.queues[q]) > 0 && (q > 0 || nic.Stall == 0) {
					if err := r.drain(q, 1+rng.IntN(nic.Batch)); err != nil {
						return r.overtaken, err
					}
					next = q + 1
					break
				}
			}
		}
	}
	for q := range r.queues {
		if err := r.drain(q, len(r.queues[q])); err != nil {
			return r.overtaken, err
		}
	}
	return r.overtaken, nil
}

// flowHash is the same for both directions of a flow, like a symmetric
// RSS hash; packets that are not TCP or UDP over IP share one value.
func flowHash(data []byte, lt layers.LinkType) uint64 {
	p := gopacket.NewPacket(data, lt, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
	if n, t := p.NetworkLayer(), p.TransportLayer(); n != nil && t != nil {
		return n.NetworkFlow().FastHash()*31 + t.TransportFlow().FastHash()
	}
	return 0
}

package relay

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Outbound chunks' buffers live off the Go heap, in slabs mapped with
// mmap: a stall of 16,000 members that never read queued ~800 MB of
// chunks, and a Go heap that once grew that large keeps its span
// structures and GC metadata for good (RSS 30 s after the stall stayed at
// 3x idle). A slab no chunk uses is unmapped by the memory reclaimer
// (freeSlabs), so the memory comes back whole. The chunk structs are the
// slab's own (one Go allocation a slab, not one a chunk).
const (
	slabChunks = 256 // chunks of chunkSize a slab: 1 MiB
	keepSlabs  = 1   // unused slabs kept mapped for the next burst
)

type slab struct {
	mem    []byte // mmap'd, slabChunks × chunkSize
	chunks [slabChunks]chunk
	free   [slabChunks]uint16 // indexes of free chunks, the first nfree
	nfree  int
	listed bool // in arena.partial
}

// arena hands out chunks; its mutex is a leaf.
type arena struct {
	mu      sync.Mutex
	partial []*slab // slabs with a free chunk
	mapped  int     // slabs mapped
}

var chunks arena

// get returns an empty chunk, mapping a new slab if every one is full.
func (a *arena) get() *chunk {
	a.mu.Lock()
	for len(a.partial) > 0 {
		s := a.partial[len(a.partial)-1]
		if s.nfree > 0 {
			s.nfree--
			c := &s.chunks[s.free[s.nfree]]
			a.mu.Unlock()
			return c
		}
		s.listed = false
		a.partial = a.partial[:len(a.partial)-1]
	}
	s, err := newSlab()
	if err != nil {
		a.mu.Unlock()
		// Out of address space or mappings: a heap chunk still works
		// (it has no slab; put lets the GC have it).
		return &chunk{b: make([]byte, 0, chunkSize)}
	}
	a.mapped++
	s.listed = true
	a.partial = append(a.partial, s)
	s.nfree--
	c := &s.chunks[s.free[s.nfree]]
	a.mu.Unlock()
	return c
}

func newSlab() (*slab, error) {
	mem, err := unix.Mmap(-1, 0, slabChunks*chunkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	s := &slab{mem: mem, nfree: slabChunks}
	for i := range s.chunks {
		s.chunks[i] = chunk{b: mem[i*chunkSize : i*chunkSize : (i+1)*chunkSize], slab: s, idx: uint16(i)}
		s.free[i] = uint16(slabChunks - 1 - i)
	}
	return s, nil
}

// put gives c back; nothing may use it after.
func (a *arena) put(c *chunk) {
	c.b = c.b[:0]
	s := c.slab
	if s == nil {
		return
	}
	a.mu.Lock()
	s.free[s.nfree] = c.idx
	s.nfree++
	if !s.listed {
		s.listed = true
		a.partial = append(a.partial, s)
	}
	a.mu.Unlock()
}

// freeSlabs unmaps the slabs no chunk uses, but keepSlabs of them.
func (a *arena) freeSlabs() {
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := 0
	live := a.partial[:0]
	for _, s := range a.partial {
		if s.nfree == slabChunks && kept >= keepSlabs {
			s.listed = false
			unix.Munmap(s.mem)
			s.mem = nil
			a.mapped--
			continue
		}
		if s.nfree == slabChunks {
			kept++
		}
		live = append(live, s)
	}
	clear(a.partial[len(live):])
	a.partial = live
	if cap(a.partial) > 1024 && len(a.partial) < cap(a.partial)/4 {
		a.partial = append([]*slab(nil), a.partial...)
	}
}

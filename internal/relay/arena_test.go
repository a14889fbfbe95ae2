package relay

import (
	"bytes"
	"testing"
)

// TestArenaGivesSlabsBack: chunks come from slabs that are unmapped once
// no chunk of theirs is used (but keepSlabs), and a chunk's bytes are its
// own: filling every chunk of three slabs keeps each one's contents.
func TestArenaGivesSlabsBack(t *testing.T) {
	var a arena
	const n = 3 * slabChunks
	cs := make([]*chunk, n)
	for i := range cs {
		cs[i] = a.get()
		if len(cs[i].b) != 0 || cap(cs[i].b) != chunkSize {
			t.Fatalf("chunk %d: len %d cap %d", i, len(cs[i].b), cap(cs[i].b))
		}
		cs[i].b = append(cs[i].b, bytes.Repeat([]byte{byte(i)}, chunkSize)...)
	}
	if a.mapped != 3 {
		t.Fatalf("%d slabs mapped for %d chunks, want 3", a.mapped, n)
	}
	for i, c := range cs {
		if !bytes.Equal(c.b, bytes.Repeat([]byte{byte(i)}, chunkSize)) {
			t.Fatalf("chunk %d was written by another", i)
		}
	}
	// One slab's chunks back but one: nothing to unmap.
	for _, c := range cs[:slabChunks-1] {
		a.put(c)
	}
	a.freeSlabs()
	if a.mapped != 3 {
		t.Fatalf("%d slabs mapped with every slab in use, want 3", a.mapped)
	}
	for _, c := range cs[slabChunks-1:] {
		a.put(c)
	}
	a.freeSlabs()
	if a.mapped != keepSlabs {
		t.Fatalf("%d slabs mapped with none in use, want %d", a.mapped, keepSlabs)
	}
	// The kept slab serves the next get.
	if c := a.get(); a.mapped != keepSlabs || c.slab == nil {
		t.Fatalf("after a get: %d slabs mapped", a.mapped)
	} else {
		a.put(c)
	}
}

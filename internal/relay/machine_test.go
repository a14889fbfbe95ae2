package relay

import "testing"

// TestMachineCaps: the default caps follow the open-file limit and the
// memory, whichever is tighter, with a floor; a source gets a quarter but
// at least 1024 (all of them when fewer).
func TestMachineCaps(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name         string
		m            Machine
		conns, rooms int
		perSource    int
	}{
		{"files bind", Machine{OpenFiles: 20000, Memory: 24 * gib}, 20000 - fdReserve, 20000 - fdReserve, (20000 - fdReserve) / 4},
		{"memory binds", Machine{OpenFiles: 1 << 20, Memory: 2 * gib}, 16384, 16384, 4096},
		{"small machine", Machine{OpenFiles: 1024, Memory: 1 * gib}, 1024 - fdReserve, 1024 - fdReserve, 1024 - fdReserve},
		{"tiny limit", Machine{OpenFiles: 100, Memory: 0}, 2*fdReserve - fdReserve, 2*fdReserve - fdReserve, fdReserve},
		{"unknown", Machine{}, 1 << 20, 1 << 20, 1 << 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.MaxConnections(); got != tt.conns {
				t.Errorf("MaxConnections = %d, want %d", got, tt.conns)
			}
			if got := tt.m.MaxRooms(); got != tt.rooms {
				t.Errorf("MaxRooms = %d, want %d", got, tt.rooms)
			}
			if got := perSource(tt.m.MaxConnections()); got != tt.perSource {
				t.Errorf("per source = %d, want %d", got, tt.perSource)
			}
		})
	}
	if m := ReadMachine(); m.OpenFiles == 0 || m.Memory == 0 {
		t.Errorf("ReadMachine = %+v: read nothing on Linux", m)
	}
}

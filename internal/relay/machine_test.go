package relay

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

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
		{"memory binds", Machine{OpenFiles: 1 << 20, Memory: 2 * gib}, 32768, 32768, 8192},
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

// TestCgroupMemory reads the memory limit of v1 and v2 groups under a fake
// root: the lowest of the group and its ancestors, "no limit" values
// ignored, and a group path that is not under the mount (a container's own
// cgroup namespace) read at the mount's top.
func TestCgroupMemory(t *testing.T) {
	const v1None = "9223372036854771712"
	tests := []struct {
		name   string
		cgroup string
		files  map[string]string
		want   uint64
		from   string
	}{
		{"v1 nested", "4:memory:/a/b\n3:cpu:/\n0::/\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     v1None,
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes":   "2147483648",
			"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": v1None,
		}, 2 << 30, "cgroup v1"},
		{"v1 lower child", "9:cpuacct,memory:/a/b\n", map[string]string{
			"sys/fs/cgroup/memory/a/memory.limit_in_bytes":   "2147483648",
			"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": "1073741824",
		}, 1 << 30, "cgroup v1"},
		{"v1 namespaced", "4:memory:/host/path\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912",
		}, 512 << 20, "cgroup v1"},
		{"v1 none", "4:memory:/\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": v1None,
		}, 0, ""},
		{"v2", "0::/user.slice/x\n", map[string]string{
			"sys/fs/cgroup/memory.max":                  "max",
			"sys/fs/cgroup/user.slice/memory.max":       "3221225472",
			"sys/fs/cgroup/user.slice/x/memory.max":     "max",
			"sys/fs/cgroup/user.slice/x/memory.current": "1",
		}, 3 << 30, "cgroup v2"},
		{"v2 max", "0::/\n", map[string]string{"sys/fs/cgroup/memory.max": "max"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/self/cgroup": tt.cgroup}
			maps.Copy(files, tt.files)
			for name, body := range files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, from := cgroupMemory(root)
			if got != tt.want || from != tt.from {
				t.Errorf("cgroupMemory = %d (%s), want %d (%s)", got, from, tt.want, tt.from)
			}
		})
	}
}

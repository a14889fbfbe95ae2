package k8s

import (
	"strings"
	"testing"
)

// TestShardMemory: the request covers the measured peaks (500 clients:
// 37–41 MiB; 2,500: 50–52 MiB) and the limit (twice) leaves room.
func TestShardMemory(t *testing.T) {
	for _, tc := range []struct {
		clients int
		peakMiB int64
	}{{500, 41}, {2500, 52}} {
		if got := ShardMemoryMiB(tc.clients); got < tc.peakMiB || got > 2*tc.peakMiB {
			t.Errorf("%d clients: %d MiB requested, measured peak %d MiB", tc.clients, got, tc.peakMiB)
		}
	}
}

func TestPlan(t *testing.T) {
	node2 := []NodeRoom{{Name: "k8snode", CPUMilli: 2000, MemMiB: 3900}}
	for _, tc := range []struct {
		name    string
		want    Want
		nodes   []NodeRoom
		cpu     int64
		mem     int64
		refused string
	}{
		// The README's run on the e2e cluster: 4 shards and the relay on
		// one node of 2 CPUs (it was Unschedulable at 1 CPU a shard).
		{"readme", Want{Shards: 4, ClientsPerShard: 500, Relay: true, RelayCPUMilli: 500, RelayMemMiB: 256}, node2, 337, 44, ""},
		{"no relay", Want{Shards: 4, ClientsPerShard: 500}, node2, 450, 44, ""},
		{"few shards get at most 1 CPU", Want{Shards: 1, ClientsPerShard: 100}, node2, 1000, 41, ""},
		{"given CPU that fits", Want{Shards: 2, ClientsPerShard: 10, CPUMilli: 900}, node2, 900, 41, ""},
		{"given CPU that does not fit", Want{Shards: 4, ClientsPerShard: 10, CPUMilli: 1000}, node2, 0, 0, "4 shards × (1000m CPU"},
		{"memory does not fit", Want{Shards: 4, ClientsPerShard: 500000}, node2, 0, 0, "MiB for 500000 clients each"},
		{"relay too big", Want{Shards: 1, ClientsPerShard: 10, Relay: true, RelayCPUMilli: 500, RelayMemMiB: 8192}, node2, 0, 0, "the relay finds no node"},
		// Whole pods: three shards on two nodes of 1.5 CPU each fit at
		// 750m, not at an even share of 1 CPU each.
		{"packing", Want{Shards: 3, ClientsPerShard: 10}, []NodeRoom{{"a", 1500, 1000}, {"b", 1500, 1000}}, 675, 41, ""},
		{"no node", Want{Shards: 1, ClientsPerShard: 1}, nil, 0, 0, "no schedulable node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Plan(tc.want, tc.nodes)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err %v, want one saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.CPUMilli != tc.cpu || f.MemMiB != tc.mem {
				t.Errorf("%dm CPU, %d MiB; want %dm, %d MiB", f.CPUMilli, f.MemMiB, tc.cpu, tc.mem)
			}
		})
	}
}

// TestRooms: a node's room is its allocatable less the requests of the
// pods on it that have not ended; nodes not Ready, cordoned or tainted
// NoSchedule give none.
func TestRooms(t *testing.T) {
	nodes := `{"items":[
 {"metadata":{"name":"a"},"spec":{},"status":{"allocatable":{"cpu":"2","memory":"4001036Ki"},"conditions":[{"type":"Ready","status":"True"}]}},
 {"metadata":{"name":"b"},"spec":{"unschedulable":true},"status":{"allocatable":{"cpu":"4","memory":"8Gi"},"conditions":[{"type":"Ready","status":"True"}]}},
 {"metadata":{"name":"c"},"spec":{"taints":[{"effect":"NoSchedule"}]},"status":{"allocatable":{"cpu":"4","memory":"8Gi"},"conditions":[{"type":"Ready","status":"True"}]}},
 {"metadata":{"name":"d"},"spec":{},"status":{"allocatable":{"cpu":"4","memory":"8Gi"},"conditions":[{"type":"Ready","status":"False"}]}}]}`
	pods := `{"items":[
 {"spec":{"nodeName":"a","containers":[{"resources":{"requests":{"cpu":"500m","memory":"256Mi"}}},{"resources":{}}]},"status":{"phase":"Running"}},
 {"spec":{"nodeName":"a","containers":[{"resources":{"requests":{"cpu":"1","memory":"1Gi"}}}]},"status":{"phase":"Succeeded"}},
 {"spec":{"nodeName":"b","containers":[{"resources":{"requests":{"cpu":"1"}}}]},"status":{"phase":"Running"}}]}`
	got, err := rooms([]byte(nodes), []byte(pods))
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeRoom{{Name: "a", CPUMilli: 1500, MemMiB: 3907 - 256}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("rooms %+v, want %+v", got, want)
	}
}

func TestQuantities(t *testing.T) {
	for _, tc := range []struct {
		q        string
		cpu, mib int64
	}{{"2", 2000, 0}, {"1500m", 1500, 0}, {"0.5", 500, 0}, {"", 0, 0}} {
		if got, err := MilliCPU(tc.q); err != nil || got != tc.cpu {
			t.Errorf("MilliCPU(%q) = %d, %v; want %d", tc.q, got, err, tc.cpu)
		}
	}
	for _, tc := range []struct {
		q   string
		mib int64
	}{{"1Gi", 1024}, {"512Mi", 512}, {"2048Ki", 2}, {"1G", 953}, {"1048576", 1}, {"", 0}} {
		if got, err := MiB(tc.q); err != nil || got != tc.mib {
			t.Errorf("MiB(%q) = %d, %v; want %d", tc.q, got, err, tc.mib)
		}
	}
	for _, q := range []string{"x", "-1", "1.5.5m"} {
		if _, err := MilliCPU(q); err == nil {
			t.Errorf("MilliCPU(%q): no error", q)
		}
	}
}

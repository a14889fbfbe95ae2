package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Measured memory of one shard process (docs/scaling.md, "A shard's
// memory"): 500 receive-only clients peak at 37–41 MiB, 2,500 at 50–52
// MiB, so about 6 KiB a client above ~38 MiB. The request takes the upper
// ends with room for busier clients (their read buffers are lent only
// while a socket has bytes): 40 MiB + 8 KiB a client; the limit is twice
// the request.
const (
	ShardBaseMiB       = 40
	ShardPerClientKiB  = 8
	shardCPUMilliMax   = 1000
	shardCPUMilliMin   = 50
	shardCPUMilliFloor = 100 // the auto request when the nodes have room
)

// ShardMemoryMiB is the memory request of a shard of per clients.
func ShardMemoryMiB(per int) int64 {
	return ShardBaseMiB + int64((per*ShardPerClientKiB+1023)/1024)
}

// NodeRoom is what one node can still give to new pods: its allocatable
// CPU and memory less the requests of the pods on it that have not ended.
type NodeRoom struct {
	Name     string
	CPUMilli int64
	MemMiB   int64
}

func (n NodeRoom) String() string {
	return fmt.Sprintf("%s: %dm CPU and %d MiB free", n.Name, n.CPUMilli, n.MemMiB)
}

// Want is what a run asks of the cluster.
type Want struct {
	Shards, ClientsPerShard int
	// CPUMilli is each shard's CPU request (0: auto: 100m a shard up to
	// 1 CPU, as much as the nodes can give after the relay).
	CPUMilli int64
	// MemMiB is each shard's memory request (0: ShardMemoryMiB).
	MemMiB int64
	// Relay: one more pod of RelayCPUMilli and RelayMemMiB.
	Relay                      bool
	RelayCPUMilli, RelayMemMiB int64
}

// Fit is the requests a run gets.
type Fit struct {
	CPUMilli, MemMiB int64 // each shard's
}

// Plan computes each shard's requests and checks that the shards (and
// the relay) can be placed on the nodes as the scheduler would: each pod
// on one node whose room holds its requests. An auto CPU request is
// capped by what the nodes can give; memory is what the clients need, so
// a run whose memory does not fit is refused with the numbers.
func Plan(w Want, nodes []NodeRoom) (Fit, error) {
	f := Fit{CPUMilli: w.CPUMilli, MemMiB: w.MemMiB}
	if f.MemMiB == 0 {
		f.MemMiB = ShardMemoryMiB(w.ClientsPerShard)
	}
	if len(nodes) == 0 {
		return f, fmt.Errorf("no schedulable node is Ready")
	}
	auto := f.CPUMilli == 0
	if auto {
		// As much as an even share of the nodes' free CPU after the relay,
		// between 50m and 1 CPU; at least 100m when there is room.
		var free int64
		for _, n := range nodes {
			free += n.CPUMilli
		}
		if w.Relay {
			free -= w.RelayCPUMilli
		}
		share := free / int64(max(w.Shards, 1))
		f.CPUMilli = min(max(share, shardCPUMilliMin), shardCPUMilliMax)
		if share >= shardCPUMilliFloor {
			f.CPUMilli = min(max(share*9/10, shardCPUMilliFloor), shardCPUMilliMax)
		}
	}
	var first error // the even share's: the numbers a refusal gives
	for {
		err := place(w, f, nodes)
		if err == nil {
			return f, nil
		}
		if first == nil {
			first = err
		}
		if !auto || f.CPUMilli <= shardCPUMilliMin {
			return f, first
		}
		// Pods are placed whole: a smaller share may fit where the even one
		// does not (two nodes of 1.5 CPU for three shards).
		f.CPUMilli = max(f.CPUMilli*3/4, shardCPUMilliMin)
	}
}

// place packs the pods onto the nodes, first fit by decreasing size.
func place(w Want, f Fit, nodes []NodeRoom) error {
	room := append([]NodeRoom(nil), nodes...)
	type pod struct {
		name     string
		cpu, mem int64
	}
	var pods []pod
	if w.Relay {
		pods = append(pods, pod{"the relay", w.RelayCPUMilli, w.RelayMemMiB})
	}
	for i := range w.Shards {
		pods = append(pods, pod{fmt.Sprintf("shard %d", i), f.CPUMilli, f.MemMiB})
	}
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].mem > pods[j].mem })
	for _, p := range pods {
		placed := false
		for i := range room {
			if room[i].CPUMilli >= p.cpu && room[i].MemMiB >= p.mem {
				room[i].CPUMilli -= p.cpu
				room[i].MemMiB -= p.mem
				placed = true
				break
			}
		}
		if !placed {
			return unfit(w, f, nodes, p.name)
		}
	}
	return nil
}

func unfit(w Want, f Fit, nodes []NodeRoom, first string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the run does not fit the cluster (%s finds no node): %d shards × (%dm CPU, %d MiB for %d clients each)",
		first, w.Shards, f.CPUMilli, f.MemMiB, w.ClientsPerShard)
	if w.Relay {
		fmt.Fprintf(&b, " + the relay (%dm CPU, %d MiB)", w.RelayCPUMilli, w.RelayMemMiB)
	}
	b.WriteString("; ")
	for i, n := range nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.String())
	}
	b.WriteString(": use more shards on more nodes, fewer clients, or smaller --relay-cpu/--relay-memory")
	return fmt.Errorf("%s", b.String())
}

// Rooms reads the nodes' room from the API: each Ready, schedulable
// node's allocatable CPU and memory less the requests of its pods that
// have not ended.
func (k *Kubectl) Rooms(ctx context.Context) ([]NodeRoom, error) {
	nb, err := k.Run(ctx, "get", "nodes", "-o", "json")
	if err != nil {
		return nil, err
	}
	pb, err := k.Run(ctx, "get", "pods", "--all-namespaces", "-o", "json")
	if err != nil {
		return nil, err
	}
	return rooms(nb, pb)
}

type quantities map[string]string

func rooms(nodesJSON, podsJSON []byte) ([]NodeRoom, error) {
	var nl struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				Unschedulable bool `json:"unschedulable"`
				Taints        []struct {
					Effect string `json:"effect"`
				} `json:"taints"`
			} `json:"spec"`
			Status struct {
				Allocatable quantities `json:"allocatable"`
				Conditions  []struct {
					Type, Status string
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(nodesJSON, &nl); err != nil {
		return nil, fmt.Errorf("decode node list: %w", err)
	}
	var pl struct {
		Items []struct {
			Spec struct {
				NodeName   string `json:"nodeName"`
				Containers []struct {
					Resources struct {
						Requests quantities `json:"requests"`
					} `json:"resources"`
				} `json:"containers"`
			} `json:"spec"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(podsJSON, &pl); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	var out []NodeRoom
	idx := map[string]int{}
	for _, n := range nl.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				ready = c.Status == "True"
			}
		}
		noSchedule := false
		for _, t := range n.Spec.Taints {
			noSchedule = noSchedule || t.Effect == "NoSchedule" || t.Effect == "NoExecute"
		}
		if !ready || n.Spec.Unschedulable || noSchedule {
			continue
		}
		cpu, err := MilliCPU(n.Status.Allocatable["cpu"])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Metadata.Name, err)
		}
		mem, err := MiB(n.Status.Allocatable["memory"])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Metadata.Name, err)
		}
		idx[n.Metadata.Name] = len(out)
		out = append(out, NodeRoom{Name: n.Metadata.Name, CPUMilli: cpu, MemMiB: mem})
	}
	for _, p := range pl.Items {
		i, ok := idx[p.Spec.NodeName]
		if !ok || p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			continue
		}
		for _, c := range p.Spec.Containers {
			cpu, err := MilliCPU(c.Resources.Requests["cpu"])
			if err != nil {
				return nil, err
			}
			mem, err := MiB(c.Resources.Requests["memory"])
			if err != nil {
				return nil, err
			}
			out[i].CPUMilli -= cpu
			out[i].MemMiB -= mem
		}
	}
	return out, nil
}

// MilliCPU parses a CPU quantity ("2", "1500m", "0.5"; "" is 0).
func MilliCPU(q string) (int64, error) {
	if q == "" {
		return 0, nil
	}
	if m, ok := strings.CutSuffix(q, "m"); ok {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("CPU quantity %q", q)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(q, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("CPU quantity %q", q)
	}
	return int64(math.Ceil(f * 1000)), nil
}

// MiB parses a memory quantity ("1Gi", "512Mi", "2048Ki", "1G",
// "1000000000"; "" is 0), rounded down to whole MiB.
func MiB(q string) (int64, error) {
	if q == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		bytes  float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	mult, num := 1.0, q
	for _, u := range units {
		if s, ok := strings.CutSuffix(q, u.suffix); ok {
			mult, num = u.bytes, s
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("memory quantity %q", q)
	}
	return int64(f * mult / (1 << 20)), nil
}

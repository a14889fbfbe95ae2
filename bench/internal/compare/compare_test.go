package compare

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseWorkload(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Workload
		bad  bool
	}{
		{in: "8x32", want: Workload{Name: "8x32", Rooms: 8, Members: 32, Senders: 32}},
		{in: "1:1000", want: Workload{Name: "1:1000", Rooms: 1, Members: 1001, Senders: 1}},
		{in: "8x1", bad: true},
		{in: "0x32", bad: true},
		{in: "2:10", bad: true},
		{in: "eight", bad: true},
	} {
		got, err := ParseWorkload(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("ParseWorkload(%q) = %+v, %v", tc.in, got, err)
		}
	}
	w, _ := ParseWorkload("16x32")
	if d := w.Deliveries(72); d != 16*32*31*72 {
		t.Errorf("16x32 at 72 Hz: %g deliveries/s, want %d", d, 16*32*31*72)
	}
}

func TestMediansAndTable(t *testing.T) {
	runs := []Run{
		{Server: "reprise", Workload: "8x32", DeliveredPerS: 100, ServerCPUPerM: 1, P99Ms: 9},
		{Server: "nats", Workload: "8x32", DeliveredPerS: 100, ServerCPUPerM: 2, P99Ms: 4},
		{Server: "reprise", Workload: "8x32", DeliveredPerS: 100, ServerCPUPerM: 3, P99Ms: 1},
		{Server: "nats", Workload: "8x32", DeliveredPerS: 100, ServerCPUPerM: 4, P99Ms: 2},
		{Server: "reprise", Workload: "8x32", DeliveredPerS: 100, ServerCPUPerM: 2, P99Ms: 2},
	}
	m := Medians(runs)
	if len(m) != 2 || m[0].Server != "reprise" || m[0].ServerCPUPerM != 2 || m[0].P99Ms != 2 || m[1].ServerCPUPerM != 3 || m[1].P99Ms != 3 {
		t.Fatalf("medians = %+v", m)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, &Report{Medians: m}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "reprise/nats") || !strings.Contains(b.String(), "0.67x") {
		t.Errorf("table lacks the ratio row or the CPU ratio 2/3:\n%s", b.String())
	}
}

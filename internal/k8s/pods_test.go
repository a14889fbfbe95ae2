package k8s

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPodState: what a run says about a pod, from pod lists as kubectl
// prints them.
func TestPodState(t *testing.T) {
	for _, tc := range []struct {
		file   string
		state  PodState
		reason string
		index  int
		ready  bool
	}{
		{"never-pull.json", PodFailed, `ErrImageNeverPull: Container image "localhost/reprise-replay:sha-1" is not present with pull policy of Never`, 1, false},
		{"oom.json", PodFailed, "OOMKilled, exit code 137", 0, false},
		{"exit-error.json", PodFailed, "Error, exit code 1: replay: start barrier: not every shard was ready", 1, false},
		{"unschedulable.json", PodStarting, "Unschedulable: 0/1 nodes are available: 1 Insufficient memory.", 3, false},
		{"creating.json", PodStarting, "ContainerCreating", 2, false},
		{"succeeded.json", PodSucceeded, "", 0, false},
		{"running.json", PodRunning, "", -1, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "pods", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			pods, err := DecodePods(b)
			if err != nil || len(pods) != 1 {
				t.Fatalf("%d pods, %v", len(pods), err)
			}
			p := pods[0]
			st, reason := p.State()
			if st != tc.state || reason != tc.reason {
				t.Errorf("state %v %q, want %v %q", st, reason, tc.state, tc.reason)
			}
			if p.CompletionIndex() != tc.index || p.Ready() != tc.ready {
				t.Errorf("index %d ready %v, want %d %v", p.CompletionIndex(), p.Ready(), tc.index, tc.ready)
			}
		})
	}
}

// FuzzDecodePods: any input decodes or errors, and a decoded pod's state
// never panics.
func FuzzDecodePods(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "pods", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pods, err := DecodePods(b)
		if err != nil {
			return
		}
		for _, p := range pods {
			if st, _ := p.State(); st < PodStarting || st > PodFailed {
				t.Errorf("state %v", st)
			}
			p.CompletionIndex()
		}
	})
}

package profile

import "testing"

// TestCaptureView: the default profile (the one a command given no
// --profile looks up) is shown by the capture's own summary, read as Load
// reads it (frames cut by the reader); every other built-in by its
// reports over raw payloads, on its port unless --server-port says.
func TestCaptureView(t *testing.T) {
	src := Source{MaxFrame: 1000, CaptureMemory: 1 << 20}
	for _, name := range Builtin {
		p, err := Lookup(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		view, opts := p.CaptureView(), p.CaptureOptions(src)
		if opts.MaxMemory != src.CaptureMemory {
			t.Errorf("%s: read with %d bytes of memory, want %d", name, opts.MaxMemory, src.CaptureMemory)
		}
		switch view {
		case ViewSummary:
			if opts.Raw || opts.MaxFrame != src.MaxFrame {
				t.Errorf("%s (%v): read %+v, want its frames cut by the reader up to %d bytes", name, view, opts, src.MaxFrame)
			}
		case ViewReports:
			if !opts.Raw || opts.ServerPort != p.Port {
				t.Errorf("%s (%v): read %+v, want raw payloads on port %d", name, view, opts, p.Port)
			}
		}
		if (view == ViewSummary) != (name == Default) {
			t.Errorf("%s: %v", name, view)
		}
	}
	p, _ := Lookup("mqtt")
	if got := p.CaptureOptions(Source{ServerPort: 1884}); got.ServerPort != 1884 {
		t.Errorf("mqtt with --server-port 1884: read %+v", got)
	}
}

package profile

import "testing"

// TestCaptureOptions: Load's capture-for-profile rule, which inspect and
// profile check read by too. The default profile's (reprise's) frames are
// cut by the capture reader up to --max-frame; every other built-in's
// payloads come raw, on its port unless --server-port says.
func TestCaptureOptions(t *testing.T) {
	src := Source{MaxFrame: 1000, CaptureMemory: 1 << 20}
	for _, name := range Builtin {
		p, err := Lookup(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		opts := p.captureOptions(src)
		if opts.MaxMemory != src.CaptureMemory {
			t.Errorf("%s: read with %d bytes of memory, want %d", name, opts.MaxMemory, src.CaptureMemory)
		}
		if name == Default {
			if opts.Framer != RepriseFramer(src.MaxFrame) {
				t.Errorf("%s: read %+v, want its frames cut by its framer up to %d bytes", name, opts, src.MaxFrame)
			}
		} else if opts.Framer != nil || opts.ServerPort != p.Port {
			t.Errorf("%s: read %+v, want raw payloads on port %d", name, opts, p.Port)
		}
	}
	p, _ := Lookup("mqtt")
	if got := p.captureOptions(Source{ServerPort: 1884}); got.ServerPort != 1884 {
		t.Errorf("mqtt with --server-port 1884: read %+v", got)
	}
}

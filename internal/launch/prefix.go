package launch

import (
	"io"
	"strings"
	"sync"
)

// Prefixed writes to w with every line prefixed (a run's or a shard's
// progress). Lines are written whole by the fleet; a partial one is
// prefixed once.
func Prefixed(w io.Writer, prefix string) io.Writer { return &prefixWriter{w: w, prefix: prefix} }

type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf []byte
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if !p.mid {
			buf = append(buf, p.prefix...)
		}
		buf = append(buf, line...)
		p.mid = !strings.HasSuffix(line, "\n")
	}
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

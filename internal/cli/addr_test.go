package cli

import (
	"strings"
	"testing"
)

// TestAddr: an address flag takes host:port (an empty host and port 0
// only to serve on), "" and "off" only when it can be off, and its extra
// words; anything else is refused when set, with why, and left unchanged.
func TestAddr(t *testing.T) {
	tests := []struct {
		name string
		a    Addr
		in   string
		want string // "" accepted, else part of the error
	}{
		{"dial host:port", Addr{}, "127.0.0.1:7400", ""},
		{"dial ipv6", Addr{}, "[::1]:7400", ""},
		{"dial name", Addr{}, "relay.example:7400", ""},
		{"dial port only", Addr{}, "7400", "missing port in address"},
		{"dial no port", Addr{}, "127.0.0.1", "missing port in address"},
		{"dial no host", Addr{}, ":7400", "no host to dial"},
		{"dial port 0", Addr{}, "127.0.0.1:0", "port 0"},
		{"dial url", Addr{}, "http://127.0.0.1:9400/metrics", "too many colons"},
		{"port not a number", Addr{}, "127.0.0.1:x", `port "x" is not a number`},
		{"port too big", Addr{}, "127.0.0.1:70000", `port "70000"`},
		{"dial off not allowed", Addr{}, "off", "missing port"},
		{"dial empty not allowed", Addr{}, "", "missing port"},
		{"listen every interface", Addr{Listen: true}, ":9400", ""},
		{"listen free port", Addr{Listen: true}, "127.0.0.1:0", ""},
		{"listen port only", Addr{Listen: true}, "9400", "missing port"},
		{"off", Addr{Listen: true, Off: true}, "off", ""},
		{"off empty", Addr{Listen: true, Off: true}, "", ""},
		{"also", Addr{Listen: true, Off: true, Also: []string{"same"}}, "same", ""},
		{"also not given", Addr{Listen: true, Off: true}, "same", "missing port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := "before"
			tt.a.P = &v
			err := tt.a.Set(tt.in)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Set(%q): %v", tt.in, err)
			case tt.want == "" && v != tt.in:
				t.Errorf("Set(%q) kept %q", tt.in, v)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Set(%q) = %v, want an error with %q", tt.in, err, tt.want)
			case tt.want != "" && v != "before":
				t.Errorf("refused Set(%q) changed the value to %q", tt.in, v)
			}
		})
	}
}

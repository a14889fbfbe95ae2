package main

import (
	"strings"
	"testing"
)

func TestArgList(t *testing.T) {
	tests := []struct {
		in   []string
		want string
		err  string
	}{
		{[]string{"--max-room-members 40"}, "--max-room-members 40", ""},
		{[]string{"  --write-coalesce 0   --log-level  warn "}, "--write-coalesce 0 --log-level warn", ""},
		{[]string{"--max-room-members 40", "--idle-timeout 10m"}, "--max-room-members 40 --idle-timeout 10m", ""},
		{[]string{"--auth-secret 'a b'"}, "", "quotes"},
		{[]string{`--x a\ b`}, "", "quotes"},
	}
	for _, tt := range tests {
		var a argList
		var err error
		for _, s := range tt.in {
			if err = a.Set(s); err != nil {
				break
			}
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || a.String() != tt.want {
			t.Errorf("%q: %q, %v; want %q", tt.in, a.String(), err, tt.want)
		}
	}
}

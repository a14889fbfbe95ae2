package main

import (
	"io"
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

// TestRelayFlagsOneMeaning: every command that starts or renders a relay
// (replay, compare, capacity, k8s render) takes --relay-flags, the same
// way: repeatable, each value split on spaces, quotes refused.
func TestRelayFlagsOneMeaning(t *testing.T) {
	st := &state{stdout: io.Discard, stderr: io.Discard}
	root := newRunCmd(st)
	for _, sub := range subcommands {
		root.AddCommand(sub(st))
	}
	for _, path := range [][]string{nil, {"compare"}, {"capacity"}, {"k8s", "render"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatalf("%v: %v", path, err)
		}
		name := strings.TrimSpace("replay " + strings.Join(path, " "))
		f := cmd.Flags().Lookup("relay-flags")
		if f == nil {
			t.Errorf("%s has no --relay-flags", name)
			continue
		}
		if err := cmd.ParseFlags([]string{"--relay-flags", "--max-room-members 40", "--relay-flags", " --max-pending  2097152 "}); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got, want := f.Value.String(), "--max-room-members 40 --max-pending 2097152"; got != want || f.Value.Type() != "flags" {
			t.Errorf("%s --relay-flags: %q (%s), want %q (flags)", name, got, f.Value.Type(), want)
		}
		if err := f.Value.Set(`--auth-secret "a b"`); err == nil || !strings.Contains(err.Error(), "split on spaces") {
			t.Errorf("%s --relay-flags with quotes: %v, want refused", name, err)
		}
	}
}

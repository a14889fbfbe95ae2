package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// addressFlags take host:port (a URL only where a path is needed).
var addressFlags = []string{"target", "metrics", "relay-metrics", "barrier"}

// TestREADMEExamples takes every replay command line from the code
// blocks of the README and docs/profiles.md, as written (continuation lines joined, comments and pipes
// cut, "[--x v]" optional parts kept, "[a | b]" the first alternative),
// and checks that it names a real subcommand whose flags all parse, and
// that every address in it is host:port.
func TestREADMEExamples(t *testing.T) {
	lines := readmeCommands(t, "../../README.md")
	if len(lines) < 10 {
		t.Fatalf("found %d replay examples in the README; the extraction is broken", len(lines))
	}
	lines = append(lines, readmeCommands(t, "../../docs/profiles.md")...)
	for _, line := range lines {
		args := shellWords(line)[1:]
		st := &state{stdout: io.Discard, stderr: io.Discard}
		root := newRunCmd(st)
		for _, sub := range subcommands {
			root.AddCommand(sub(st))
		}
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		if dash := indexOf(rest, "--"); dash >= 0 && cmd.Name() == "render" {
			rest = rest[:dash] // the run flags after -- are checked by render itself
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		if cmd.Args != nil {
			if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %v", line, err)
			}
		}
		checkAddresses(t, line, cmd)
	}
}

func checkAddresses(t *testing.T, line string, cmd *cobra.Command) {
	t.Helper()
	for _, name := range addressFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || f.Value.String() == "off" || f.Value.String() == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.Value.String()); err != nil {
			t.Errorf("%s: --%s %q is not host:port: %v", line, name, f.Value.String(), err)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// readmeCommands are the replay command lines of the README's code
// blocks.
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in, cont := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			in, cont = !in, ""
			continue
		}
		if !in {
			continue
		}
		l = strings.TrimSpace(cutComment(l))
		if cont != "" {
			l = cont + " " + l
		}
		if rest, ok := strings.CutSuffix(l, `\`); ok {
			cont = strings.TrimSpace(rest)
			continue
		}
		cont = ""
		if i := strings.Index(l, " | "); i >= 0 && !strings.Contains(l[:i], "[") {
			l = l[:i] // a pipe into another program
		}
		if strings.HasPrefix(l, "bin/replay ") || strings.HasPrefix(l, "replay ") {
			out = append(out, optional(l))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// cutComment drops a shell comment: a # after whitespace, outside quotes.
func cutComment(l string) string {
	quote := byte(0)
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && i > 0 && (l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// optional keeps what "[...]" holds, the first of "a | b".
func optional(l string) string {
	var b strings.Builder
	for {
		i := strings.Index(l, "[")
		j := strings.Index(l, "]")
		if i < 0 || j < i {
			b.WriteString(l)
			return b.String()
		}
		b.WriteString(l[:i])
		inner := l[i+1 : j]
		if k := strings.Index(inner, " | "); k >= 0 {
			inner = inner[:k]
		}
		b.WriteString(inner)
		l = l[j+1:]
	}
}

// shellWords splits a command line on spaces, honouring single and
// double quotes.
func shellWords(l string) []string {
	var out []string
	var cur strings.Builder
	quote, have := byte(0), false
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, have = c, true
		case c == ' ' || c == '\t':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

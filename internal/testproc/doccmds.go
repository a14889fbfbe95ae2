package testproc

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckDocExamples runs check on every prog command line (DocCommands) of
// the repository's README.md, captures/README.md and docs/*.md, from a
// package two folders below the root (cmd/x), and fails the test for each
// error and when it finds fewer than two lines (a broken extraction).
func CheckDocExamples(t testing.TB, prog string, check func(args []string) error) {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range append(docs, "../../README.md", "../../captures/README.md") {
		for _, args := range DocCommands(t, doc, prog) {
			n++
			if err := check(args); err != nil {
				t.Errorf("%s: %s %s: %v", filepath.Base(doc), prog, strings.Join(args, " "), err)
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d %s examples in the docs; the extraction is broken", n, prog)
	}
}

// DocCommands are the command lines of prog (written "prog ..." or
// "bin/prog ...") in the code blocks of the Markdown file at path, as a
// reader would type them: continuation lines joined, comments, pipes
// into another program and a trailing "&" cut, "[--x v]" optional parts
// kept, "[a | b]" the first alternative. Each is its arguments, the
// program's name left out, split as a shell would (quotes honoured).
func DocCommands(t testing.TB, path, prog string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
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
		l = strings.TrimSpace(strings.TrimSuffix(l, "&"))
		if strings.HasPrefix(l, "bin/"+prog+" ") || strings.HasPrefix(l, prog+" ") {
			out = append(out, shellWords(optional(l))[1:])
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

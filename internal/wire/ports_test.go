package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// portLiteral matches a default port written as a number or inside a
// string ("127.0.0.1:7400", ":9401").
var portLiteral = regexp.MustCompile(`(^|[^0-9])(7400|9400|9401)([^0-9]|$)`)

// TestPortsWrittenOnce: the relay's ports are written in ports.go and the
// fleet's metrics port in fleet's config.go, nowhere else in the code of
// the repository (bench/ included; tests and comments may name them): a
// flag default, a manifest's port and a library default are one value.
func TestPortsWrittenOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	home := map[string]bool{
		filepath.Join("internal", "wire", "ports.go"):   true,
		filepath.Join("internal", "fleet", "config.go"): true,
	}
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || (lit.Kind != token.INT && lit.Kind != token.STRING) {
				return true
			}
			v := lit.Value
			if lit.Kind == token.STRING {
				if s, err := strconv.Unquote(v); err == nil {
					v = s
				}
			}
			m := portLiteral.FindStringSubmatch(v)
			if m == nil {
				return true
			}
			if home[rel] && lit.Kind == token.INT {
				return true
			}
			t.Errorf("%s: port %s written as a literal (%s): derive it from wire.DefaultPort, wire.DefaultMetricsPort or fleet.DefaultMetricsPort", fset.Position(lit.Pos()), m[2], lit.Value)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("read %d Go files under %s: not the repository", seen, root)
	}
}

package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// enginePath is the import path of the engine.
const enginePath = "github.com/seglog/seglog/engine"

// storeHelpers are the files that hold the store check's helpers: their
// own call of engine.Open is the one that may open a store directly.
var storeHelpers = []string{"engine/checked_test.go", "engine/enginetest/storecheck.go"}

// directOpensLeft are the test files that still open stores directly,
// with how many calls: none may be added (a new test gets the check by
// opening through the helper), and a count that falls must fall here too.
var directOpensLeft = map[string]int{}

// TestStoresChecked: every store a test opens ends with the end-of-test
// store check (issue 36; engine/checked_test.go): a test file opens a
// store through engine.OpenStore (openStore in package engine),
// enginetest.OpenStore, or says why no check can see it
// (OpenUnchecked, with a reason), never with engine.Open itself. The
// files it lists in directOpensLeft are the ones not yet converted.
func TestStoresChecked(t *testing.T) {
	got := directOpens(t, "../..")
	counts := map[string]int{}
	for _, o := range got {
		counts[o.file]++
	}
	for _, o := range got {
		if _, ok := directOpensLeft[o.file]; !ok {
			t.Errorf("%s: engine.Open in a test: open the store with engine.OpenStore(t, dir, opts) (enginetest.OpenStore outside the engine, openStore in package engine), which ends the test with the store check, or engine.OpenUnchecked(why, dir, opts)", o.pos)
		}
	}
	for f, n := range directOpensLeft {
		if counts[f] != n {
			t.Errorf("%s: %d direct opens, directOpensLeft says %d: update it", f, counts[f], n)
		}
	}
}

// TestStoresCheckedCatches: the check finds a direct open in an external
// test package, in package engine's own tests and under another import
// name, and lets the helpers' calls, godoc's examples and other
// packages' Open through.
func TestStoresCheckedCatches(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module github.com/seglog/seglog\n")
	write("engine/a_test.go", "package engine\n\nfunc f() {\n\tOpen(\"d\", nil)\n\topenStore(nil, \"d\", nil)\n\tx.Open(ctx, \"s\")\n}\n")
	write("engine/checked_test.go", "package engine\n\nfunc openStore() { Open(dir, o) }\n")
	write("engine/b_test.go", "package engine_test\n\nimport \"github.com/seglog/seglog/engine\"\n\nfunc f() {\n\tengine.Open(\"d\", nil)\n\tengine.OpenStore(t, \"d\", nil)\n\tindex.Open(\"p\", nil)\n}\n")
	write("fuzz/c_test.go", "package fuzz\n\nimport eng \"github.com/seglog/seglog/engine\"\n\nfunc f() { eng.Open(dir, nil) }\n")
	write("fuzz/d_test.go", "package fuzz\n\nfunc f() { engine.Open(dir, nil) }\n") // no import of the engine: another engine
	write("fuzz/e_test.go", "package fuzz_test\n\nimport \"github.com/seglog/seglog/engine\"\n\nfunc ExampleOpen() { engine.Open(\"dir\", nil) }\n\nfunc g() { engine.Open(dir, nil) }\n")
	var got []string
	for _, o := range directOpens(t, root) {
		got = append(got, o.pos)
	}
	want := []string{"engine/a_test.go:4", "engine/b_test.go:6", "fuzz/c_test.go:5", "fuzz/e_test.go:7"}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

type directOpen struct {
	file string // relative to the root, slashes
	pos  string // file:line
}

// directOpens lists the calls of engine.Open in the _test.go files under
// root (nested modules included; testdata and dot directories left out),
// but those in storeHelpers and in Example functions (godoc's).
func directOpens(t *testing.T, root string) []directOpen {
	t.Helper()
	var out []directOpen
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(p, "_test.go") || slices.Contains(storeHelpers, rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		// The engine's own tests call it Open; others by its import name.
		inEngine := filepath.ToSlash(filepath.Dir(rel)) == "engine" && f.Name.Name == "engine"
		name := ""
		for _, im := range f.Imports {
			if path, _ := strconv.Unquote(im.Path.Value); path == enginePath {
				name = "engine"
				if im.Name != nil {
					name = im.Name.Name
				}
			}
		}
		if !inEngine && name == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && strings.HasPrefix(fd.Name.Name, "Example") {
				return false // godoc's example of opening a store, never run against one
			}
			c, ok := n.(*ast.CallExpr)
			if !ok || len(c.Args) != 2 {
				return true
			}
			switch fn := c.Fun.(type) {
			case *ast.Ident:
				ok = inEngine && fn.Name == "Open"
			case *ast.SelectorExpr:
				x, isIdent := fn.X.(*ast.Ident)
				ok = isIdent && name != "" && x.Name == name && fn.Sel.Name == "Open"
			default:
				ok = false
			}
			if ok {
				out = append(out, directOpen{file: rel, pos: fmt.Sprintf("%s:%d", rel, fset.Position(c.Pos()).Line)})
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

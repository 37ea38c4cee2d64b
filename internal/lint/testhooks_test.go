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
	"strings"
	"testing"
)

// globalHooksAllowed are the package-level test hooks left, as
// "dir/file.go name": none (the log's are fields of wal.Log).
var globalHooksAllowed []string

// TestNoPackageTestHooks: test knobs are per DB (engine's testingKnobs,
// as pebble's), not package variables, so tests can run in parallel
// (issue 36). In the core module's non-test files, no package-level
// variable has a func type or is named testHook*; and no test assigns a
// package-level variable of its package's non-test files (a tuning a
// test overrides for the whole binary).
func TestNoPackageTestHooks(t *testing.T) {
	for _, p := range globalTestKnobs(t, "../..") {
		t.Error(p)
	}
}

// TestNoPackageTestHooksCatches: the check finds a hook variable and a
// test's assignment to a package variable.
func TestNoPackageTestHooksCatches(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("a.go", "package a\n\nvar testHookX func()\n\nvar onDone func(int)\n\nvar pollEvery = 5\n\nvar ok = 1\n")
	write("a_test.go", "package a\n\nfunc f() {\n\tpollEvery = 1\n\tx := 2\n\tx = ok\n\t_ = x\n}\n")
	got := globalTestKnobs(t, dir)
	for _, want := range []string{"testHookX", "onDone", "pollEvery"} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("%s not found in %q", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("found %q, want 3 problems", got)
	}
}

// globalTestKnobs lists the package-level test hooks and the package
// variables tests assign in the module at root (nested modules and
// testdata left out), but those globalHooksAllowed names.
func globalTestKnobs(t *testing.T, root string) []string {
	t.Helper()
	type pkg struct {
		vars  map[string]string // name: "dir/file.go"
		tests []*ast.File
	}
	pkgs := map[string]*pkg{}
	var problems []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		dir := filepath.Dir(p)
		k := pkgs[dir]
		if k == nil {
			k = &pkg{vars: map[string]string{}}
			pkgs[dir] = k
		}
		if strings.HasSuffix(p, "_test.go") {
			k.tests = append(k.tests, f)
			return nil
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if n.Name != "_" {
						k.vars[n.Name] = rel
					}
					_, isFunc := vs.Type.(*ast.FuncType)
					if (isFunc || strings.HasPrefix(n.Name, "testHook")) && !slices.Contains(globalHooksAllowed, rel+" "+n.Name) {
						problems = append(problems, rel+": package-level test hook "+n.Name+" (make it a per-DB knob or a field of the config)")
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range pkgs {
		for _, f := range k.tests {
			if f.Name.Name != "" && strings.HasSuffix(f.Name.Name, "_test") {
				continue // an external test package: it cannot assign them
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				local := declaredIn(fd)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					as, ok := n.(*ast.AssignStmt)
					if !ok || as.Tok == token.DEFINE {
						return true
					}
					for _, l := range as.Lhs {
						id, ok := l.(*ast.Ident)
						if !ok || local[id.Name] {
							continue
						}
						if decl, ok := k.vars[id.Name]; ok && !slices.Contains(globalHooksAllowed, decl+" "+id.Name) {
							problems = append(problems, fmt.Sprintf("%s: a test assigns package variable %s (of %s): make it a per-DB knob", fset.Position(id.Pos()), id.Name, decl))
						}
					}
					return true
				})
			}
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}

// declaredIn is every name fd declares anywhere in it (parameters,
// results, :=, var, and those of its function literals): an assignment
// to one of them is taken for a local's (a name shadowed in one block
// only is missed, never reported wrongly).
func declaredIn(fd *ast.FuncDecl) map[string]bool {
	names := map[string]bool{}
	fields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			for _, n := range f.Names {
				names[n.Name] = true
			}
		}
	}
	fields(fd.Recv)
	fields(fd.Type.Params)
	fields(fd.Type.Results)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				names[id.Name] = true
			}
		case *ast.FuncLit:
			fields(n.Type.Params)
			fields(n.Type.Results)
		}
		return true
	})
	return names
}

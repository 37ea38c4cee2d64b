package lint

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The loader of the lock checks (locks_test.go): the packages go list
// names, type-checked from source with go/types, standard library and
// other modules included (their function bodies skipped). Only the
// standard library: golang.org/x/tools is not a dependency of the core
// module.

// srcPkg is one package of the analysed module, type-checked.
type srcPkg struct {
	path  string // import path
	files []*ast.File
	types *types.Package
	info  *types.Info
}

// listedPkg is go list's record of a package.
type listedPkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	ImportMap  map[string]string
	Standard   bool
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// loadPackages type-checks the packages patterns name (go list, run in
// dir, relative to this package's directory) and their dependencies. It
// returns the packages of module modPath among them (their tests left
// out), with their function bodies and full type information.
func loadPackages(dir, modPath string, patterns ...string) (*token.FileSet, []*srcPkg, error) {
	args := append([]string{"list", "-deps", "-e", "-json=ImportPath,Dir,GoFiles,ImportMap,Standard,Module,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	// Without cgo, go list names the pure Go files of every package:
	// go/types cannot check cgo's.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list in %s: %v\n%s", dir, err, stderr.String())
	}
	var listed []*listedPkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		p := new(listedPkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("go list in %s: %v", dir, err)
		}
		if p.Error != nil {
			return nil, nil, fmt.Errorf("go list in %s: %s: %s", dir, p.ImportPath, p.Error.Err)
		}
		listed = append(listed, p)
	}
	fset := token.NewFileSet()
	analysed := func(p *listedPkg) bool {
		return !p.Standard && p.Module != nil && p.Module.Path == modPath
	}
	// Parse every package at once (go list -deps lists a package after
	// its dependencies; checking is in that order, parsing is not).
	parsed := make([][]*ast.File, len(listed))
	errs := make([]error, len(listed))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, p := range listed {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			mode := parser.SkipObjectResolution
			if analysed(p) {
				mode |= parser.ParseComments
			}
			for _, name := range p.GoFiles {
				f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, mode)
				if err != nil {
					errs[i] = err
					return
				}
				if !analysed(p) {
					// Only declarations matter in a dependency.
					for _, d := range f.Decls {
						if fd, ok := d.(*ast.FuncDecl); ok {
							fd.Body = nil
						}
					}
				}
				parsed[i] = append(parsed[i], f)
			}
		})
	}
	wg.Wait()
	checked := map[string]*types.Package{"unsafe": types.Unsafe}
	var pkgs []*srcPkg
	for i, p := range listed {
		if errs[i] != nil {
			return nil, nil, errs[i]
		}
		if p.ImportPath == "unsafe" {
			continue
		}
		conf := types.Config{
			Importer: importerFunc(func(path string) (*types.Package, error) {
				if m, ok := p.ImportMap[path]; ok {
					path = m
				}
				if tp := checked[path]; tp != nil {
					return tp, nil
				}
				return nil, fmt.Errorf("%s: import %q not loaded", p.ImportPath, path)
			}),
			IgnoreFuncBodies: !analysed(p),
			// go vet reports what a build would; a dependency's soft
			// errors (unused imports once bodies are gone) do not matter.
			Error: func(error) {},
		}
		var info *types.Info
		if analysed(p) {
			info = &types.Info{
				Types:      map[ast.Expr]types.TypeAndValue{},
				Defs:       map[*ast.Ident]types.Object{},
				Uses:       map[*ast.Ident]types.Object{},
				Selections: map[*ast.SelectorExpr]*types.Selection{},
			}
		}
		tp, err := conf.Check(p.ImportPath, fset, parsed[i], info)
		if tp == nil {
			return nil, nil, fmt.Errorf("type-check %s: %v", p.ImportPath, err)
		}
		if analysed(p) && err != nil {
			return nil, nil, fmt.Errorf("type-check %s: %v", p.ImportPath, err)
		}
		checked[p.ImportPath] = tp
		if analysed(p) {
			pkgs = append(pkgs, &srcPkg{path: p.ImportPath, files: parsed[i], types: tp, info: info})
		}
	}
	return fset, pkgs, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

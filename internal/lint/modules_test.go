package lint

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goModJSON is the part of `go mod edit -json` (and `go work edit -json`)
// the tests read.
type goModJSON struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []replaceJSON
	Use     []struct{ DiskPath string }
}

type replaceJSON struct {
	Old struct{ Path string }
	New struct{ Path, Version string }
}

func editJSON(t *testing.T, args ...string) goModJSON {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var m goModJSON
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return m
}

// The core module requires the five core modules and nothing else, and
// replaces nothing (a consumer ignores replace directives): what
// `go get github.com/seglog/seglog` brings. docs/DESIGN.md#modules.
func TestCoreGoMod(t *testing.T) {
	m := editJSON(t, "mod", "edit", "-json", "go.mod")
	if m.Module.Path != mod {
		t.Fatalf("go.mod declares %s, want %s", m.Module.Path, mod)
	}
	for _, r := range m.Require {
		if !slices.Contains(coreModules, r.Path) {
			t.Errorf("the core's go.mod requires %s %s; the core may require only %q (docs/DESIGN.md#modules)", r.Path, r.Version, coreModules)
		}
	}
	for _, r := range m.Replace {
		t.Errorf("the core's go.mod replaces %s; a consumer would not see it", r.Old.Path)
	}
}

// moduleDirs returns the directories (slash-separated, relative to the
// repository root, "." for the root) that hold a go.mod.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "../.." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel("../..", filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// Every module of the repository is in go.work, builds alone (GOWORK=off)
// by replacing each seglog module it requires with that module's
// directory, and is named by the README's test command, which .ci/run
// runs as it stands (in workspace mode, go test ./... from the root covers
// the core module only), but bench/peers, which .ci/run tests on its own.
func TestModulesListed(t *testing.T) {
	dirs := moduleDirs(t)
	if !slices.Contains(dirs, ".") || len(dirs) < 2 {
		t.Fatalf("go.mod files in %q", dirs)
	}

	work := editJSON(t, "work", "edit", "-json", "go.work")
	var used []string
	for _, u := range work.Use {
		used = append(used, path.Clean(strings.TrimPrefix(u.DiskPath, "./")))
	}
	slices.Sort(used)
	if !slices.Equal(used, dirs) {
		t.Errorf("go.work uses %q; the modules are %q", used, dirs)
	}

	for _, dir := range dirs {
		m := editJSON(t, "mod", "edit", "-json", path.Join(dir, "go.mod"))
		if want := path.Join(mod, dir); m.Module.Path != want {
			t.Errorf("%s/go.mod declares %s, want %s (import paths follow directories)", dir, m.Module.Path, want)
		}
		for _, r := range m.Require {
			rel, ok := strings.CutPrefix(r.Path+"/", mod+"/")
			if !ok {
				continue
			}
			target := path.Clean("./" + rel)
			want, err := filepath.Rel(filepath.FromSlash(dir), filepath.FromSlash(target))
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(m.Replace, func(rp replaceJSON) bool { return rp.Old.Path == r.Path })
			if i < 0 || m.Replace[i].New.Path != filepath.ToSlash(want) {
				t.Errorf("%s/go.mod requires %s without replace %s => %s: it would not build with GOWORK=off", dir, r.Path, r.Path, filepath.ToSlash(want))
			}
		}
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for line := range strings.Lines(string(readme)) {
		if strings.HasPrefix(line, "go test ./... ") {
			command = strings.TrimSpace(line)
			break
		}
	}
	if command == "" {
		t.Fatal(`README.md has no line "go test ./... ..." (the test command)`)
	}
	var patterns []string
	for _, dir := range dirs {
		if dir == peersModule {
			continue // tested in a step of its own (see peersModule)
		}
		if dir == "." {
			patterns = append(patterns, "./...")
		} else {
			patterns = append(patterns, "./"+dir+"/...")
		}
	}
	if got := strings.Fields(command)[2:]; !slices.Equal(got, patterns) {
		t.Errorf("README's test command tests %q; every module is %q", got, patterns)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(ci), "\n"), command) {
		t.Errorf(".ci/run does not run the README's test command %q as a line of its own", command)
	}
	if step := "(cd " + peersModule + " && go vet ./... && go test ./...)"; !slices.Contains(strings.Split(string(ci), "\n"), step) {
		t.Errorf(".ci/run does not test %s in a step of its own (%q)", peersModule, step)
	}
}

// peersModule is the harness that runs the peers (SQLite, pebble,
// raft-wal, ...): the README's test command leaves it out (compiling it
// alone takes longer than the rest of the tests) and .ci/run tests it in
// a step of its own.
const peersModule = "bench/peers"

// No other module imports a package under the core module's internal/
// (Go allows it, the paths sharing the module's prefix, but it would be
// an API between modules that no version guards): what they share is
// exported (vfs, jsonl, testgen). docs/DESIGN.md#modules.
func TestNestedModulesImportNoCoreInternal(t *testing.T) {
	internal := `"` + mod + `/internal/`
	for _, dir := range moduleDirs(t) {
		if dir == "." {
			continue
		}
		root := filepath.Join("../..", filepath.FromSlash(dir))
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, internal) {
					rel, _ := filepath.Rel("../..", p)
					t.Errorf("%s:%d: module %s imports the core's %s", filepath.ToSlash(rel), i+1, dir, strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

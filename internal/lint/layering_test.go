package lint

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/seglog/seglog"

// mustNotDepend lists, per package (relative to the module), the module
// packages it must not depend on, directly or transitively. The table is
// docs/DESIGN.md#layering.
var mustNotDepend = map[string][]string{
	"event":              {"*"},
	"internal/base":      {"*"},
	"vfs":                {"*"},
	"internal/bufpool":   {"*"},
	"segment":            {"index", "handle", "engine", "recovery", "plan", "bench", "fuzz"},
	"index":              {"segment", "handle", "engine", "recovery", "plan", "bench", "fuzz", "vfs"},
	"handle":             {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "vfs"},
	"recovery":           {"segment", "index", "handle", "engine", "plan", "bench", "fuzz", "vfs"},
	"plan":               {"segment", "index", "engine", "bench", "fuzz", "vfs"},
	"internal/testclock": {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "vfs"},
	"testgen":            {"segment", "index", "handle", "engine", "recovery", "plan", "bench", "fuzz", "vfs"},
	"internal/testlong":  {"*"},
	// store is the contract every backend implements: types, errors, the
	// session rules; no storage.
	"store":    {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	"jsonl":    {"segment", "index", "engine", "bench", "fuzz", "cmd/seglog", "backend"},
	"storekit": {"segment", "index", "engine", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	// The reference's older calls (locate, readRaw, prepare) over the
	// store contract, for every backend.
	"compat": {"segment", "index", "engine", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	"engine": {"bench", "fuzz", "cmd/seglog", "backend"},
	// The log's writer (placement, rolls, growth, group fdatasync) sits
	// below the engine: it knows segments and the file system, nothing of
	// sessions, the index or the contract.
	// ("engine" covers engine/internal/coord: the log reaches the
	// coordination only through its Shared interface.)
	"engine/internal/wal": {"engine", "store", "index", "handle", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	// The coordination between processes (LOCK, byte locks, shm and its
	// layout, the futex watch) sits below the engine too, beside the log:
	// it knows vfs and the error it returns (internal/base's, which store
	// names), nothing of the contract, segments, sessions or the index.
	"engine/internal/coord": {"engine", "store", "segment", "index", "handle", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	"bench":                 {"bench/chart", "fuzz", "cmd/seglog", "backend"},
	"bench/chart":           {"fuzz", "cmd/seglog", "backend"},
	"backend/jetstream":     {"engine", "index", "bench", "fuzz", "cmd/seglog"},
	// The embedded NATS servers know nothing of seglog.
	"backend/jetstream/embedded": {"*"},
	// The search index works over the store contract, for every backend.
	"search": {"segment", "index", "bench", "fuzz", "cmd/seglog", "backend"},

	// Compaction's plan (what each segment holds per incarnation, and what
	// goes) reads segments; the engine's replay fold attributes their
	// frames. It knows nothing of sessions, the contract, the index or the DB.
	"engine/internal/compactplan": {"engine", "store", "index", "handle", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	// The ordered lists behind ListPage know IDs and keys, nothing of
	// sessions, segments or the contract.
	"engine/internal/listorder": {"*"},
	// A writing process's dictionary training (when one is due, its
	// samples, the CPU budget, the renewal) knows segments and the file
	// system, nothing of sessions, the coordination (under "engine"), the
	// index or the DB.
	"engine/internal/dict": {"engine", "store", "index", "handle", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	// Check's scan of every frame and dictionary knows segments and
	// internal/base's errors, nothing of sessions, the index or the DB.
	"engine/internal/framecheck": {"engine", "store", "index", "handle", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
}

// coreModules are the only modules outside seglog that the core module
// (this repository's root go.mod: event to engine, bench, fuzz, internal)
// may depend on, its code and its tests alike. In workspace mode (go.work)
// the core compiles against every module of the workspace, so a core
// package importing the NATS client, cobra, the progress bars or gonum/plot
// would still build there; TestLayering catches it, and TestCoreGoMod
// checks the core's go.mod. docs/DESIGN.md#modules.
var coreModules = []string{
	"github.com/cespare/xxhash/v2",
	"github.com/google/go-cmp",
	"github.com/klauspost/compress",
	"go.etcd.io/bbolt",
	"golang.org/x/sys",
}

// mustNotDependExternal lists, per package of the other modules, modules
// outside seglog it must not depend on: the replicated backend stays free
// of the CLI's plots, progress bars and command line, and of the
// Prometheus client; the charts of the NATS modules and the CLI's.
var mustNotDependExternal = map[string][]string{
	"backend/jetstream": {"github.com/prometheus", "gonum.org/v1/plot", "github.com/schollz/progressbar", "github.com/spf13/cobra"},
	"bench/chart":       {"github.com/nats-io", "github.com/schollz/progressbar", "github.com/spf13/cobra", "github.com/prometheus"},
	"search":            {"github.com/nats-io", "gonum.org/v1/plot", "github.com/schollz/progressbar", "github.com/spf13/cobra", "github.com/prometheus"},
}

// layered are the modules (directories relative to the repository root)
// whose packages the tables name; go list runs in each.
var layered = []string{".", "backend/jetstream", "bench/chart", "cmd/seglog", "search"}

// pure packages may not import these directly (their transitive closure
// includes os through fmt, so only direct imports are checked).
var pure = []string{"recovery", "plan"}
var ioPackages = []string{"os", "os/exec", "os/signal", "syscall", "net", "net/http", "io/fs", "io/ioutil", "time", "golang.org/x/sys/unix", "go.etcd.io/bbolt"}

type pkgInfo struct {
	path    string   // relative to mod; a test variant's has its " [x.test]"
	test    bool     // a test variant or a test main
	module  string   // the module the package is in
	deps    []string // transitive, full import paths
	imports []string // direct, full import paths
	// depModules maps each of deps to its module ("" for the standard
	// library).
	depModules map[string]string
}

// goList lists the packages of every module in layered, tests included.
func goList(t *testing.T) []pkgInfo {
	t.Helper()
	touchSources(t)
	var pkgs []pkgInfo
	for _, dir := range layered {
		pkgs = append(pkgs, goListModule(t, dir)...)
	}
	return pkgs
}

// goListModule lists the packages of the module in dir (relative to the
// repository root) with go list -deps -test, in the environment the test
// runs in: the workspace, or with GOWORK=off the module alone.
func goListModule(t *testing.T, dir string) []pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f",
		`{{.ImportPath}}|{{with .Module}}{{.Path}}{{end}}|{{.DepOnly}}|{{join .Deps ","}}|{{join .Imports ","}}`, "./...")
	cmd.Dir = filepath.Join("../..", dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr)
	}
	moduleOf := map[string]string{}
	type listed struct {
		importPath, module string
		deps, imports      []string
	}
	var own []listed
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 5 {
			t.Fatalf("go list line %q", sc.Text())
		}
		moduleOf[f[0]] = f[1]
		if f[2] == "false" {
			own = append(own, listed{f[0], f[1], splitList(f[3]), splitList(f[4])})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkgInfo
	for _, l := range own {
		p := pkgInfo{
			path:       strings.TrimPrefix(strings.TrimPrefix(l.importPath, mod), "/"),
			test:       strings.Contains(l.importPath, " [") || strings.HasSuffix(l.importPath, ".test"),
			module:     l.module,
			deps:       l.deps,
			imports:    l.imports,
			depModules: map[string]string{},
		}
		for _, d := range l.deps {
			m, ok := moduleOf[d]
			if !ok {
				t.Fatalf("go list in %s: %s depends on %s, which it does not list", dir, l.importPath, d)
			}
			p.depModules[d] = m
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// splitList splits a go list field joined with commas (a test variant's
// import path, "x [x.test]", has a space).
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// touchSources reads every Go file and go.mod of the repository (all its
// modules) and go.work, so that go test's cache (which tracks the files a
// test opens, not those its subprocesses open) reruns this test whenever
// an import may have changed.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod" || d.Name() == "go.work") {
			_, err = os.ReadFile(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// violations returns one message per broken rule.
func violations(pkgs []pkgInfo) []string {
	var out []string
	for _, p := range pkgs {
		if p.module == mod {
			for _, d := range p.deps {
				m := p.depModules[d]
				if m != "" && m != mod && !slices.Contains(coreModules, m) {
					out = append(out, fmt.Sprintf("%s (core module) depends on %s, of module %s (docs/DESIGN.md#modules)", p.path, d, m))
					break
				}
			}
		}
		if p.test {
			continue
		}
		for _, banned := range mustNotDepend[p.path] {
			for _, d := range p.deps {
				rel, ok := strings.CutPrefix(d, mod+"/")
				if !ok {
					continue
				}
				if banned == "*" || rel == banned || strings.HasPrefix(rel, banned+"/") {
					out = append(out, fmt.Sprintf("%s depends on %s (docs/DESIGN.md#layering)", p.path, rel))
				}
			}
		}
		for _, banned := range mustNotDependExternal[p.path] {
			for _, d := range p.deps {
				if d == banned || strings.HasPrefix(d, banned+"/") {
					out = append(out, fmt.Sprintf("%s depends on %s (docs/DESIGN.md#layering)", p.path, d))
					break
				}
			}
		}
		if slices.Contains(pure, p.path) {
			for _, imp := range p.imports {
				if slices.Contains(ioPackages, imp) {
					out = append(out, fmt.Sprintf("pure package %s imports %s", p.path, imp))
				}
			}
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	pkgs := goList(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.path] = true
	}
	for p := range mustNotDependExternal {
		if !seen[p] {
			t.Errorf("external layering table names %s, which go list does not know", p)
		}
	}
	for p := range mustNotDepend {
		if !seen[p] {
			t.Errorf("layering table names %s, which go list does not know", p)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The checker itself must catch a violation.
func TestLayeringCatchesViolations(t *testing.T) {
	nats := map[string]string{mod + "/segment": mod, "github.com/nats-io/nats.go": "github.com/nats-io/nats.go"}
	fake := []pkgInfo{
		{path: "segment", module: mod, deps: []string{"fmt", mod + "/engine"}, depModules: map[string]string{"fmt": "", mod + "/engine": mod}},
		{path: "event", module: mod, deps: []string{mod + "/internal/base"}, depModules: map[string]string{mod + "/internal/base": mod}},
		{path: "recovery", module: mod, imports: []string{"os"}},
		{path: "engine", module: mod, deps: []string{mod + "/segment", "github.com/nats-io/nats.go"}, depModules: nats},
		// A core test is held to the core's modules too.
		{path: "index [github.com/seglog/seglog/index.test]", test: true, module: mod,
			deps:       []string{"go.etcd.io/bbolt", "github.com/spf13/cobra"},
			depModules: map[string]string{"go.etcd.io/bbolt": "go.etcd.io/bbolt", "github.com/spf13/cobra": "github.com/spf13/cobra"}},
		// So is a dependency on another seglog module.
		{path: "bench", module: mod, deps: []string{mod + "/bench/chart"}, depModules: map[string]string{mod + "/bench/chart": mod + "/bench/chart"}},
		{path: "backend/jetstream", module: mod + "/backend/jetstream", deps: []string{mod + "/engine", "github.com/nats-io/nats.go"}, depModules: nats},
		{path: "backend/jetstream", module: mod + "/backend/jetstream", deps: []string{"gonum.org/v1/plot/vg"}, depModules: map[string]string{"gonum.org/v1/plot/vg": "gonum.org/v1/plot"}},
	}
	got := violations(fake)
	want := []string{
		"segment depends on engine (docs/DESIGN.md#layering)",
		"event depends on internal/base (docs/DESIGN.md#layering)",
		"pure package recovery imports os",
		"engine (core module) depends on github.com/nats-io/nats.go, of module github.com/nats-io/nats.go (docs/DESIGN.md#modules)",
		"index [github.com/seglog/seglog/index.test] (core module) depends on github.com/spf13/cobra, of module github.com/spf13/cobra (docs/DESIGN.md#modules)",
		"bench (core module) depends on github.com/seglog/seglog/bench/chart, of module github.com/seglog/seglog/bench/chart (docs/DESIGN.md#modules)",
		"bench depends on bench/chart (docs/DESIGN.md#layering)",
		"backend/jetstream depends on engine (docs/DESIGN.md#layering)",
		"backend/jetstream depends on gonum.org/v1/plot/vg (docs/DESIGN.md#layering)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations = %q, want %q", got, want)
	}
}

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
	"internal/vfs":       {"*"},
	"segment":            {"index", "handle", "engine", "recovery", "plan", "bench", "fuzz"},
	"index":              {"segment", "handle", "engine", "recovery", "plan", "bench", "fuzz", "internal/vfs"},
	"handle":             {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "internal/vfs"},
	"recovery":           {"segment", "index", "handle", "engine", "plan", "bench", "fuzz", "internal/vfs"},
	"plan":               {"segment", "index", "engine", "bench", "fuzz", "internal/vfs"},
	"internal/testclock": {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "internal/vfs"},
	"internal/testgen":   {"segment", "index", "handle", "engine", "recovery", "plan", "bench", "fuzz", "internal/vfs"},
	// store is the contract every backend implements: types, errors, the
	// session rules; no storage.
	"store":             {"segment", "index", "engine", "recovery", "plan", "bench", "fuzz", "cmd/seglog", "backend"},
	"internal/jsonl":    {"segment", "index", "engine", "bench", "fuzz", "cmd/seglog", "backend"},
	"engine":            {"bench", "fuzz", "cmd/seglog", "backend"},
	"bench":             {"fuzz", "cmd/seglog", "backend"},
	"bench/chart":       {"fuzz", "cmd/seglog", "backend"},
	"backend/jetstream": {"bench", "fuzz", "cmd/seglog"},
	// The embedded NATS servers know nothing of seglog.
	"backend/jetstream/embedded": {"*"},
}

// mustNotDependExternal lists, per package, modules outside seglog it must
// not depend on: the storage core stays free of the NATS client and
// server, which only the replicated backend (and the CLI that benchmarks
// it) bring in, of the CLI's plots and progress bars (cliOnly), and of
// the Prometheus client, which only the collector's own module
// (metrics/prometheus) brings in.
var mustNotDependExternal = map[string][]string{
	"event":             append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"segment":           append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"index":             append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"handle":            append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"engine":            append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"store":             append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"recovery":          append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"plan":              append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"bench":             append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"internal/vfs":      append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"internal/base":     append([]string{"github.com/nats-io", "github.com/prometheus"}, cliOnly...),
	"backend/jetstream": append([]string{"github.com/prometheus"}, cliOnly...),
	"bench/chart":       {"github.com/nats-io", "github.com/schollz/progressbar", "github.com/prometheus"},
}

// cliOnly are the modules only the commands use: gonum/plot (through
// bench/chart, for bench -plot) and the progress bars of cmd/seglog.
var cliOnly = []string{"gonum.org/v1/plot", "github.com/schollz/progressbar"}

// pure packages may not import these directly (their transitive closure
// includes os through fmt, so only direct imports are checked).
var pure = []string{"recovery", "plan"}
var ioPackages = []string{"os", "os/exec", "os/signal", "syscall", "net", "net/http", "io/fs", "io/ioutil", "time", "golang.org/x/sys/unix", "go.etcd.io/bbolt"}

type pkgInfo struct {
	path    string   // relative to mod
	deps    []string // transitive, full import paths
	imports []string // direct, full import paths
}

func goList(t *testing.T) []pkgInfo {
	t.Helper()
	touchSources(t)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Deps " "}}|{{join .Imports " "}}`, mod+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	var pkgs []pkgInfo
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", sc.Text())
		}
		pkgs = append(pkgs, pkgInfo{
			path:    strings.TrimPrefix(strings.TrimPrefix(f[0], mod), "/"),
			deps:    strings.Fields(f[1]),
			imports: strings.Fields(f[2]),
		})
	}
	return pkgs
}

// touchSources reads every Go file of the module, so that go test's cache
// (which tracks the files a test opens, not those its subprocesses open)
// reruns this test whenever an import may have changed.
func touchSources(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || d.Name() == "go.mod") {
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
	fake := []pkgInfo{
		{path: "segment", deps: []string{"fmt", mod + "/engine"}},
		{path: "event", deps: []string{mod + "/internal/base"}},
		{path: "recovery", imports: []string{"os"}},
		{path: "engine", deps: []string{mod + "/segment", "github.com/nats-io/nats.go"}},
		{path: "backend/jetstream", deps: []string{mod + "/engine", "github.com/nats-io/nats.go"}},
	}
	got := violations(fake)
	want := []string{
		"segment depends on engine (docs/DESIGN.md#layering)",
		"event depends on internal/base (docs/DESIGN.md#layering)",
		"pure package recovery imports os",
		"engine depends on github.com/nats-io/nats.go (docs/DESIGN.md#layering)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations = %q, want %q", got, want)
	}
}

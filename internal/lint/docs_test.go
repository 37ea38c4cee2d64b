package lint

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The limits of the docs (issue 48): README is a front door a newcomer
// finishes, and no doc is too long to read in one file.
const (
	maxDocBytes   = 120 << 10 // of any .md file
	maxReadmeLine = 250       // of README.md
)

// repoRoot is the repository's root, from internal/lint.
const repoRoot = "../.."

// docFiles returns the .md files of the repository (slash paths from
// its root), but those under .git and testdata.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no .md file under %s", root)
	}
	return out
}

// TestDocSizes: no .md file is over maxDocBytes, and README.md has at
// most maxReadmeLine lines.
func TestDocSizes(t *testing.T) {
	for _, p := range docFiles(t, repoRoot) {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxDocBytes {
			t.Errorf("%s is %d bytes, over %d: split it (docs/DESIGN.md's contents list the parts)", p, len(b), maxDocBytes)
		}
		if p == "README.md" {
			if n := strings.Count(string(b), "\n"); n > maxReadmeLine {
				t.Errorf("README.md has %d lines, over %d: move the detail to docs/", n, maxReadmeLine)
			}
		}
	}
}

var (
	fenceLine  = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headLine   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkInHead = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose returns the lines of a markdown text outside fenced code blocks.
func prose(text string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceLine.MatchString(line) {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, line)
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped but for '-' and '_', each space a '-'.
func slug(heading string) string {
	heading = linkInHead.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown text's headings, a repeated
// one numbered as GitHub numbers it (x, x-1, x-2, ...).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(text) {
		m := headLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// links returns the relative link targets of a markdown text (outside
// code blocks and code spans), with the line of each.
func links(text string) (targets []string, lines []int) {
	fence := false
	for i, line := range strings.Split(text, "\n") {
		if fenceLine.MatchString(line) {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			u := m[1]
			if strings.Contains(u, "://") || strings.HasPrefix(u, "mailto:") {
				continue
			}
			targets = append(targets, u)
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// brokenLinks lists the relative links of the .md files under root that
// name no file, or a heading the .md file they name does not have.
func brokenLinks(t *testing.T, root string) []string {
	t.Helper()
	texts := map[string]string{}
	read := func(p string) (string, bool) {
		if s, ok := texts[p]; ok {
			return s, true
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return "", false
		}
		texts[p] = string(b)
		return texts[p], true
	}
	var out []string
	for _, p := range docFiles(t, root) {
		text, _ := read(p)
		targets, lines := links(text)
		for i, u := range targets {
			file, anchor, _ := strings.Cut(u, "#")
			target := p
			if file != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(p), file))
			}
			where := fmt.Sprintf("%s:%d: link %s", p, lines[i], u)
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				out = append(out, where+": no file "+target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			tt, _ := read(target)
			if !anchors(tt)[anchor] {
				out = append(out, where+": "+target+" has no heading #"+anchor)
			}
		}
	}
	return out
}

// TestDocLinks: every relative link in the .md files names a file that
// exists and, when it names a heading of a .md file, a heading it has
// (sections moved between files keep their anchors only if the links
// follow them).
func TestDocLinks(t *testing.T) {
	for _, b := range brokenLinks(t, repoRoot) {
		t.Error(b)
	}
}

// TestDocLinksFixture: the link check finds a missing file, a missing
// heading (and a repeated heading's numbered anchor), and passes code.
func TestDocLinksFixture(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/B.md", "# B\n\n## The `seglog bench` run (NATS, 2)\n\n## Files\n\n## Files\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/B.md#the-seglog-bench-run-nats-2) [ok](docs/B.md#files-1) [ok](#top)",
		"# Top",
		"[gone](docs/C.md) [no heading](docs/B.md#nope) [third](docs/B.md#files-2)",
		"`[code](docs/D.md)`",
		"```", "[fenced](docs/E.md)", "```",
		"[web](https://example.com/x.md)",
	}, "\n"))
	got := strings.Join(brokenLinks(t, root), "\n")
	for _, want := range []string{
		"README.md:3: link docs/C.md: no file docs/C.md",
		"README.md:3: link docs/B.md#nope: docs/B.md has no heading #nope",
		"README.md:3: link docs/B.md#files-2: docs/B.md has no heading #files-2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("broken links lack %q; got:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; got == "" || n != 3 {
		t.Errorf("%d broken links, want 3:\n%s", n, got)
	}
}

// TestReadmeFirstHost: README's first host is the package example
// engine.Example, which go test runs: the lines between the README
// markers of engine/example_test.go are in README.md, in order and
// together, so that the README's first screen of Go cannot rot.
func TestReadmeFirstHost(t *testing.T) {
	ex, err := os.ReadFile(filepath.Join(repoRoot, "engine", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(ex), "// README: first host begins\n")
	if ok {
		body, _, ok = strings.Cut(body, "\t// README: first host ends")
	}
	if !ok || strings.TrimSpace(body) == "" {
		t.Fatal("engine/example_test.go has no lines between \"// README: first host begins\" and \"// README: first host ends\"")
	}
	if !strings.Contains(string(readme), "```go\n") || !strings.Contains(string(readme), body) {
		t.Errorf("README.md does not hold engine/example_test.go's first host line for line:\n%s", body)
	}
}

// codeDocRef is a doc named in Go code by its path from the repository's
// root, with the heading's anchor if it names one.
var codeDocRef = regexp.MustCompile(`\b((?:docs|backend/jetstream|fuzz)/[A-Za-z]+\.md)(#[\w-]+)?`)

// brokenCodeRefs lists the docs that the .go files under root name (as
// docs/X.md, backend/jetstream/X.md or fuzz/X.md, with an anchor or not)
// which do not exist, or lack the heading the anchor names.
func brokenCodeRefs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	heads := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "lint/docs_test.go") { // this file: its fixtures
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, m := range codeDocRef.FindAllStringSubmatch(string(b), -1) {
			doc, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if _, ok := heads[doc]; !ok {
				if text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc))); err == nil {
					heads[doc] = anchors(string(text))
				} else {
					heads[doc] = nil
				}
			}
			switch {
			case heads[doc] == nil:
				out = append(out, fmt.Sprintf("%s names %s, which does not exist", filepath.ToSlash(rel), doc))
			case anchor != "" && !heads[doc][anchor]:
				out = append(out, fmt.Sprintf("%s names %s#%s: %s has no such heading", filepath.ToSlash(rel), doc, anchor, doc))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCodeDocRefs: every doc a .go file names by its path (a comment's
// "docs/DURABILITY.md, Preallocation", a message's
// "docs/DESIGN.md#modules") exists, and has the heading an anchor names,
// so that a section moved to another file takes its references along.
func TestCodeDocRefs(t *testing.T) {
	for _, b := range brokenCodeRefs(t, repoRoot) {
		t.Error(b)
	}
}

// TestCodeDocRefsFixture: the check finds a doc that is gone and an
// anchor the doc lacks, and passes a doc and an anchor that are there.
func TestCodeDocRefsFixture(t *testing.T) {
	root := t.TempDir()
	for p, s := range map[string]string{
		"docs/A.md":   "# A\n\n## Many processes\n",
		"engine/x.go": "package engine\n\n// See docs/A.md, Many processes; docs/A.md#many-processes;\n// docs/Gone.md, Limits; and docs/A.md#limits.\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(brokenCodeRefs(t, root), "\n")
	want := "engine/x.go names docs/Gone.md, which does not exist\nengine/x.go names docs/A.md#limits: docs/A.md has no such heading"
	if got != want {
		t.Errorf("broken references:\n%s\nwant:\n%s", got, want)
	}
}

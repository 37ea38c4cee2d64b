package lint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadingTheSource: every function docs/DESIGN.md's "Reading the
// source" names is declared in the file named before it, so that the
// walk through Append, Flush, Read and Wait stays true as the code moves.
func TestReadingTheSource(t *testing.T) {
	design, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(design)
	start := strings.Index(text, "\n## Reading the source\n")
	if start < 0 {
		t.Fatal(`docs/DESIGN.md has no section "## Reading the source"`)
	}
	sec := text[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	token := regexp.MustCompile("`([^`]+)`")
	method := regexp.MustCompile(`^\(\*(\w+)\)\.(\w+)$|^(\w+)\.(\w+)$`)
	file, checked := "", 0
	for _, m := range token.FindAllStringSubmatch(sec, -1) {
		name := m[1]
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "/") {
			file = name
			continue
		}
		mm := method.FindStringSubmatch(name)
		if mm == nil || !strings.HasSuffix(file, ".go") {
			continue
		}
		recv, fn, ptr := mm[1], mm[2], `\*`
		if recv == "" {
			recv, fn, ptr = mm[3], mm[4], `\*?`
		}
		src, err := os.ReadFile(filepath.Join("../..", filepath.FromSlash(file)))
		if err != nil {
			t.Errorf("Reading the source names %s: %v", file, err)
			continue
		}
		decl := regexp.MustCompile(`(?m)^func \(\w+ ` + ptr + regexp.QuoteMeta(recv) + `\) ` + regexp.QuoteMeta(fn) + `\(`)
		if !decl.Match(src) {
			t.Errorf("Reading the source names %s in %s, which does not declare it", name, file)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("Reading the source names %d functions; the walk is gone?", checked)
	}
}

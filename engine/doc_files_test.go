package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocNamesEveryFile: the package doc's Files section (and its list of
// goroutines) names every non-test source file of the package, and
// names no file that is not there, so that a newcomer reading it finds
// every room (issue 48).
func TestDocNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f] = true // (a test file the doc names is there too)
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(f) + `\b`).Match(doc) {
			t.Errorf("doc.go does not name %s: add it to the Files section with what it holds", f)
		}
	}
	for _, m := range regexp.MustCompile(`\b[a-z_]+\.go\b`).FindAllString(string(doc), -1) {
		if !have[m] {
			t.Errorf("doc.go names %s, which is not a source file of the package", m)
		}
	}
}

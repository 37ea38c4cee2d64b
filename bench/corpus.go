package bench

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A Corpus is the text the agent-host workload (AgentHost) cuts its
// messages and tool outputs from: source files and documentation, so that
// what the stores hold compresses like what an agent host writes, not like
// generated words.
type Corpus struct {
	// Source says where the files came from: a directory, or "embedded".
	Source string
	Files  []CorpusFile // sorted by path; none is empty
	Bytes  int          // of all the files

	docs     []int // indices of the .md files in Files
	docBytes int   // their bytes
}

// CorpusFile is one file of a Corpus.
type CorpusFile struct {
	Path string // slash-separated, relative to the Corpus's Source
	Text string
}

// embedded is the fallback corpus: this package's own sources (a binary
// run away from a source tree still has real text to write).
//
//go:embed *.go
var embedded embed.FS

// ModulePath is the module whose source tree LoadCorpus looks for.
const ModulePath = "github.com/seglog/seglog"

// LoadCorpus reads the corpus from dir: every .go and .md file under it
// (hidden directories, testdata and vendor left out). With dir "" it
// looks for the root of the seglog source tree in the working directory
// and its parents (a go.mod of module ModulePath: from a clone's root, from
// bench when go test runs, from bench/peers) and reads that; with no such
// root it returns the embedded corpus (package bench's own sources). The
// same tree gives the same corpus, whatever the directory it is found
// from.
func LoadCorpus(dir string) (*Corpus, error) {
	if dir == "" {
		root, err := findModuleRoot()
		if err != nil {
			return nil, err
		}
		if root == "" {
			return embeddedCorpus()
		}
		dir = root
	}
	c := &Corpus{Source: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || (!strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".md")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		c.add(filepath.ToSlash(rel), b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: reading the corpus: %w", err)
	}
	if len(c.Files) == 0 {
		return nil, fmt.Errorf("bench: no .go or .md file under %s for the corpus", dir)
	}
	c.sort()
	return c, nil
}

func embeddedCorpus() (*Corpus, error) {
	c := &Corpus{Source: "embedded"}
	ents, err := embedded.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		b, err := embedded.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		c.add("bench/"+e.Name(), b)
	}
	c.sort()
	return c, nil
}

func (c *Corpus) add(path string, b []byte) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	c.Files = append(c.Files, CorpusFile{Path: path, Text: string(b)})
	c.Bytes += len(b)
}

func (c *Corpus) sort() {
	slices.SortFunc(c.Files, func(a, b CorpusFile) int { return strings.Compare(a.Path, b.Path) })
	c.docs, c.docBytes = nil, 0
	for i, f := range c.Files {
		if strings.HasSuffix(f.Path, ".md") {
			c.docs = append(c.docs, i)
			c.docBytes += len(f.Text)
		}
	}
}

// findModuleRoot returns the nearest directory at or above the working
// directory whose go.mod declares ModulePath, or "".
func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRoot, err := declaresModule(filepath.Join(dir, "go.mod")); err != nil {
			return "", err
		} else if isRoot {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", nil
		}
		dir = up
	}
}

func declaresModule(gomod string) (bool, error) {
	f, err := os.Open(gomod)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == ModulePath, nil
		}
	}
	return false, sc.Err()
}

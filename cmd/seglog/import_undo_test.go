package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/store"
)

// dirNames lists dir's entries, nil if it does not exist.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestRefusedImportLeavesNoStore: an import that refuses every log leaves
// no store it created (not the directory, nor a parent it made, nor the
// store's files in a directory that existed), and never touches what was
// there before it: another file, or a store.
func TestRefusedImportLeavesNoStore(t *testing.T) {
	root := t.TempDir()
	// A v3 header in a .v2 file: refused (its file name says v2).
	writeLog(t, root, store.Header{Version: 3, ID: "bad", CreatedAt: 1}, v2Turn()[:1], 2)
	refused := func(dir string) {
		t.Helper()
		out, code := cli(t, "import", root, "--dir", dir)
		if code != 1 || !strings.Contains(out, "refused") {
			t.Fatalf("import of a root whose one log is refused: exit %d\n%s", code, out)
		}
	}

	base := t.TempDir()
	refused(filepath.Join(base, "a", "b", "store"))
	if names := dirNames(t, base); len(names) != 0 {
		t.Errorf("a refused import into a new directory left %v in its parent", names)
	}

	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	refused(empty)
	if names := dirNames(t, empty); names == nil || len(names) != 0 {
		t.Errorf("a refused import into an empty directory: %v, want it there and empty", names)
	}

	other := filepath.Join(base, "other")
	writeFile(t, filepath.Join(other, "notes.txt"), []byte("mine"))
	refused(other)
	if names := dirNames(t, other); !slices.Equal(names, []string{"notes.txt"}) {
		t.Errorf("a refused import into a directory with a file of its own: %v, want [notes.txt]", names)
	}

	// Into a store: what it holds stays.
	good := t.TempDir()
	writeLog(t, good, store.Header{Version: 2, ID: "old", CreatedAt: 1}, v2Turn(), 2)
	st := filepath.Join(base, "store")
	if out, code := cli(t, "import", good, "--dir", st); code != 0 {
		t.Fatalf("import of a good log: exit %d\n%s", code, out)
	}
	before := dirNames(t, st)
	refused(st)
	if after := dirNames(t, st); !slices.Equal(before, after) {
		t.Errorf("a refused import into a store: its files %v, then %v", before, after)
	}
	if out, code := cli(t, "ls", "--dir", st); code != 0 || !strings.Contains(out, "old") {
		t.Errorf("the store after a refused import: exit %d\n%s", code, out)
	}
}

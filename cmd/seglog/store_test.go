package main

import (
	"bytes"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliGuarded runs the CLI but gives up (failing the test) if it does not
// return within a generous bound: a command that waits forever must not
// hang the test run.
func cliGuarded(t *testing.T, args ...string) (string, int) {
	t.Helper()
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		done <- result{out.String() + errOut.String(), code}
	}()
	select {
	case r := <-done:
		return r.out, r.code
	case <-time.After(30 * time.Second):
		t.Fatalf("seglog %s did not return", strings.Join(args, " "))
		return "", 0
	}
}

// storeCommands are every command but import and bench, each needing
// an existing store (copy: its source).
var storeCommands = [][]string{
	{"ls"}, {"stats"}, {"cat", "x"}, {"segments"}, {"tail", "x"}, {"tail", "x", "-f"},
	{"check"}, {"check", "--repair"}, {"delete", "x"}, {"compact"},
	{"export", "--all", "OUT"}, {"export", "x", "OUT"}, {"migrate", "--all"}, {"migrate", "x"},
	{"retain", "--keep", "1"}, {"copy", "--to", "OUT"}, {"changes"}, {"changes", "--follow"},
}

// TestCommandsNeedAStore: only import creates a store; every other
// command, given a directory that holds none (missing, or empty), fails
// with an error naming the directory and creates nothing.
func TestCommandsNeedAStore(t *testing.T) {
	for _, args := range storeCommands {
		for _, missing := range []bool{true, false} {
			name := strings.Join(args, " ")
			if missing {
				name += "/missing"
			} else {
				name += "/empty"
			}
			t.Run(name, func(t *testing.T) {
				parent := t.TempDir()
				dir := filepath.Join(parent, "store")
				if !missing {
					os.Mkdir(dir, 0o755)
				}
				out := filepath.Join(parent, "out")
				a := append([]string{}, args...)
				for i := range a {
					if a[i] == "OUT" {
						a[i] = out
					}
				}
				msg, code := cliGuarded(t, append(a, "--dir", dir)...)
				if code != 1 || !strings.Contains(msg, dir) || !strings.Contains(msg, "no store") {
					t.Errorf("exit %d, want 1 and an error naming %s:\n%s", code, dir, msg)
				}
				entries, err := os.ReadDir(dir)
				switch {
				case missing && err == nil:
					t.Errorf("the command created %s", dir)
				case !missing && len(entries) > 0:
					t.Errorf("the command wrote %d files into the empty %s", len(entries), dir)
				}
				if _, err := os.Stat(out); err == nil {
					t.Errorf("%s created %s", args[0], out)
				}
			})
		}
	}
}

// TestNoDefaultStoreCreated: a command without --dir and without
// $SEGLOG_DIR in an empty folder does not make ./seglog-data.
func TestNoDefaultStoreCreated(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("SEGLOG_DIR", "")
	for _, args := range [][]string{{"delete", "x"}, {"compact"}, {"migrate", "--all"}, {"ls"}} {
		msg, code := cli(t, args...)
		if code != 1 || !strings.Contains(msg, "seglog-data") {
			t.Errorf("%v: exit %d:\n%s", args, code, msg)
		}
		if _, err := os.Stat("seglog-data"); err == nil {
			t.Fatalf("%v created ./seglog-data", args)
		}
	}
}

// TestImportCreatesTheStore: import is the command that makes a store,
// in a directory that does not exist yet.
func TestImportCreatesTheStore(t *testing.T) {
	root := t.TempDir()
	h := store.Header{Version: 3, ID: "one", CreatedAt: 1}
	writeLog(t, root, h, testgen.V3Events(0, 3, 100), 3)
	dir := filepath.Join(t.TempDir(), "new", "store")
	if out, code := cli(t, "import", root, "--dir", dir); code != 0 || !strings.Contains(out, "imported 1 sessions") {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "ls", "--dir", dir); code != 0 || !strings.Contains(out, "one") {
		t.Fatalf("ls after import: exit %d\n%s", code, out)
	}
	// A root without any session log is a mistake, not an empty store.
	empty := filepath.Join(t.TempDir(), "store")
	if out, code := cli(t, "import", t.TempDir(), "--dir", empty); code != 1 || !strings.Contains(out, "no session logs") {
		t.Errorf("import of an empty root: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Error("import of an empty root created the store")
	}
}

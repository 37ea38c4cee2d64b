package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPiped runs the CLI with stdout and stderr on pipes (files that are
// not terminals, as in seglog bench | cat) and returns what each got.
func runPiped(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var outs [2]bytes.Buffer
	var ws [2]*os.File
	done := make(chan struct{}, 2)
	for i := range ws {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		go func() {
			io.Copy(&outs[i], r)
			r.Close()
			done <- struct{}{}
		}()
	}
	code = run(args, ws[0], ws[1])
	ws[0].Close()
	ws[1].Close()
	<-done
	<-done
	return outs[0].String(), outs[1].String(), code
}

// controlChars returns the control characters in s other than newline
// and tab (a progress bar's \r, a terminal's ESC sequences), quoted.
func controlChars(s string) []string {
	var found []string
	for i, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			found = append(found, strings.TrimSpace(s[max(0, i-30):i])+"<"+string(rune('@'+r))+">")
		}
	}
	return found
}

// Off a terminal the progress is plain: bench prints a line per finished
// row on stderr, the other commands nothing, and no output holds a
// control character. newProgress on a pipe draws no bar.
func TestProgressOffTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if newProgress(w).tty {
		t.Error("a pipe taken for a terminal")
	}
	r.Close()
	w.Close()

	dir := t.TempDir()
	stdout, stderr, code := runPiped(t, "bench", "-dir", dir, "-keep", "-events", "2000", "-durable", "20", "-sessions", "3", "-procs", "2", "-proc-sessions", "2",
		"-multi-time", "100ms", "-follow", "20", "-follow-every", "1ms", "-agent-sessions", "2", "-agent-turns", "2", "-kill-rounds", "0", "-search-sessions", "5")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, stderr)
	}
	for name, s := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if cc := controlChars(s); len(cc) > 0 {
			t.Errorf("bench's %s holds control characters: %q", name, cc)
		}
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 14 {
		t.Errorf("bench's stderr: %d lines, want one per row (11) and per step of the search row (3):\n%s", len(lines), stderr)
	}
	for _, l := range lines {
		if !strings.Contains(l, ": done in ") {
			t.Errorf("bench's stderr: %q is not a row's end", l)
		}
	}
	if !strings.Contains(stdout, "workload") || !strings.Contains(stdout, "raw write+fdatasync") {
		t.Errorf("bench's stdout has no table:\n%s", stdout)
	}

	// import, export, check --strict and compact print no progress off a
	// terminal, and nothing with a control character.
	made, _ := filepath.Glob(filepath.Join(dir, "seglog-bench-*", "run-9")) // the agent-host row's store (-keep)
	if len(made) != 1 {
		t.Fatalf("bench -keep left %v, want one agent-host store", made)
	}
	store := made[0]
	root, imported := t.TempDir(), filepath.Join(t.TempDir(), "store")
	for _, args := range [][]string{
		{"export", "--all", root, "--dir", store},
		{"import", root, "--dir", imported},
		{"check", "--strict", "--dir", imported},
		{"compact", "--dir", imported},
	} {
		stdout, stderr, code := runPiped(t, args...)
		if code != 0 || stderr != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
		if cc := controlChars(stdout); len(cc) > 0 {
			t.Errorf("%v: control characters on stdout: %q", args, cc)
		}
	}
}

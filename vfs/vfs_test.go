package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// conformance runs the same behavioural checks against every FS.
func TestConformance(t *testing.T) {
	impls := map[string]func(t *testing.T) (FS, string){
		"os":    func(t *testing.T) (FS, string) { return Default, t.TempDir() },
		"mem":   func(t *testing.T) (FS, string) { return NewMem(), "/db" },
		"fault": func(t *testing.T) (FS, string) { return NewFault(NewMem()), "/db" },
	}
	for name, mk := range impls {
		t.Run("fs="+name, func(t *testing.T) {
			fsys, dir := mk(t)
			if err := fsys.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "a")
			f, err := fsys.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Create(p); !errors.Is(err, fs.ErrExist) {
				t.Errorf("second Create = %v, want fs.ErrExist", err)
			}
			if _, err := f.WriteAt([]byte("hello world"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("W"), 6); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if n, err := f.Size(); err != nil || n != 11 {
				t.Errorf("Size = %d, %v; want 11", n, err)
			}
			buf := make([]byte, 20)
			n, err := f.ReadAt(buf, 0)
			if !errors.Is(err, io.EOF) || string(buf[:n]) != "hello World" {
				t.Errorf("ReadAt = %q, %v", buf[:n], err)
			}
			m, err := f.Map(11)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Bytes()) != "hello World" {
				t.Errorf("Map = %q", m.Bytes())
			}
			// A shared mapping sees a later in-place write.
			if _, err := f.WriteAt([]byte("H"), 0); err != nil {
				t.Fatal(err)
			}
			if string(m.Bytes()) != "Hello World" {
				t.Errorf("Map after write = %q, want the write visible", m.Bytes())
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("second Mapping.Close = %v", err)
			}
			if err := f.Truncate(5); err != nil {
				t.Fatal(err)
			}
			if n, _ := f.Size(); n != 5 {
				t.Errorf("Size after truncate = %d", n)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Rename(p, filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			if err := fsys.SyncDir(dir); err != nil {
				t.Fatal(err)
			}
			names, err := fsys.List(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"b"}, names); diff != "" {
				t.Errorf("List mismatch (-want +got):\n%s", diff)
			}
			got, err := ReadFile(fsys, filepath.Join(dir, "b"))
			if err != nil || string(got) != "Hello" {
				t.Errorf("ReadFile = %q, %v", got, err)
			}
			if _, err := fsys.Open(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open of renamed-away name = %v, want fs.ErrNotExist", err)
			}
			ro, err := fsys.Open(filepath.Join(dir, "b"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ro.WriteAt([]byte("x"), 0); err == nil {
				t.Error("WriteAt on a read-only file succeeded")
			}
			ro.Close()

			lock := filepath.Join(dir, "LOCK")
			l, err := fsys.Lock(lock)
			if err != nil {
				t.Fatal(err)
			}
			_, err = fsys.Lock(lock)
			var le *LockError
			if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.PID != os.Getpid() {
				t.Errorf("second Lock = %v, want *LockError naming pid %d", err, os.Getpid())
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l, err = fsys.Lock(lock)
			if err != nil {
				t.Fatalf("Lock after release: %v", err)
			}
			l.Close()
			if err := fsys.Remove(filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(filepath.Join(dir, "b")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("second Remove = %v", err)
			}
		})
	}
}

func writeFile(t *testing.T, m *MemFS, name string, data []byte, sync bool) File {
	t.Helper()
	f, err := m.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestCrashCloneKeepsSyncedDropsUnsynced(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o755)
	m.SyncDir("/")
	f := writeFile(t, m, "/d/f", []byte("synced."), true)
	m.SyncDir("/d")
	f.WriteAt([]byte("unsynced"), 7)
	writeFile(t, m, "/d/g", []byte("never synced entry"), true) // data synced, entry not

	lost := m.CrashClone(CrashConfig{})
	if got, _ := ReadFile(lost, "/d/f"); string(got) != "synced." {
		t.Errorf("after cut, /d/f = %q, want only the synced bytes", got)
	}
	if _, err := lost.Open("/d/g"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unsynced directory entry survived a cut: %v", err)
	}
	kept := m.CrashClone(CrashConfig{KeepAll: true})
	if got, _ := ReadFile(kept, "/d/f"); string(got) != "synced.unsynced" {
		t.Errorf("KeepAll /d/f = %q", got)
	}
	if got, _ := ReadFile(kept, "/d/g"); string(got) != "never synced entry" {
		t.Errorf("KeepAll /d/g = %q", got)
	}
	// The clone is independent of the original and reports nothing pending.
	if kept.UnsyncedWrites() != 0 {
		t.Errorf("clone has %d unsynced writes", kept.UnsyncedWrites())
	}
	f.WriteAt([]byte("!"), 0)
	if got, _ := ReadFile(kept, "/d/f"); got[0] != 's' {
		t.Error("clone shares memory with the original")
	}
}

// Every random cut leaves each file as its synced bytes overwritten by a
// prefix of each unsynced write: no byte that was never written appears
// (without Garble), and the synced prefix is intact.
func TestCrashCloneRandomIsPrefixOfEachWrite(t *testing.T) {
	for seed := range uint64(200) {
		m := NewMem()
		f := writeFile(t, m, "/f", bytes.Repeat([]byte{'s'}, 100), true)
		m.SyncDir("/")
		f.WriteAt(bytes.Repeat([]byte{'a'}, 50), 100)
		f.WriteAt(bytes.Repeat([]byte{'b'}, 50), 150)
		c := m.CrashClone(CrashConfig{Rand: rand.New(rand.NewPCG(seed, 1))})
		got, err := ReadFile(c, "/f")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < 100 || !bytes.Equal(got[:100], bytes.Repeat([]byte{'s'}, 100)) {
			t.Fatalf("seed %d: synced bytes damaged: %q", seed, got)
		}
		for i, c := range got[100:] {
			want := byte('a')
			if i >= 50 {
				want = 'b'
			}
			if c != want && c != 0 {
				t.Fatalf("seed %d: byte %d = %q, want %q or a hole", seed, 100+i, c, want)
			}
		}
	}
}

func TestCrashCloneGarbleOnlyTouchesUnsynced(t *testing.T) {
	changed := false
	for seed := range uint64(100) {
		m := NewMem()
		f := writeFile(t, m, "/f", bytes.Repeat([]byte{'s'}, 64), true)
		m.SyncDir("/")
		f.WriteAt(bytes.Repeat([]byte{'u'}, 64), 64)
		c := m.CrashClone(CrashConfig{Rand: rand.New(rand.NewPCG(seed, 2)), Garble: true})
		got, _ := ReadFile(c, "/f")
		if !bytes.Equal(got[:64], bytes.Repeat([]byte{'s'}, 64)) {
			t.Fatalf("seed %d: garble reached synced bytes", seed)
		}
		if len(got) > 64 && bytes.ContainsFunc(got[64:], func(r rune) bool { return r != 'u' }) {
			changed = true
		}
	}
	if !changed {
		t.Error("Garble never changed a surviving unsynced write in 100 seeds")
	}
}

func TestCrashCloneDirOpsArePrefix(t *testing.T) {
	// Renames made after a synced create: a cut keeps a prefix of them, so
	// the file ends at one of the names it had, and exists exactly once.
	for seed := range uint64(50) {
		m := NewMem()
		writeFile(t, m, "/n0", []byte("x"), true)
		m.SyncDir("/")
		m.Rename("/n0", "/n1")
		m.Rename("/n1", "/n2")
		c := m.CrashClone(CrashConfig{Rand: rand.New(rand.NewPCG(seed, 3))})
		names, _ := c.List("/")
		if len(names) != 1 {
			t.Fatalf("seed %d: names after cut = %v, want exactly one", seed, names)
		}
	}
	m := NewMem()
	writeFile(t, m, "/n0", []byte("x"), true)
	m.Rename("/n0", "/n1")
	m.SyncDir("/")
	names, _ := m.CrashClone(CrashConfig{}).List("/")
	if diff := cmp.Diff([]string{"n1"}, names); diff != "" {
		t.Errorf("synced rename lost (-want +got):\n%s", diff)
	}
	// A directory that never reached its parent takes its files with it.
	m = NewMem()
	m.MkdirAll("/a/b", 0o755)
	writeFile(t, m, "/a/b/f", []byte("x"), true)
	m.SyncDir("/a/b")
	if names, _ := m.CrashClone(CrashConfig{}).List("/"); len(names) != 0 {
		t.Errorf("unsynced mkdir survived: %v", names)
	}
}

func TestFaultRules(t *testing.T) {
	m := NewMem()
	ff := NewFault(m, Rule{Op: OpWrite, Nth: 2, Short: 3, Err: syscall.ENOSPC})
	f, err := ff.Create("/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("first"), 0); err != nil {
		t.Fatalf("first write: %v", err)
	}
	n, err := f.WriteAt([]byte("second"), 5)
	if n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("second write = %d, %v; want a 3-byte short write and ENOSPC", n, err)
	}
	if _, err := f.WriteAt([]byte("third"), 8); err != nil {
		t.Errorf("third write: %v (rule is not sticky)", err)
	}
	if got, _ := ReadFile(m, "/f"); string(got) != "firstsecthird" {
		t.Errorf("file = %q", got)
	}
	ff.Add(Rule{Op: OpSync, Nth: 1, Sticky: true})
	for i := range 3 {
		if err := f.Sync(); !errors.Is(err, ErrInjected) {
			t.Errorf("sync %d = %v, want ErrInjected", i, err)
		}
	}
	ff.Clear()
	if err := f.Sync(); err != nil {
		t.Errorf("sync after Clear: %v", err)
	}
	ff.Add(Rule{Op: OpRename, Nth: 1, Name: "x"})
	ff.Create("/y")
	if err := ff.Rename("/y", "/y2"); err != nil {
		t.Errorf("rename not matching Name failed: %v", err)
	}
	ff.Create("/q")
	if err := ff.Rename("/q", "/x"); !errors.Is(err, ErrInjected) {
		t.Errorf("rename to /x = %v, want ErrInjected", err)
	}
	if got := ff.Count(OpWrite); got != 3 {
		t.Errorf("Count(OpWrite) = %d, want 3", got)
	}
}

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// Coordination files on a full disk (issue 44, point 3): a coordination
// file that cannot be made or grown for want of room fails the open with
// ENOSPC naming the file, never a *CoordinationError blaming processes
// that have the store open (there are none), and never an open that
// succeeds on a shm it cannot touch. Once there is room the next open
// makes or grows the file (no process has the store open: its locks
// tell) and the store reads as it was.

// wantNoRoom fails unless err is ENOSPC naming path, and no
// *CoordinationError.
func wantNoRoom(t *testing.T, what string, err error, path string) {
	t.Helper()
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) || errors.Is(err, store.ErrCoordinationLost) {
		t.Errorf("%s: %v; want ENOSPC naming %s, no coordination loss", what, err, path)
	}
}

// TestCoordinationFilesOnAFullDisk, on the fault-injecting FS: shm's
// allocation (MapShared with create) or the making of locks fails with
// ENOSPC, shm missing, or there as the last process left it. A read-only
// and a write open, and Check, fail with ENOSPC naming the file; a shm
// the failed open made is left empty, and the next open with room grows
// it and reads every event back.
func TestCoordinationFilesOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, file string
		missing    bool
		op         vfs.Op
	}{
		{"shm missing", coord.ShmFile, true, vfs.OpAllocate},
		{"shm there", coord.ShmFile, false, vfs.OpAllocate},
		{"locks missing", coord.LocksFile, true, vfs.OpLock},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			db, err := openStore(t, "/db", &Options{FS: mem, CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := testgen.Events(0, 10, 100)
			appendFlushed(t, h, want...)
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("/db", c.file)
			if c.missing {
				if err := mem.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			ff := vfs.NewFault(mem, vfs.Rule{Op: c.op, Name: path, Err: syscall.ENOSPC})
			for _, ro := range []bool{true, false} {
				db, err := openStore(t, "/db", &Options{FS: ff, ReadOnly: ro, CompactInterval: -1})
				if err == nil {
					db.Close()
				}
				wantNoRoom(t, map[bool]string{true: "read-only open", false: "write open"}[ro], err, path)
			}
			rep, err := Check("/db", &Options{FS: ff})
			if err == nil {
				t.Errorf("check on a full disk: no error, problems %v", rep.Problems)
			} else {
				wantNoRoom(t, "check", err, path)
			}
			if c.file == coord.ShmFile && c.missing {
				f, err := mem.Open(path)
				if err != nil {
					t.Fatalf("the failed open left no %s: %v", path, err)
				}
				n, _ := f.Size()
				f.Close()
				if n != 0 {
					t.Fatalf("the failed open left %s of %d bytes, want it empty", path, n)
				}
			}

			ff.Clear() // room again
			for _, ro := range []bool{true, false} {
				db, err := openStore(t, "/db", &Options{FS: ff, ReadOnly: ro, CompactInterval: -1})
				if err != nil {
					t.Fatalf("open (read-only %v) once there is room: %v", ro, err)
				}
				sameEvents(t, "s", readAll(t, db, "s"), want)
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if rep, err := Check("/db", &Options{FS: ff}); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("check once there is room: %v %v", err, rep.Problems)
			}
		})
	}
}

// smallTmpfs mounts a tmpfs of size on a directory of the test's and
// returns it, unmounted at the test's end; the test is skipped where it
// cannot mount one.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs at %s: %v", dir, err)
		}
	})
	return dir
}

// TestShmOnAFullTmpfs is the case as found (issue 44, point 3), on a
// real full file system: a store's files with no shm (or with shm a hole
// of 4 KiB, as a truncate leaves it) on a full tmpfs. Before, the open
// succeeded, its first touch of shm faulted, and the process took itself
// for a victim of a cut: a read-only open (seglog ls) failed its List
// with shm "cut short under the processes that have the store open", and
// Check (whose second open joins its first) reported shm "removed or
// replaced while they had it open". Now each open, and Check, fails with
// ENOSPC naming shm; once there is room the store reads back and checks
// clean.
func TestShmOnAFullTmpfs(t *testing.T) {
	ctx := context.Background()
	for _, hole := range []bool{false, true} {
		t.Run(map[bool]string{false: "no shm", true: "shm a hole"}[hole], func(t *testing.T) {
			mnt := smallTmpfs(t, "1m")
			src := t.TempDir()
			db, err := openStore(t, src, &Options{CompactInterval: -1, NoPreallocate: true, SegmentSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := testgen.Events(0, 20, 100)
			appendFlushed(t, h, want...)
			h.Close()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(mnt, "s")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			names, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if _, ok := segment.ParseName(n.Name()); !ok && n.Name() != "index.db" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(src, n.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, n.Name()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			shm := filepath.Join(dir, coord.ShmFile)
			if hole {
				if err := os.WriteFile(shm, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(shm, coord.ShmSize); err != nil {
					t.Fatal(err)
				}
			}
			fill := filepath.Join(mnt, "fill")
			f, err := os.Create(fill)
			if err != nil {
				t.Fatal(err)
			}
			for b := make([]byte, 4096); ; {
				if _, err := f.Write(b); err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Fatal(err)
					}
					break
				}
			}
			f.Close()

			ro, err := openStore(t, dir, &Options{ReadOnly: true})
			if err == nil {
				_, lerr := ro.List(ctx)
				ro.Close()
				t.Errorf("read-only open on a full disk: no error (then List: %v)", lerr)
			} else {
				wantNoRoom(t, "read-only open", err, shm)
			}
			rep, err := Check(dir, nil)
			if err == nil {
				t.Errorf("check on a full disk: no error, problems %v", rep.Problems)
			} else {
				wantNoRoom(t, "check", err, shm)
			}
			w, err := openStore(t, dir, nil)
			if err == nil {
				w.Close()
				t.Errorf("write open on a full disk: no error")
			} else {
				wantNoRoom(t, "write open", err, shm)
			}

			if err := os.Remove(fill); err != nil {
				t.Fatal(err)
			}
			ro, err = openStore(t, dir, &Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("read-only open once there is room: %v", err)
			}
			if snaps, err := ro.List(ctx); err != nil || len(snaps) != 1 {
				t.Errorf("list once there is room: %d sessions, %v", len(snaps), err)
			}
			sameEvents(t, "s", readAll(t, ro, "s"), want)
			ro.Close()
			if rep, err := Check(dir, nil); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("check once there is room: %v %v", err, rep.Problems)
			}
		})
	}
}

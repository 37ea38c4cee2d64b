package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// The coordination files (LOCK, locks, shm) removed, replaced or cut
// while processes have the store open (docs/MULTIPROCESS.md, Many processes,
// "When the coordination files are removed or cut"). Two DBs on one
// directory hold their locks and map shm as two processes do, on the OS
// and on a MemFS (whose locks and mappings are a file's, as the OS's).

// coordFS runs test once on the OS and once on a MemFS, with the file
// system and the store's directory (checked when the test ends).
func coordFS(t *testing.T, test func(t *testing.T, fsys vfs.FS, dir string)) {
	t.Run("os", func(t *testing.T) { test(t, vfs.Default, checkedDir(t)) })
	t.Run("mem", func(t *testing.T) {
		m := vfs.NewMem()
		t.Cleanup(func() {
			rep, err := Check("/s", &Options{FS: m})
			if err != nil {
				t.Errorf("checking the store the test left: %v", err)
				return
			}
			for _, p := range rep.Problems {
				t.Errorf("the store the test left: %v", p)
			}
		})
		test(t, m, "/s")
	})
}

// coordFixture is a store two writing DBs have open, each writing a
// session of its own, with what each session acknowledged (flushed).
type coordFixture struct {
	fsys  vfs.FS
	dir   string
	opts  *Options
	dbs   [2]*DB
	hs    [2]*Handle
	ids   [2]string
	acked [2][]event.Event
	// tried: events whose flush failed (they may or may not be stored)
	tried [2][]event.Event
}

// coordEventSize makes a few flushes roll a 64 KiB segment (seals beside
// another process).
const coordEventSize = 2 << 10

func newCoordFixture(t *testing.T, fsys vfs.FS, dir string, tune ...func(*Options)) *coordFixture {
	t.Helper()
	f := &coordFixture{
		fsys: fsys,
		dir:  dir,
		opts: &Options{FS: fsys, SegmentSize: 1 << 16, IndexInterval: 5 * time.Millisecond},
		ids:  [2]string{"a", "b"},
	}
	for _, tune := range tune {
		tune(f.opts)
	}
	ctx := context.Background()
	for i := range f.dbs {
		db, err := openStore(t, f.dir, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		f.dbs[i] = db
		t.Cleanup(func() { db.Close() })
		if f.hs[i], err = db.Create(ctx, store.Header{ID: f.ids[i], CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for i := range f.dbs {
			if err := f.flush(i, 10); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.readsBoth(t)
	return f
}

// flush appends n events through DB i's handle and flushes them.
func (f *coordFixture) flush(i, n int) error {
	ctx := context.Background()
	next := uint64(len(f.acked[i]) + len(f.tried[i]))
	evs := testgen.Events(next, n, coordEventSize)
	err := f.hs[i].Append(ctx, evs...)
	if err == nil {
		err = f.hs[i].Flush(ctx)
	}
	if err != nil {
		f.tried[i] = append(f.tried[i], evs...)
		return err
	}
	if len(f.tried[i]) > 0 {
		return fmt.Errorf("a flush after a failed one succeeded")
	}
	f.acked[i] = append(f.acked[i], evs...)
	return nil
}

// readsBoth has each DB read both sessions whole.
func (f *coordFixture) readsBoth(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for d, db := range f.dbs {
		for i, id := range f.ids {
			h, err := db.Open(ctx, id, store.Read)
			if err != nil {
				t.Fatalf("db %d opening %s: %v", d, id, err)
			}
			readsAll(t, fmt.Sprintf("db %d reading %s", d, id), h, f.acked[i])
			h.Close()
		}
	}
}

// refused checks that a write open and a read-only open of the store fail
// with ErrCoordinationLost naming the file name, and start nothing.
func (f *coordFixture) refused(t *testing.T, name string) {
	t.Helper()
	for _, opts := range []*Options{f.opts, {FS: f.fsys, ReadOnly: true}} {
		db, err := openStore(t, f.dir, opts)
		if err == nil {
			db.Close()
			t.Fatalf("open (read-only %v) beside the live processes after %s changed: no error, want ErrCoordinationLost", opts.ReadOnly, name)
		}
		var ce *store.CoordinationError
		if !errors.Is(err, store.ErrCoordinationLost) || !errors.As(err, &ce) || ce.Path != filepath.Join(f.dir, name) {
			t.Fatalf("open (read-only %v) after %s changed: %v, want a *CoordinationError on %s (ErrCoordinationLost)", opts.ReadOnly, name, err, name)
		}
	}
}

// remove removes the store's file name.
func (f *coordFixture) remove(t *testing.T, name string) {
	t.Helper()
	if err := f.fsys.Remove(filepath.Join(f.dir, name)); err != nil {
		t.Fatal(err)
	}
}

// goesOn checks that the live DBs go on writing (through rolls) and
// reading each other's sessions.
func (f *coordFixture) goesOn(t *testing.T) {
	t.Helper()
	for range 4 {
		for i := range f.dbs {
			if err := f.flush(i, 10); err != nil {
				t.Fatalf("db %d flushing beside the other: %v", i, err)
			}
		}
	}
	f.readsBoth(t)
}

// reopen closes the live DBs and checks that the store opens again
// (the first opener), holds every acknowledged event, and takes writes.
func (f *coordFixture) reopen(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, db := range f.dbs {
		db.Close() // (a DB that lost shm fails to flush what its handles hold)
	}
	db, err := openStore(t, f.dir, f.opts)
	if err != nil {
		t.Fatalf("open once every process closed: %v", err)
	}
	defer db.Close()
	for i, id := range f.ids {
		got := readAll(t, db, id)
		if len(got) < len(f.acked[i]) || len(got) > len(f.acked[i])+len(f.tried[i]) {
			t.Fatalf("%s after the reopen: %d events, want the %d acknowledged (and at most %d more whose flush failed)", id, len(got), len(f.acked[i]), len(f.tried[i]))
		}
		sameEvents(t, id+" after the reopen", got[:len(f.acked[i])], f.acked[i])
		sameEvents(t, id+" after the reopen, past the acknowledged", got[len(f.acked[i]):], f.tried[i][:len(got)-len(f.acked[i])])
		h, err := db.Open(ctx, id, store.Write)
		if err != nil {
			t.Fatal(err)
		}
		appendFlushed(t, h, testgen.Events(uint64(len(got)), 3, 100)...)
		h.Close()
	}
}

// TestJoinAfterShmRemoved: shm removed while two processes write. A
// process that opens the store then would map a new, empty shm (no
// process set the log up, as it seemed) and run the first writer's
// recovery beside the live ones, each then placing at a tail of its own
// (issue 35: "data after the seal frame" at the next open). It is refused
// with ErrCoordinationLost; the live ones go on, and once they close the
// store opens with every acknowledged event.
func TestJoinAfterShmRemoved(t *testing.T) {
	coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		f := newCoordFixture(t, fsys, dir)
		f.remove(t, coord.ShmFile)
		f.refused(t, coord.ShmFile)
		if _, err := fsys.Open(filepath.Join(dir, coord.ShmFile)); err == nil {
			t.Fatal("a refused open made shm")
		}
		f.goesOn(t)
		f.refused(t, coord.ShmFile)
		f.reopen(t)
	})
}

// TestJoinAfterLocksRemoved: locks removed while two processes write. A
// process that opens the store then takes its byte locks (init, append,
// the leases) on a new file, apart from the live ones' (issue 35: a
// session read wrong). It is refused; the live ones go on.
func TestJoinAfterLocksRemoved(t *testing.T) {
	coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		f := newCoordFixture(t, fsys, dir)
		f.remove(t, coord.LocksFile)
		f.refused(t, coord.LocksFile)
		f.goesOn(t)
		f.reopen(t)
	})
}

// TestJoinAfterLOCKRemoved: LOCK removed while two processes write. A
// process that opens the store then gets a new LOCK exclusive and took
// itself for the first opener: it cleared shm and ran the recovery beside
// the live writers (issue 35: "file already exists"). It is refused; the
// live ones go on.
func TestJoinAfterLOCKRemoved(t *testing.T) {
	coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		f := newCoordFixture(t, fsys, dir)
		f.remove(t, coord.LockFile)
		f.refused(t, coord.LockFile)
		f.goesOn(t)
		f.reopen(t)
	})
}

// TestJoinAfterAllCoordinationFilesRemoved: a cleanup that removes LOCK,
// locks and shm at once leaves a newcomer no file to learn of the live
// processes from: the lock on the directory itself tells it.
func TestJoinAfterAllCoordinationFilesRemoved(t *testing.T) {
	coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		f := newCoordFixture(t, fsys, dir)
		for _, name := range []string{coord.LockFile, coord.LocksFile, coord.ShmFile} {
			f.remove(t, name)
		}
		db, err := openStore(t, f.dir, f.opts)
		if err == nil {
			db.Close()
			t.Fatal("open beside the live processes after LOCK, locks and shm were removed: no error")
		}
		if !errors.Is(err, store.ErrCoordinationLost) {
			t.Fatalf("open after LOCK, locks and shm were removed: %v, want ErrCoordinationLost", err)
		}
		f.goesOn(t)
		f.reopen(t)
	})
}

// TestJoinAfterShmReplacedByACopy: shm replaced by a copy of itself (a
// restore, cp then mv) holds the live state, but the live processes do
// not see the copy: a newcomer is refused.
func TestJoinAfterShmReplacedByACopy(t *testing.T) {
	coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		f := newCoordFixture(t, fsys, dir)
		path := filepath.Join(f.dir, coord.ShmFile)
		var b []byte
		if fsys == vfs.Default {
			var err error
			if b, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		} else {
			// (A MemFS mapping is not the file's contents: the copy is
			// of the live state as a real one would be.)
			b = make([]byte, coord.ShmSize)
			for off := 0; off < coord.ShmSize; off += 8 {
				binary.LittleEndian.PutUint64(b[off:], f.dbs[0].shared.Word(coord.Word(off)).Load())
			}
		}
		c, err := fsys.Create(path + ".copy")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if err := fsys.Rename(path+".copy", path); err != nil {
			t.Fatal(err)
		}
		f.refused(t, coord.ShmFile)
		f.goesOn(t)
		f.reopen(t)
	})
}

// cutShm truncates the store's shm to size, as a user's truncate(1) or
// shell redirection does.
func (f *coordFixture) cutShm(t *testing.T, size int64) {
	t.Helper()
	shm, err := f.fsys.OpenReadWrite(filepath.Join(f.dir, coord.ShmFile))
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	if err := shm.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// shmSize returns the size of the store's shm file.
func (f *coordFixture) shmSize(t *testing.T) int64 {
	t.Helper()
	shm, err := f.fsys.Open(filepath.Join(f.dir, coord.ShmFile))
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	n, err := shm.Size()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestShmCutUnderLiveProcesses: shm truncated while two processes write
// and one waits for the other's session. Cut to nothing, every touch of
// the mapping used to end the process (SIGBUS, issue 35); cut to a byte,
// its fields read as zeros (on the OS; a MemFS mapping is lost at any
// cut). Each DB's next write, read and wait fails with
// ErrCoordinationLost, newcomers are refused, and once the DBs close the
// store opens with every acknowledged event. In the "newcomer" runs a
// newcomer tries to open right after the cut, before the live processes
// touch shm (no checkpoint tick): it must not grow the file back. In the
// "regrown" run the file is grown back to its size at once (truncate -s0
// then -s4k, or a newcomer of an older build): no fault, no short size,
// only zeros, which the live processes must not take for their state.
func TestShmCutUnderLiveProcesses(t *testing.T) {
	for _, c := range []struct {
		size              int64
		newcomer, regrown bool
	}{{0, false, false}, {1, false, false}, {0, true, false}, {1, true, false}, {0, false, true}} {
		name := fmt.Sprint(c.size)
		if c.newcomer {
			name += "-newcomer"
		}
		if c.regrown {
			name += "-regrown"
		}
		t.Run(name, func(t *testing.T) {
			coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				testShmCut(t, fsys, dir, c.size, c.newcomer, c.regrown)
			})
		})
	}
}

func testShmCut(t *testing.T, fsys vfs.FS, dir string, size int64, newcomer, regrown bool) {
	ctx := context.Background()
	f := newCoordFixture(t, fsys, dir, func(o *Options) {
		if newcomer || regrown {
			o.IndexInterval = time.Hour
		}
	})
	r, err := f.dbs[1].Open(ctx, f.ids[0], store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waited := make(chan error, 1)
	if !newcomer {
		go func() {
			_, err := r.Wait(ctx, uint64(len(f.acked[0])+1000))
			waited <- err
		}()
	}
	f.cutShm(t, size)
	if regrown {
		f.cutShm(t, coord.ShmSize)
	}
	if newcomer {
		f.refused(t, coord.ShmFile)
		if n := f.shmSize(t); n != size {
			t.Fatalf("a refused open left shm %d bytes long, not the %d it was cut to", n, size)
		}
	} else {
		time.Sleep(20 * time.Millisecond) // (checkpoint ticks touch shm meanwhile)
	}
	for i := range f.dbs {
		if err := f.flush(i, 10); !errors.Is(err, store.ErrCoordinationLost) {
			t.Fatalf("db %d flushing after shm was cut to %d bytes: %v, want ErrCoordinationLost", i, size, err)
		}
		if _, err := f.dbs[i].Stat(ctx, f.ids[1-i]); !errors.Is(err, store.ErrCoordinationLost) {
			t.Fatalf("db %d reading after shm was cut to %d bytes: %v, want ErrCoordinationLost", i, size, err)
		}
		// Nor does it take more events, which no window could make
		// durable: a host that never flushes learns of it at its next
		// Append or Enqueue (it took them, silently, and lost them).
		next := f.hs[i].Len()
		if err := f.hs[i].Append(ctx, testgen.Events(next, 1, 100)...); !errors.Is(err, store.ErrCoordinationLost) {
			t.Fatalf("db %d: an Append after shm was cut to %d bytes: %v, want ErrCoordinationLost", i, size, err)
		}
		if err := f.hs[i].Enqueue(testgen.Events(next, 1, 100)...); !errors.Is(err, store.ErrCoordinationLost) {
			t.Fatalf("db %d: an Enqueue after shm was cut to %d bytes: %v, want ErrCoordinationLost", i, size, err)
		}
		if m := f.dbs[i].Metrics(); !m.Poisoned || m.PoisonError == "" {
			t.Fatalf("db %d after shm was cut: Metrics Poisoned %v %q, want the poison shown", i, m.Poisoned, m.PoisonError)
		}
	}
	if !newcomer {
		select {
		case err := <-waited:
			if !errors.Is(err, store.ErrCoordinationLost) {
				t.Fatalf("a Wait when shm was cut: %v, want ErrCoordinationLost", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Wait still waits 10 s after shm was cut")
		}
	}
	f.refused(t, coord.ShmFile)
	f.reopen(t)
}

// TestShmCutBetweenPlacementAndSync: shm cut after a flush placed its
// frames and before it synced them. The sync reads the tail and durable
// as zeros, which pass for everything synced: it must fail with
// ErrCoordinationLost, neither acknowledge the flush nor spin.
func TestShmCutBetweenPlacementAndSync(t *testing.T) {
	for _, c := range []struct {
		size    int64
		regrown bool
	}{{0, false}, {1, false}, {0, true}} {
		name := fmt.Sprint(c.size)
		if c.regrown {
			name += "-regrown" // (no fault, no short size: only zeros)
		}
		t.Run(name, func(t *testing.T) {
			coordFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				// (FlushOnly: no window's flush syncs behind the test's
				// back, reading TestHookSync as the test sets it.)
				f := newCoordFixture(t, fsys, dir, func(o *Options) { o.IndexInterval, o.FlushOnly = time.Hour, true })
				var once sync.Once
				f.dbs[0].log.TestHookSync = func() {
					once.Do(func() {
						f.cutShm(t, c.size)
						if c.regrown {
							f.cutShm(t, coord.ShmSize)
						}
					})
				}
				flushed := make(chan error, 1)
				go func() { flushed <- f.flush(0, 10) }()
				select {
				case err := <-flushed:
					if !errors.Is(err, store.ErrCoordinationLost) {
						t.Fatalf("a flush whose shm was cut before its sync: %v, want ErrCoordinationLost", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a flush whose shm was cut before its sync still runs after 10 s")
				}
				f.reopen(t) // (the hook stays: once.Do has run)
			})
		})
	}
}

// TestJoinBesideAnOlderBuild: processes of an older build of the shared
// log hold LOCK but not the directory, and stamp nothing. A process of
// this build that finds only them there joins as before, and stamps shm
// with the files it holds, so that the next process of this build, which
// finds it by the directory's lock, can prove it holds the same ones.
func TestJoinBesideAnOlderBuild(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	a := liveOpen(t, dir, nil)
	h, err := a.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantA := testgen.Events(0, 5, 100)
	appendFlushed(t, h, wantA...)
	h.Close()
	// The older build: LOCK shared, and shm set up without a stamp (as
	// a's, once a is gone).
	old, err := vfs.Default.LockShared(filepath.Join(dir, coord.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	shm, err := vfs.Default.MapShared(filepath.Join(dir, coord.ShmFile), coord.ShmSize, false)
	if err != nil {
		t.Fatal(err)
	}
	shm.Uint64(int(coord.Stamp)).Store(0)
	shm.Close()

	b := liveOpen(t, dir, nil)
	if b.shared.First() || !b.joined {
		t.Fatalf("beside an older build's process: first %v, joined %v; want a joining writer", b.shared.First(), b.joined)
	}
	hb, err := b.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantB := testgen.Events(0, 5, 100)
	appendFlushed(t, hb, wantB...)
	hb.Close()
	c, err := openStore(t, dir, nil)
	if err != nil {
		t.Fatalf("open beside a process of this build that joined an older build's: %v", err)
	}
	defer c.Close()
	sameEvents(t, "a read by the third", readAll(t, c, "a"), wantA)
	sameEvents(t, "b read by the third", readAll(t, c, "b"), wantB)
}

// noDirLocks is a file system that cannot lock a directory (flock on a
// directory fails as it does on NFS).
type noDirLocks struct{ vfs.FS }

func (noDirLocks) LockDir(dir string, _ bool) (vfs.FileLock, error) {
	return nil, &os.PathError{Op: "flock", Path: dir, Err: syscall.EBADF}
}

// TestJoinWithoutADirectoryLock: where the directory cannot be locked,
// processes share the store as before (LOCK alone tells who is first),
// and the stamp still refuses a newcomer beside a removed shm or locks.
func TestJoinWithoutADirectoryLock(t *testing.T) {
	fsys := noDirLocks{vfs.NewMem()}
	f := newCoordFixture(t, fsys, "/s")
	f.remove(t, coord.LocksFile)
	f.refused(t, coord.LocksFile)
	f.goesOn(t)
	f.remove(t, coord.ShmFile)
	f.refused(t, coord.ShmFile)
	f.goesOn(t)
	f.reopen(t)
}

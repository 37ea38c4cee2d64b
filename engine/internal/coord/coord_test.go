package coord

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/vfs"
)

// Two Joins of one directory stand for two processes: each opens LOCK,
// locks and shm on its own, so its flock and byte locks are a holder of
// their own (open-file-description locks on the OS, a file's on a MemFS)
// and its mapping of shm is one of two, as two processes' are.

// eachFS runs test on the OS and on a MemFS, with a store directory.
func eachFS(t *testing.T, test func(t *testing.T, fsys vfs.FS, dir string)) {
	t.Run("os", func(t *testing.T) { test(t, vfs.Default, t.TempDir()) })
	t.Run("mem", func(t *testing.T) {
		m := vfs.NewMem()
		if err := m.MkdirAll("/s", 0o755); err != nil {
			t.Fatal(err)
		}
		test(t, m, "/s")
	})
}

// join joins the store in dir as a writing process that follows
// compactions, and ends its open.
func join(t *testing.T, fsys vfs.FS, dir string) *Shared {
	t.Helper()
	sh, err := Join(fsys, dir, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Opened(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	return sh
}

// two joins two processes, the first setting the log up as its recovery
// would.
func two(t *testing.T, fsys vfs.FS, dir string) (a, b *Shared) {
	t.Helper()
	a = join(t, fsys, dir)
	a.SetUp(1, 100, 3)
	b = join(t, fsys, dir)
	if !a.First() || b.First() {
		t.Fatalf("first: a %v, b %v; want a alone", a.First(), b.First())
	}
	return a, b
}

// TestLeaseHandedOver: a session's lease byte is one process's at a time;
// released, or its holder gone, the other takes it.
func TestLeaseHandedOver(t *testing.T) {
	eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		a, b := two(t, fsys, dir)
		take := func(sh *Shared, name, id string, want bool) {
			t.Helper()
			ok, err := sh.LockLease(id)
			if err != nil || ok != want {
				t.Fatalf("%s takes %s's lease: %v, %v; want %v", name, id, ok, err, want)
			}
		}
		take(a, "a", "s1", true)
		take(b, "b", "s1", false)
		take(b, "b", "s2", true) // another session's byte
		take(a, "a", "s2", false)
		a.UnlockLease("s1")
		take(b, "b", "s1", true)
		take(a, "a", "s1", false)
		if err := b.Close(); err != nil { // (as its process's death)
			t.Fatal(err)
		}
		take(a, "a", "s1", true)
		take(a, "a", "s2", true)
		take(b, "b, closed,", "s3", false)
	})
}

// TestByteLocksExclusive: an exclusive byte lock of one process keeps the
// other out until it is released; shared ones share.
func TestByteLocksExclusive(t *testing.T) {
	eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		a, b := two(t, fsys, dir)
		for _, l := range []Lock{LockAppend, LockPrepare, LockSync, LockTypes, LockDict, LockWant} {
			if ok, err := a.TryLock(l, true); err != nil || !ok {
				t.Fatalf("a takes byte %d: %v, %v", l, ok, err)
			}
			if ok, err := b.TryLock(l, true); err != nil || ok {
				t.Fatalf("b takes byte %d a holds: %v, %v; want refused", l, ok, err)
			}
			if err := a.Unlock(l); err != nil {
				t.Fatal(err)
			}
			if ok, err := b.TryLock(l, true); err != nil || !ok {
				t.Fatalf("b takes byte %d a released: %v, %v", l, ok, err)
			}
			b.Unlock(l)
		}
		// The compaction and the index: one process at a time.
		if !a.TryCompact() || b.TryCompact() {
			t.Fatal("both processes compact at once")
		}
		a.EndCompact()
		if !b.TryCompact() {
			t.Fatal("b cannot compact once a is done")
		}
		b.EndCompact()
		if !a.HoldsIndex() || b.HoldsIndex() {
			t.Fatalf("index: a %v, b %v; want the first opener's", a.HoldsIndex(), b.HoldsIndex())
		}
		if ok, err := b.TakeIndex(); err != nil || ok || b.HoldsIndex() {
			t.Fatalf("b takes the index a holds: %v, %v", ok, err)
		}
		if err := a.ReleaseIndex(); err != nil || a.HoldsIndex() {
			t.Fatal(err)
		}
		if ok, err := b.TakeIndex(); err != nil || !ok || !b.HoldsIndex() {
			t.Fatalf("b takes the index a released: %v, %v", ok, err)
		}
		// Both write: neither is alone, and each holds a slot of its own.
		if a.Alone() || b.Alone() {
			t.Fatal("a writer beside another is alone")
		}
		if a.Slot() < 0 || b.Slot() < 0 || a.Slot() == b.Slot() {
			t.Fatalf("slots %d and %d: want two", a.Slot(), b.Slot())
		}
		b.Close()
		if !a.Alone() {
			t.Fatal("the last writer is not alone")
		}
	})
}

// TestWatchWakesTheOtherMapping: a publish in one process wakes the
// other's watcher, which sleeps on the word with no poll (only a wake-up
// ends its sleep), and the other reads what was published.
func TestWatchWakesTheOtherMapping(t *testing.T) {
	eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		a, b := two(t, fsys, dir)
		b.Knobs.WatchPoll = time.Hour
		ch := b.Changed()
		if ch == nil {
			t.Fatal("no watch")
		}
		for b.Waiters() == 0 { // (the watcher sleeps)
			time.Sleep(time.Millisecond)
		}
		p := Position(1, 500)
		a.Publish(p)
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("b's watcher still sleeps 10 s after a published")
		}
		if d, ok := b.Durable(); !ok || d != p {
			t.Fatalf("b reads durable %x, %v; want %x", d, ok, p)
		}
		if err := b.Followable(b.Durable()); err != nil {
			t.Fatal(err)
		}
		if b.Changed() == nil {
			t.Fatal("no watch after the first")
		}
		if err := b.Close(); err != nil { // stops its watcher
			t.Fatal(err)
		}
		if b.Changed() != nil {
			t.Fatal("a closed process watches")
		}
	})
}

// TestLayoutEncodes: positions round-trip, the words of shm are where
// the layout says (little-endian, in the file every process maps), and
// one process reads what the other set up.
func TestLayoutEncodes(t *testing.T) {
	for _, c := range []struct {
		seg uint64
		off int64
	}{{0, 0}, {1, 32}, {7, 1<<40 - 1}, {1<<24 - 1, 12345}} {
		p := Position(c.seg, c.off)
		if seg, off := SplitPosition(p); seg != c.seg || off != c.off {
			t.Fatalf("Position(%d, %d) splits to (%d, %d)", c.seg, c.off, seg, off)
		}
	}
	if Position(1, 1<<40-1) >= Position(2, 0) {
		t.Fatal("positions are not in log order")
	}
	words := []Word{Magic, Version, Tail, Durable, Indexed, Layout, PID, Frames, Placing, IndexWant, syncSeq, Stamp, stampFiles, SlotWord(0), SlotWord(Slots - 1)}
	for i := 1; i < len(words); i++ {
		if words[i] < words[i-1]+8 || words[i]%8 != 0 {
			t.Fatalf("word %d at %d overlaps the one before (%d)", i, words[i], words[i-1])
		}
	}
	if int(stampFiles)+48 > int(SlotWord(0)) || int(SlotWord(Slots-1))+8 > ShmSize {
		t.Fatal("the stamp or the slots past their room")
	}
	dir := t.TempDir()
	a, b := two(t, vfs.Default, dir)
	a.Word(Indexed).Store(Position(1, 64))
	a.PublishFollow(Position(1, 80))
	raw, err := os.ReadFile(filepath.Join(dir, ShmFile))
	if err != nil {
		t.Fatal(err)
	}
	at := func(w Word) uint64 { return binary.LittleEndian.Uint64(raw[w:]) }
	for _, c := range []struct {
		name string
		w    Word
		want uint64
	}{
		{"magic", Magic, binary.LittleEndian.Uint64([]byte("seglogsh"))},
		{"version", Version, VersionValue},
		{"tail", Tail, 1<<40 | 100},
		{"placing", Placing, 1<<40 | 100},
		{"durable", Durable, 1<<40 | 100},
		{"frames", Frames, 3},
		{"pid", PID, uint64(os.Getpid())},
		{"indexed", Indexed, 1<<40 | 64},
		{"stamp", Stamp, binary.LittleEndian.Uint64([]byte("seglogid"))},
		{"a's slot", SlotWord(a.Slot()), 1<<40 | 80},
	} {
		if got := at(c.w); got != c.want {
			t.Errorf("%s at %d: %x, want %x", c.name, c.w, got, c.want)
		}
	}
	if !b.Live() {
		t.Fatal("b does not see the log a set up")
	}
	if d, ok := b.Durable(); !ok || d != Position(1, 100) {
		t.Fatalf("b reads durable %x, %v", d, ok)
	}
	if h := b.Horizon(Position(9, 0)); h != Position(1, 80) {
		t.Fatalf("b's horizon %x, want a's follow position %x", h, Position(1, 80))
	}
	// The layout counter: a change of one process is the other's news,
	// not its own.
	var aSeen, bSeen atomic.Uint64
	a.SetSeen(&aSeen)
	b.SetSeen(&bSeen)
	a.LayoutBegin()
	if l := b.Layout(); l%2 != 1 {
		t.Fatalf("layout %d during a change, want odd", l)
	}
	a.LayoutEnd()
	if l := b.StableLayout(); l != 2 {
		t.Fatalf("layout %d after a change, want 2", l)
	}
	if a.LayoutMoved(&aSeen) || !b.LayoutMoved(&bSeen) {
		t.Fatalf("moved: for a %v, for b %v; want b's only", a.LayoutMoved(&aSeen), b.LayoutMoved(&bSeen))
	}
}

// lost checks that err is a *CoordinationError on dir's file name.
func lost(t *testing.T, what string, err error, dir, name string) {
	t.Helper()
	var ce *base.CoordinationError
	if !errors.Is(err, base.ErrCoordinationLost) || !errors.As(err, &ce) || ce.Path != filepath.Join(dir, name) {
		t.Fatalf("%s: %v; want a *CoordinationError on %s", what, err, name)
	}
}

// truncate cuts the file at path to size.
func truncate(t *testing.T, fsys vfs.FS, path string, size int64) {
	t.Helper()
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// TestShmCutDetected: shm cut under two processes (to nothing, to a
// byte, or cut and grown back: zeros that fault nothing) is found lost
// by both, and a newcomer is refused; a healthy shm is not.
func TestShmCutDetected(t *testing.T) {
	for _, c := range []struct {
		name    string
		size    int64
		regrown bool
	}{{"0", 0, false}, {"1", 1, false}, {"0-regrown", 0, true}} {
		t.Run(c.name, func(t *testing.T) {
			eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				a, b := two(t, fsys, dir)
				for _, sh := range []*Shared{a, b} {
					if err := sh.Verify(true); err != nil {
						t.Fatalf("verify before the cut: %v", err)
					}
					if err := sh.Followable(sh.Durable()); err != nil {
						t.Fatalf("followable before the cut: %v", err)
					}
				}
				path := filepath.Join(dir, ShmFile)
				truncate(t, fsys, path, c.size)
				if c.regrown {
					truncate(t, fsys, path, ShmSize)
				}
				for name, sh := range map[string]*Shared{"a": a, "b": b} {
					err := sh.Verify(true)
					if c.regrown && err == nil {
						// (No fault, no short size: the zeros tell.)
						err = sh.Followable(sh.Durable())
					}
					lost(t, name+" after the cut", err, dir, ShmFile)
					lost(t, name+", looking again", sh.Lost(), dir, ShmFile)
				}
				// (A regrown shm carries no stamp.)
				_, err := Join(fsys, dir, true, true)
				lost(t, "a newcomer", err, dir, ShmFile)
			})
		})
	}
}

// TestReplacedFilesDetected: LOCK, locks or shm removed (or shm replaced
// by a copy of itself) while a process has the store open: a newcomer is
// refused with the file named, and takes nothing.
func TestReplacedFilesDetected(t *testing.T) {
	for _, name := range []string{LockFile, LocksFile, ShmFile, ShmFile + " copy"} {
		t.Run(name, func(t *testing.T) {
			eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
				a := join(t, fsys, dir)
				a.SetUp(1, 100, 0)
				file := filepath.Join(dir, name)
				if name == ShmFile+" copy" {
					file = filepath.Join(dir, ShmFile)
					b := make([]byte, ShmSize)
					for off := 0; off < ShmSize; off += 8 {
						binary.LittleEndian.PutUint64(b[off:], a.Word(Word(off)).Load())
					}
					c, err := fsys.Create(file + ".copy")
					if err != nil {
						t.Fatal(err)
					}
					if _, err := c.WriteAt(b, 0); err != nil {
						t.Fatal(err)
					}
					c.Close()
					if err := fsys.Rename(file+".copy", file); err != nil {
						t.Fatal(err)
					}
				} else if err := fsys.Remove(file); err != nil {
					t.Fatal(err)
				}
				for _, write := range []bool{true, false} {
					sh, err := Join(fsys, dir, write, true)
					if err == nil {
						sh.Close()
					}
					lost(t, "a newcomer", err, dir, filepath.Base(file))
				}
				// a goes on: its lease bytes are its own.
				if ok, err := a.LockLease("s"); err != nil || !ok {
					t.Fatalf("a's lease after %s changed: %v, %v", name, ok, err)
				}
				if err := a.Verify(true); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestRaiseGivesUpOnALostWord: Raise on a word of a shm cut under the
// mapping (whose swaps never succeed) returns instead of spinning: the
// caller's next look at shm finds it lost.
func TestRaiseGivesUpOnALostWord(t *testing.T) {
	m := vfs.NewMem()
	shm, err := m.MapShared("/shm", ShmSize, true)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	f, err := m.OpenReadWrite("/shm")
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(0)
	f.Close()
	done := make(chan struct{})
	go func() {
		Raise(shm.Uint64(int(Durable)), 5)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Raise on a lost word still runs after 10 s")
	}
	if !shm.Lost() {
		t.Fatal("the word is not lost")
	}
}

// TestRaiseNeverLowers: Raise moves a word up, never down.
func TestRaiseNeverLowers(t *testing.T) {
	m := vfs.NewMem()
	shm, err := m.MapShared("/shm", ShmSize, true)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	w := shm.Uint64(int(Durable))
	Raise(w, 10)
	Raise(w, 5)
	if got := w.Load(); got != 10 {
		t.Fatalf("raised to 10 then 5: %d", got)
	}
}

// unbackedFS is an FS whose MapShared maps a file the file system then
// takes the page of (cut to nothing right after the mapping), as a hole
// on a full disk that cannot be filled: the first touch faults.
type unbackedFS struct{ vfs.FS }

func (u unbackedFS) MapShared(name string, size int, create bool) (*vfs.Shared, error) {
	s, err := u.FS.MapShared(name, size, create)
	if err != nil {
		return nil, err
	}
	f, err := u.FS.OpenReadWrite(name)
	if err != nil {
		s.Close()
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// TestJoinShmUnbacked: a first opener (alone) whose setup of shm faults
// fails its open with ErrShmUnbacked naming shm, not a coordination loss
// blamed on other processes, and holds nothing: the next opener, with a
// file system that backs the page, is the first opener and sets it up.
// (Before, the open went on with a shm it could not touch; the
// process's next look at it found it "cut short under the processes that
// have the store open".)
func TestJoinShmUnbacked(t *testing.T) {
	eachFS(t, func(t *testing.T, fsys vfs.FS, dir string) {
		for _, write := range []bool{true, false} {
			sh, err := Join(unbackedFS{fsys}, dir, write, true)
			if err == nil {
				sh.Close()
			}
			path := filepath.Join(dir, ShmFile)
			var pe *os.PathError
			if !errors.Is(err, ErrShmUnbacked) || !errors.As(err, &pe) || pe.Path != path || errors.Is(err, base.ErrCoordinationLost) {
				t.Fatalf("Join (write %v) whose shm faults at its setup: %v; want ErrShmUnbacked naming %s", write, err, path)
			}
		}
		sh := join(t, fsys, dir)
		if !sh.First() || sh.Lost() != nil || sh.Word(Stamp).Load() != stampValue {
			t.Fatalf("the next Join: first %v, lost %v, stamp %x", sh.First(), sh.Lost(), sh.Word(Stamp).Load())
		}
	})
}

package vfs

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// lockFS returns each FS with a directory to use in it.
func lockFS(t *testing.T) map[string]struct {
	fs  FS
	dir string
} {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		fs  FS
		dir string
	}{"os": {Default, t.TempDir()}, "mem": {m, "/d"}}
}

func TestByteLocks(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "locks")
			a, err := tc.fs.OpenLocks(path)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.OpenLocks(path)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			try := func(l Locks, off int64, excl, want bool) {
				t.Helper()
				got, err := l.TryLock(off, excl)
				if err != nil || got != want {
					t.Fatalf("TryLock(%d, exclusive=%v) = %v, %v; want %v", off, excl, got, err, want)
				}
			}
			try(a, 1, true, true)
			try(b, 1, true, false)  // exclusive against exclusive
			try(b, 1, false, false) // shared against exclusive
			try(b, 2, true, true)   // another byte
			try(a, 1<<40, false, true)
			try(b, 1<<40, false, true) // shared with shared
			try(a, 1<<40, true, false) // a cannot make it exclusive while b shares it
			if err := a.Unlock(1); err != nil {
				t.Fatal(err)
			}
			try(b, 1, true, true)
			try(a, 1, false, false)

			// Lock waits for the holder.
			got := make(chan error, 1)
			go func() { got <- a.Lock(1, true) }()
			select {
			case err := <-got:
				t.Fatalf("Lock returned (%v) while another holder had the byte", err)
			case <-time.After(50 * time.Millisecond):
			}
			if err := b.Close(); err != nil { // Close releases every lock of b
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Lock still waiting after the holder closed")
			}
			c, err := tc.fs.OpenLocks(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			try(c, 2, true, true) // b's byte 2 went with its Close
			try(c, 1, true, false)
		})
	}
}

func TestFileLockShared(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "LOCK")
			ex, err := tc.fs.Lock(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tc.fs.LockShared(path); !errors.Is(err, ErrLocked) {
				t.Fatalf("LockShared under an exclusive holder: %v, want ErrLocked", err)
			}
			if err := ex.Share(); err != nil {
				t.Fatal(err)
			}
			sh, err := tc.fs.LockShared(path)
			if err != nil {
				t.Fatalf("LockShared beside a shared holder: %v", err)
			}
			if _, err := tc.fs.Lock(path); !errors.Is(err, ErrLocked) {
				t.Fatalf("Lock under shared holders: %v, want ErrLocked", err)
			}
			ex.Close()
			if _, err := tc.fs.Lock(path); !errors.Is(err, ErrLocked) {
				t.Fatalf("Lock under one shared holder: %v, want ErrLocked", err)
			}
			sh.Close()
			l, err := tc.fs.Lock(path)
			if err != nil {
				t.Fatalf("Lock with no holder left: %v", err)
			}
			l.Close()
		})
	}
}

func TestMapShared(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "shm")
			a, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a.Uint64(24).Store(7)
			if !b.Uint64(24).CompareAndSwap(7, 9) || a.Uint64(24).Load() != 9 {
				t.Fatalf("the two mappings do not share the field: %d", a.Uint64(24).Load())
			}
			a.Clear()
			if v := b.Uint64(24).Load(); v != 0 {
				t.Fatalf("Clear through one mapping: the other reads %d", v)
			}
			if a.ID() != b.ID() {
				t.Fatalf("two mappings of one file: IDs %v and %v", a.ID(), b.ID())
			}
		})
	}
}

// cut truncates the file at path to size, as a user's truncate(1) or
// shell redirection does.
func cut(t *testing.T, fsys FS, path string, size int64) {
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

// TestSharedSurvivesACut: a file cut to nothing under a mapping (on the OS
// a touch of the mapping would SIGBUS the process) makes every operation
// a no-op and Lost true, in every mapping of it; Size tells the cut. A
// cut that keeps part of the first page faults nothing on the OS (the
// rest of the page reads as zeros): Size alone tells it.
func TestSharedSurvivesACut(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "shm")
			a, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a.Uint64(24).Store(7)
			a.Uint32(88).Store(3)
			cut(t, tc.fs, path, 0)
			if n, err := a.Size(); n != 0 || err != nil {
				t.Fatalf("Size after the cut: %d, %v", n, err)
			}
			if v := a.Uint64(24).Load(); v != 0 || !a.Lost() {
				t.Fatalf("Load after the cut: %d, lost %v; want 0, lost", v, a.Lost())
			}
			b.Uint64(24).Store(5)
			if b.Uint64(24).CompareAndSwap(0, 1) || b.Uint64(24).Add(1) != 0 || b.Uint32(88).Add(1) != 0 || b.Uint32(88).Load() != 0 {
				t.Fatal("operations on a lost mapping did something")
			}
			b.Wait(88, 0, time.Hour) // returns at once
			b.Wake(88)
			b.Clear()
			if !b.Lost() {
				t.Fatal("the other mapping is not lost")
			}
		})
	}
	// Cut and grown again before any access: no fault, and what was past
	// the cut reads as zeros (the OS zeroed or dropped the page), on the
	// MemFS as on the OS.
	for name, tc := range lockFS(t) {
		for _, size := range []int64{0, 1} {
			t.Run(fmt.Sprintf("%s-regrown-%d", name, size), func(t *testing.T) {
				path := filepath.Join(tc.dir, fmt.Sprint("shm", size))
				a, err := tc.fs.MapShared(path, 4096, true)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				a.Uint64(24).Store(7)
				a.Uint64(0).Store(0x0807060504030201)
				cut(t, tc.fs, path, size)
				cut(t, tc.fs, path, 4096)
				want := uint64(0)
				if size == 1 {
					want = 0x01 // the byte before the cut
				}
				if v, w := a.Uint64(24).Load(), a.Uint64(0).Load(); v != 0 || w != want || a.Lost() {
					t.Fatalf("a mapping of a file cut to %d and grown again: fields %#x and %d, lost %v; want %#x, 0, not lost", size, w, v, a.Lost(), want)
				}
			})
		}
	}
	t.Run("os-partial", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shm")
		a, err := Default.MapShared(path, 4096, true)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		a.Uint64(24).Store(7)
		cut(t, Default, path, 1)
		if v := a.Uint64(24).Load(); v != 0 || a.Lost() {
			t.Fatalf("a cut within the page: Load %d, lost %v; want 0 and no fault", v, a.Lost())
		}
		if n, err := a.Size(); n != 1 || err != nil {
			t.Fatalf("Size after the cut: %d, %v", n, err)
		}
	})
}

// TestMapSharedWithoutCreate: without create MapShared neither creates
// the file nor grows it, and fails on a missing or short one.
func TestMapSharedWithoutCreate(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "shm")
			if _, err := tc.fs.MapShared(path, 4096, false); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("MapShared of a missing file without create: %v, want ErrNotExist", err)
			}
			if names, _ := tc.fs.List(tc.dir); len(names) != 0 {
				t.Fatalf("MapShared without create made %v", names)
			}
			f, err := tc.fs.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("x"), 0)
			f.Close()
			if _, err := tc.fs.MapShared(path, 4096, false); !errors.Is(err, ErrShortFile) {
				t.Fatalf("MapShared of a 1-byte file without create: %v, want ErrShortFile", err)
			}
			if f, _ := tc.fs.Open(path); f != nil {
				if n, _ := f.Size(); n != 1 {
					t.Fatalf("the file is %d bytes now", n)
				}
				f.Close()
			}
			s, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = tc.fs.MapShared(path, 4096, false)
			if err != nil {
				t.Fatalf("MapShared of a whole file without create: %v", err)
			}
			s.Close()
		})
	}
}

// TestLockDir: a directory's lock is exclusive or shared like a file's,
// and removing a file in it changes nothing about it.
func TestLockDir(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			ex, err := tc.fs.LockDir(tc.dir, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tc.fs.LockDir(tc.dir, false); !errors.Is(err, ErrLocked) {
				t.Fatalf("shared under an exclusive holder: %v, want ErrLocked", err)
			}
			if err := ex.Share(); err != nil {
				t.Fatal(err)
			}
			sh, err := tc.fs.LockDir(tc.dir, false)
			if err != nil {
				t.Fatalf("shared beside a shared holder: %v", err)
			}
			defer sh.Close()
			ex.Close()
			if _, err := tc.fs.LockDir(tc.dir, true); !errors.Is(err, ErrLocked) {
				t.Fatalf("exclusive under a shared holder: %v, want ErrLocked", err)
			}
			if f, err := tc.fs.Create(filepath.Join(tc.dir, "LOCK")); err == nil {
				f.Close()
			}
			if err := tc.fs.Remove(filepath.Join(tc.dir, "LOCK")); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.fs.LockDir(tc.dir, true); !errors.Is(err, ErrLocked) {
				t.Fatalf("exclusive under a shared holder, after a removal in the directory: %v, want ErrLocked", err)
			}
		})
	}
}

// TestLocksOfAFileInPlaceOfAnother: the locks and the shared mapping of a
// file are the file's: a file created in place of a removed one has
// another ID and none of its locks (on the MemFS as on the OS).
func TestLocksOfAFileInPlaceOfAnother(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			locks := filepath.Join(tc.dir, "locks")
			a, err := tc.fs.OpenLocks(locks)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if ok, err := a.TryLock(1, true); !ok || err != nil {
				t.Fatal(ok, err)
			}
			b, err := tc.fs.OpenLocks(locks)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			aid, _ := a.ID()
			if bid, _ := b.ID(); aid != bid {
				t.Fatalf("two opens of one file: IDs %v and %v", aid, bid)
			}
			if err := tc.fs.Remove(locks); err != nil {
				t.Fatal(err)
			}
			c, err := tc.fs.OpenLocks(locks)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if cid, _ := c.ID(); cid == aid {
				t.Fatalf("a file in place of a removed one (still held) has its ID %v", cid)
			}
			if ok, err := c.TryLock(1, true); !ok || err != nil {
				t.Fatalf("the new file's byte: %v, %v; want free", ok, err)
			}

			lock := filepath.Join(tc.dir, "LOCK")
			l, err := tc.fs.Lock(lock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := tc.fs.Remove(lock); err != nil {
				t.Fatal(err)
			}
			l2, err := tc.fs.Lock(lock)
			if err != nil {
				t.Fatalf("Lock of a file in place of a removed one: %v", err)
			}
			defer l2.Close()
			lid, _ := l.ID()
			if l2id, _ := l2.ID(); lid == l2id {
				t.Fatalf("LOCK in place of a removed one has its ID %v", lid)
			}

			shm := filepath.Join(tc.dir, "shm")
			s, err := tc.fs.MapShared(shm, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.Uint64(8).Store(1)
			if err := tc.fs.Remove(shm); err != nil {
				t.Fatal(err)
			}
			s2, err := tc.fs.MapShared(shm, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if s2.Uint64(8).Load() != 0 || s2.ID() == s.ID() {
				t.Fatalf("shm in place of a removed one: field %d, ID %v (old %v)", s2.Uint64(8).Load(), s2.ID(), s.ID())
			}
		})
	}
}

// The helper process for the cross-process tests: it takes what
// SEGLOG_VFS_HELPER says, prints "ready", and waits to be killed.
func TestMain(m *testing.M) {
	if h := os.Getenv("SEGLOG_VFS_HELPER"); h != "" {
		helper(h)
		return
	}
	os.Exit(m.Run())
}

func helper(spec string) {
	var what, path string
	var arg int64
	fmt.Sscanf(spec, "%s %s %d", &what, &path, &arg)
	switch what {
	case "byte":
		l, err := Default.OpenLocks(path)
		if err == nil {
			var ok bool
			ok, err = l.TryLock(arg, true)
			if !ok && err == nil {
				err = errors.New("not taken")
			}
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	case "flock":
		if _, err := Default.Lock(path); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	case "shm":
		s, err := Default.MapShared(path, 4096, true)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		s.Uint64(32).Add(uint64(arg))
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// startHelper runs this test binary as another process that takes spec,
// and returns once it is ready.
func startHelper(t *testing.T, spec string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SEGLOG_VFS_HELPER="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("helper %q: %q", spec, line)
	}
	return cmd
}

// kill SIGKILLs the helper and waits for it to be gone.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

func TestLocksAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	locks := filepath.Join(dir, "locks")
	cmd := startHelper(t, "byte "+locks+" "+strconv.Itoa(1<<33))
	l, err := Default.OpenLocks(locks)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if ok, err := l.TryLock(1<<33, false); ok || err != nil {
		t.Fatalf("byte held by a live process: TryLock = %v, %v", ok, err)
	}
	if ok, _ := l.TryLock(1<<33+1, true); !ok {
		t.Fatal("the next byte is free")
	}
	kill(t, cmd)
	if ok, err := l.TryLock(1<<33, true); !ok || err != nil {
		t.Fatalf("byte of a killed process: TryLock = %v, %v; the kernel releases it", ok, err)
	}

	lockPath := filepath.Join(dir, "LOCK")
	cmd = startHelper(t, "flock "+lockPath+" 0")
	var le *LockError
	if _, err := Default.LockShared(lockPath); !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Fatalf("LockShared under another process's exclusive flock: %v, want a *LockError naming pid %d", err, cmd.Process.Pid)
	}
	kill(t, cmd)
	sh, err := Default.LockShared(lockPath)
	if err != nil {
		t.Fatalf("LockShared after the holder died: %v", err)
	}
	sh.Close()

	shm := filepath.Join(dir, "shm")
	s, err := Default.MapShared(shm, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Uint64(32).Store(100)
	kill(t, startHelper(t, "shm "+shm+" 5"))
	if got := s.Uint64(32).Load(); got != 105 {
		t.Fatalf("field after another process added 5: %d, want 105", got)
	}
}

// A Wait on a word of one mapping wakes on a Wake through another mapping
// of the same file (as in another process), and returns at once when the
// word no longer holds the value it waits on.
func TestSharedWaitWake(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "shm")
			a, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.MapShared(path, 4096, true)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const off = 88
			woke := make(chan uint32)
			go func() {
				w := a.Uint32(off)
				for w.Load() == 0 {
					a.Wait(off, 0, time.Hour) // only a Wake (or a spurious return) ends it
				}
				woke <- w.Load()
			}()
			time.Sleep(10 * time.Millisecond) // (mostly) asleep in Wait by now
			b.Uint32(off).Store(7)
			b.Wake(off)
			select {
			case v := <-woke:
				if v != 7 {
					t.Fatalf("the waiter saw %d, want 7", v)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Wake through another mapping did not wake the Wait")
			}
			done := make(chan struct{})
			go func() {
				a.Wait(off, 0, time.Hour) // the word holds 7: no wait
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Wait on a value the word no longer holds did not return")
			}
			a.Wait(off, 7, time.Millisecond) // and a Wait times out
		})
	}
}

// TestHeldByOther: HeldByOther reports another holder's exclusive lock on
// a byte, not a shared one, not the asker's own, and takes nothing.
func TestHeldByOther(t *testing.T) {
	for name, tc := range lockFS(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(tc.dir, "locks")
			a, err := tc.fs.OpenLocks(path)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.OpenLocks(path)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			held := func(what string, l Locks, want bool) {
				t.Helper()
				if got, err := l.HeldByOther(7); err != nil || got != want {
					t.Errorf("%s: HeldByOther = %v, %v; want %v", what, got, err, want)
				}
			}
			held("free", b, false)
			if ok, err := a.TryLock(7, true); err != nil || !ok {
				t.Fatalf("TryLock: %v, %v", ok, err)
			}
			held("another's exclusive", b, true)
			held("its own", a, false)
			if err := a.Unlock(7); err != nil {
				t.Fatal(err)
			}
			if ok, err := a.TryLock(7, false); err != nil || !ok {
				t.Fatalf("TryLock shared: %v, %v", ok, err)
			}
			held("another's shared", b, false)
			if err := a.Unlock(7); err != nil {
				t.Fatal(err)
			}
			held("released", b, false)
			// Asking took nothing: a takes it exclusive.
			if ok, err := a.TryLock(7, true); err != nil || !ok {
				t.Errorf("TryLock after the asks: %v, %v; want it taken", ok, err)
			}
		})
	}
}

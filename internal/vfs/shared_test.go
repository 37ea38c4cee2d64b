package vfs

import (
	"bufio"
	"errors"
	"fmt"
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
			a, err := tc.fs.MapShared(path, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.MapShared(path, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			a.Uint64(24).Store(7)
			if !b.Uint64(24).CompareAndSwap(7, 9) || a.Uint64(24).Load() != 9 {
				t.Fatalf("the two mappings do not share the field: %d", a.Uint64(24).Load())
			}
			copy(a.Bytes(), "seglogsh")
			if string(b.Bytes()[:8]) != "seglogsh" {
				t.Fatalf("the two mappings do not share bytes: %q", b.Bytes()[:8])
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
		s, err := Default.MapShared(path, 4096)
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
	s, err := Default.MapShared(shm, 4096)
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
			a, err := tc.fs.MapShared(path, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := tc.fs.MapShared(path, 4096)
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

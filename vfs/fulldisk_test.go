package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallTmpfs mounts a tmpfs of size bytes on a directory of the test's
// and returns it, unmounted at the test's end; the test is skipped where
// it cannot mount one (not root, or no right to mount).
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

// fillDisk writes a file of zeros in dir until the file system is full,
// and returns a func that removes it.
func fillDisk(t *testing.T, dir string) func() {
	t.Helper()
	path := filepath.Join(dir, "fill")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4096)
	for {
		if _, err := f.Write(b); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMapSharedOnAFullDisk: on a full tmpfs, MapShared with create fails
// with ENOSPC naming the file, for a missing file (left empty, as O_CREAT
// made it) and for one of the right size that is a hole (as a truncate
// leaves it; before, the mapping succeeded, and its first touch faulted:
// the Shared lost, as if the file had been cut under it). Once there is
// room, it maps both, and stores stick.
func TestMapSharedOnAFullDisk(t *testing.T) {
	dir := smallTmpfs(t, "64k")
	hole := filepath.Join(dir, "hole")
	if err := os.WriteFile(hole, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(hole, 4096); err != nil {
		t.Fatal(err)
	}
	free := fillDisk(t, dir)
	missing := filepath.Join(dir, "missing")
	for _, path := range []string{missing, hole} {
		s, err := Default.MapShared(path, 4096, true)
		if err == nil {
			w := s.Uint64(0)
			w.Store(1)
			t.Errorf("MapShared of %s on a full disk: no error (a store then: lost %v)", path, s.Lost())
			s.Close()
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
			t.Errorf("MapShared of %s on a full disk: %v, want ENOSPC naming the file", path, err)
		}
	}
	if fi, err := os.Stat(missing); err != nil || fi.Size() != 0 {
		t.Errorf("the missing file after a failed MapShared: %v, %v; want it made, empty", fi, err)
	}
	free()
	for _, path := range []string{missing, hole} {
		s, err := Default.MapShared(path, 4096, true)
		if err != nil {
			t.Fatalf("MapShared of %s once there is room: %v", path, err)
		}
		s.Uint64(4088).Store(7)
		if s.Lost() || s.Uint64(4088).Load() != 7 {
			t.Errorf("%s: a store did not stick (lost %v)", path, s.Lost())
		}
		s.Close()
	}
}

// TestFaultAllocate: a FaultFS rule of OpAllocate fails MapShared with
// create, leaving a missing file made and empty, as a full disk fails the
// OS's fallocate; without create, or once the rule is gone, it maps. An
// OpAny rule neither counts nor fails it (a crash sweep skips it).
func TestFaultAllocate(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	f := NewFault(m, Rule{Op: OpAny, Nth: 1, Sticky: true})
	s, err := f.MapShared("/d/shm", 4096, true)
	if err != nil {
		t.Fatalf("MapShared under an OpAny rule: %v", err)
	}
	s.Close()
	if n := f.Count(OpAny); n != 0 {
		t.Fatalf("OpAny counted %d operations of MapShared", n)
	}
	f.Clear()
	f.Add(Rule{Op: OpAllocate, Err: syscall.ENOSPC})
	_, err = f.MapShared("/d/new", 4096, true)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "/d/new") {
		t.Fatalf("MapShared under an OpAllocate rule: %v, want ENOSPC naming the file", err)
	}
	if file, err := m.Open("/d/new"); err != nil {
		t.Fatalf("the failed MapShared made no file: %v", err)
	} else if n, _ := file.Size(); n != 0 {
		t.Fatalf("the failed MapShared left %d bytes, want none", n)
	}
	if s, err := f.MapShared("/d/shm", 4096, false); err != nil {
		t.Fatalf("MapShared without create under an OpAllocate rule: %v", err)
	} else {
		s.Close()
	}
	if n := f.Count(OpAllocate); n != 2 {
		t.Fatalf("OpAllocate counted %d, want 2 (the two calls with create)", n)
	}
}

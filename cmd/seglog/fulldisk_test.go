package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadCommandsOnAFullDisk (issue 44, point 3): the clean store's
// files, without shm, on a full tmpfs, no process having it open. ls and
// check fail naming the real cause, ENOSPC on shm, where they said shm
// "was cut short under the processes that have the store open" (ls) and
// "was removed or replaced while they had it open" (check); once there
// is room both succeed. Skipped where the test cannot mount a tmpfs.
func TestReadCommandsOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting the tmpfs at %s: %v", mnt, err)
		}
	})
	dir := filepath.Join(mnt, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(cleanStore)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "shm" || e.Name() == "locks" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(cleanStore, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
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
	shm := filepath.Join(dir, "shm")
	for _, cmd := range []string{"ls", "check"} {
		out, code := cli(t, cmd, "--dir", dir)
		if code != 1 || !strings.Contains(out, "no space left on device") || !strings.Contains(out, shm) ||
			strings.Contains(out, "cut short") || strings.Contains(out, "removed or replaced") {
			t.Errorf("%s on a full disk: exit %d\n%s\nwant exit 1, ENOSPC naming %s, no process blamed", cmd, code, out, shm)
		}
	}
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if out, code := cli(t, "ls", "--dir", dir); code != 0 {
		t.Errorf("ls once there is room: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 || !strings.HasSuffix(out, "OK\n") {
		t.Errorf("check once there is room: exit %d\n%s", code, out)
	}
}

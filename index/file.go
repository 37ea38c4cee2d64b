package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// lockFile opens the index file at path and takes bbolt's lock on it (the
// same flock bbolt takes: shared to read, exclusive to write), so that the
// file is checked under the lock and handed to bbolt without letting go of
// it. fresh reports a file this call created (a read-only open never
// creates one).
func lockFile(path string, readOnly bool, timeout time.Duration) (f *os.File, fresh bool, err error) {
	if readOnly {
		f, err = os.OpenFile(path, os.O_RDONLY, 0)
	} else {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			fresh = err == nil
			if errors.Is(err, fs.ErrExist) { // created meanwhile by another opener
				f, err = os.OpenFile(path, os.O_RDWR, 0)
			}
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("index: open %s: %w", path, err)
	}
	how := syscall.LOCK_EX
	if readOnly {
		how = syscall.LOCK_SH
	}
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f, fresh, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, false, fmt.Errorf("index: lock %s: %w", path, err)
		}
		if time.Since(start) >= timeout {
			f.Close()
			return nil, false, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkLocked checks the whole index file f (see check.go) through a
// read-only mapping of exactly its size, so that no read can pass its end.
// It returns nil, a *DamageError, or an I/O error. c, if not nil, is the
// check to run (to read what it counted).
func checkLocked(f *os.File, path string, c *fileCheck) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return newDamage(path, -1, "empty file (zero bytes)", nil)
	}
	if size != int64(int(size)) {
		return fmt.Errorf("index: %s: file of %d bytes is too large to map", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, checkMapFlags)
	if err != nil {
		return fmt.Errorf("index: map %s: %w", path, err)
	}
	defer syscall.Munmap(data)
	// A file cut short under the mapping faults; protect turns that into
	// an error too.
	if c == nil {
		c = &fileCheck{}
	}
	c.path, c.data = path, data
	return protect(path, "check", &c.user, c.run)
}

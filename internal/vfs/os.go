package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "syncdir", Path: dir, Err: err}
	}
	return nil
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		lockErr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
	}); err != nil {
		f.Close()
		return nil, err
	}
	if lockErr != nil {
		defer f.Close()
		if errors.Is(lockErr, unix.EWOULDBLOCK) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &LockError{Path: name, PID: pid}
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: lockErr}
	}
	// Record who holds the lock; a failure here does not weaken the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil // closing the descriptor releases the flock
}

func fsync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fsync(int(fd)) }); err != nil {
		return err
	}
	return serr
}

type osFile struct {
	f *os.File
}

func (f *osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f *osFile) Close() error                             { return f.f.Close() }
func (f *osFile) Truncate(size int64) error                { return f.f.Truncate(size) }

func (f *osFile) Sync() error {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fdatasync(int(fd))
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.f.Name(), Err: serr}
	}
	return nil
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f *osFile) Map(size int64) (*Mapping, error) {
	if size == 0 {
		return &Mapping{}, nil
	}
	if size < 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("vfs: map %s: bad size %d", f.f.Name(), size)
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var data []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		data, merr = unix.Mmap(int(fd), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	}); err != nil {
		return nil, err
	}
	if merr != nil {
		return nil, &os.PathError{Op: "mmap", Path: f.f.Name(), Err: merr}
	}
	return &Mapping{data: data, unmap: unix.Munmap}, nil
}

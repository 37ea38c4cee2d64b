package vfs

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

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

func (osFS) Lock(name string) (FileLock, error) {
	l, err := flockFile(name, unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	// Record who holds the lock; a failure here does not weaken the lock.
	if err := l.f.Truncate(0); err == nil {
		_, _ = l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return l, nil
}

func (osFS) LockShared(name string) (FileLock, error) { return flockFile(name, unix.LOCK_SH) }

// osFlock is a flock(2) held on an open descriptor; closing the
// descriptor releases it.
type osFlock struct{ f *os.File }

func flockFile(name string, how int) (*osFlock, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	l := &osFlock{f: f}
	if err := l.flock(how | unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &LockError{Path: name, PID: pid}
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return l, nil
}

func (l *osFlock) flock(how int) error {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) { lockErr = unix.Flock(int(fd), how) }); err != nil {
		return err
	}
	return lockErr
}

func (l *osFlock) Share() error {
	if err := l.flock(unix.LOCK_SH | unix.LOCK_NB); err != nil {
		return &os.PathError{Op: "flock", Path: l.f.Name(), Err: err}
	}
	return nil
}

func (l *osFlock) Close() error { return l.f.Close() }

func (l *osFlock) ID() (FileID, error) { return fileID(l.f) }

func (osFS) LockDir(dir string, exclusive bool) (FileLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	l := &osFlock{f: f}
	if err := l.flock(how | unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockError{Path: dir}
		}
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return l, nil
}

// fileID returns the device and inode numbers of the open file f.
func fileID(f *os.File) (FileID, error) {
	fi, err := f.Stat()
	if err != nil {
		return FileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, fmt.Errorf("vfs: %s: no device and inode numbers", f.Name())
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

func (osFS) OpenLocks(name string) (Locks, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &osLocks{f: f}, nil
}

// osLocks takes open-file-description locks (F_OFD_SETLK): they belong to
// the open file, so two opens conflict even in one process, and they go
// when it is closed or its process dies.
type osLocks struct{ f *os.File }

func (l *osLocks) fcntl(cmd int, typ int16, off int64) error {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return err
	}
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.FcntlFlock(fd, cmd, &lk)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

func lockType(exclusive bool) int16 {
	if exclusive {
		return unix.F_WRLCK
	}
	return unix.F_RDLCK
}

func (l *osLocks) TryLock(off int64, exclusive bool) (bool, error) {
	err := l.fcntl(unix.F_OFD_SETLK, lockType(exclusive), off)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "fcntl lock", Path: l.f.Name(), Err: err}
	}
	return true, nil
}

func (l *osLocks) Lock(off int64, exclusive bool) error {
	if err := l.fcntl(unix.F_OFD_SETLKW, lockType(exclusive), off); err != nil {
		return &os.PathError{Op: "fcntl lock", Path: l.f.Name(), Err: err}
	}
	return nil
}

func (l *osLocks) Unlock(off int64) error {
	if err := l.fcntl(unix.F_OFD_SETLK, unix.F_UNLCK, off); err != nil {
		return &os.PathError{Op: "fcntl unlock", Path: l.f.Name(), Err: err}
	}
	return nil
}

func (l *osLocks) HeldByOther(off int64) (bool, error) {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return false, err
	}
	// A shared lock conflicts with an exclusive one alone; the holder's
	// own locks conflict with nothing.
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: off, Len: 1}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.FcntlFlock(fd, unix.F_OFD_GETLK, &lk)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if ferr != nil {
		return false, &os.PathError{Op: "fcntl getlk", Path: l.f.Name(), Err: ferr}
	}
	return lk.Type == unix.F_WRLCK, nil
}

func (l *osLocks) Close() error { return l.f.Close() }

func (l *osLocks) ID() (FileID, error) { return fileID(l.f) }

func (osFS) MapShared(name string, size int, create bool) (s *Shared, err error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(name, flags, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < int64(size) && !create {
		return nil, &os.PathError{Op: "mmap", Path: name, Err: fmt.Errorf("%w: %d bytes, not %d", ErrShortFile, fi.Size(), size)}
	}
	if create {
		// Grown, and its blocks allocated, now: a mapping of a hole
		// faults at its first touch on a full disk (a SIGBUS, which
		// Shared survives as if the file had been cut under it), where
		// this reports ENOSPC with the path.
		if err := allocate(f, fi.Size(), int64(size)); err != nil {
			return nil, err
		}
	}
	id, err := fileID(f)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var data []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		data, merr = unix.Mmap(int(fd), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}); err != nil {
		return nil, err
	}
	if merr != nil {
		return nil, &os.PathError{Op: "mmap", Path: name, Err: merr}
	}
	// The descriptor stays open, for Size (a mapping alone keeps the
	// file, not a way to ask its size).
	size64 := func() (int64, error) {
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	return &Shared{data: data, unmap: unix.Munmap, size: size64, release: f.Close, id: id}, nil
}

// allocate makes the file system back the first size bytes of f (which
// holds have bytes), growing it to size with zeros if it is shorter, its
// data left as it is: fallocate, or where that fails other than for want
// of room (a file system without it: EOPNOTSUPP, or EINVAL on some),
// zeros written past its end (an existing hole then stays one). Its
// error is an *os.PathError naming the file.
func allocate(f *os.File, have, size int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Fallocate(int(fd), 0, 0, size)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	switch {
	case ferr == nil:
		return nil
	case errors.Is(ferr, unix.ENOSPC) || errors.Is(ferr, unix.EDQUOT):
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: ferr}
	case have < size:
		_, err := f.WriteAt(make([]byte, size-have), have)
		return err
	}
	return nil
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

// writeBack writes the dirty pages of [off, off+n) to the disk and waits
// for them (sync_file_range): no durability (neither metadata nor the
// disk's cache), only so that a later fdatasync finds less to write.
func (f *osFile) writeBack(off, n int64) error {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "sync_file_range", Path: f.f.Name(), Err: serr}
	}
	return nil
}

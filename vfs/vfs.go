package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// FS is the set of file-system operations seglog needs.
type FS interface {
	// Create creates name for reading and writing. It fails with an error
	// satisfying errors.Is(err, fs.ErrExist) if name exists. The new entry is
	// durable only after SyncDir of its directory.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename atomically replaces newname with oldname. Durable after SyncDir.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// Lock takes an exclusive, non-blocking lock on the file name (created if
	// missing) for this process and records the process id in it. It fails
	// with a *LockError (errors.Is(err, ErrLocked)) if another holder has it.
	// Closing the returned FileLock releases the lock.
	Lock(name string) (FileLock, error)
	// LockShared takes a shared, non-blocking lock on the file name
	// (created if missing): any number of shared holders, but none while
	// an exclusive one holds it (a *LockError naming the pid that holder
	// recorded).
	LockShared(name string) (FileLock, error)
	// LockDir takes a non-blocking lock on the directory dir itself,
	// exclusive or shared (flock on the OS), with the semantics of Lock
	// and LockShared (a *LockError, without a pid, if a conflicting holder
	// has it). A directory that holds files cannot be removed: unlike a
	// lock file, nothing a removal of a file does takes the lock from its
	// holders or lets a newcomer take it beside them.
	LockDir(dir string, exclusive bool) (FileLock, error)
	// OpenLocks opens name (created if missing) for byte-range locks; see
	// Locks.
	OpenLocks(name string) (Locks, error)
	// MapShared maps the first size bytes of name read-write and shared;
	// see Shared. With create, name is created if missing and grown with
	// zeros to size, and the file system is made to back those bytes
	// (fallocate on the OS, its data left as it is): a full disk fails
	// the call with its error (errors.Is(err, syscall.ENOSPC), the path
	// named), where a mapping of a file with holes would fault at its
	// first touch. Without create, name must exist (else an error
	// satisfying errors.Is(err, fs.ErrNotExist)) and hold at least size
	// bytes (else an error satisfying errors.Is(err, ErrShortFile)):
	// nothing is created or changed.
	MapShared(name string, size int, create bool) (*Shared, error)
	// SyncDir makes the directory entries of dir durable (fsync on the
	// directory).
	SyncDir(dir string) error
}

// File is an open file. ReadAt and WriteAt may be called concurrently at
// disjoint ranges.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data and size durable (fdatasync).
	Sync() error
	// Truncate changes the size of the file; growing it adds zeros.
	Truncate(size int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
	// Map returns a read-only view of the first size bytes of the file.
	// On the OS it is a shared mmap: it reflects later writes to that range.
	// Writes past size are not visible through it. The view must not be used
	// after the Mapping is closed.
	Map(size int64) (*Mapping, error)
}

// Mapping is a read-only view of a file returned by File.Map.
type Mapping struct {
	data  []byte
	unmap func([]byte) error
}

// Bytes returns the mapped bytes. They are valid until Close.
func (m *Mapping) Bytes() []byte { return m.data }

// Close releases the mapping. It is idempotent.
func (m *Mapping) Close() error {
	if m.data == nil && m.unmap == nil {
		return nil
	}
	d, f := m.data, m.unmap
	m.data, m.unmap = nil, nil
	if f == nil {
		return nil
	}
	return f(d)
}

// FileID identifies a file (on the OS: its device and inode numbers).
// Every open of one file has its FileID; a file created in place of a
// removed (or renamed-over) one has another, as long as something still
// holds the first open (the OS reuses an inode number only once the file
// is freed).
type FileID struct{ Dev, Ino uint64 }

// ErrShortFile: MapShared without create of a file shorter than the
// mapping.
var ErrShortFile = errors.New("vfs: file shorter than the mapping")

// ErrLocked is the kind of *LockError.
var ErrLocked = errors.New("vfs: locked by another process")

// LockError reports a lock held by someone else.
type LockError struct {
	Path string
	PID  int // process id recorded by the holder; 0 if unknown
}

func (e *LockError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("vfs: %s is locked by process %d", e.Path, e.PID)
	}
	return fmt.Sprintf("vfs: %s is locked by another process", e.Path)
}

// Is reports whether target is ErrLocked.
func (e *LockError) Is(target error) bool { return target == ErrLocked }

// ReadFile reads the whole named file.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// WriteBack starts the writing of f's dirty pages in [off, off+n) to the
// disk and waits for it, where the file system can (the OS's; elsewhere
// it does nothing). It makes nothing durable: a Sync must follow. Its use
// is to keep a large write of zeros from landing on the next data sync.
func WriteBack(f File, off, n int64) error {
	if wb, ok := f.(interface{ writeBack(off, n int64) error }); ok {
		return wb.writeBack(off, n)
	}
	return nil
}

package vfs

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Locks is a file opened for byte-range locks. Each Locks is one holder:
// two Locks of the same file conflict, in one process or in two, as the
// open-file-description locks of Linux (fcntl F_OFD_SETLK) do, and the
// kernel releases a holder's locks when its process dies. A byte is
// locked shared (any number of holders) or exclusive (one). The bytes
// locked need not exist in the file.
type Locks interface {
	// TryLock takes the lock on byte off without waiting, and reports
	// whether it did (false: another holder has a conflicting lock).
	// Taking a byte the holder has already changes its mode.
	TryLock(off int64, exclusive bool) (bool, error)
	// Lock takes the lock on byte off, waiting for conflicting holders.
	Lock(off int64, exclusive bool) error
	// Unlock releases the lock on byte off (nothing if not held).
	Unlock(off int64) error
	// Close releases every lock of the holder.
	Close() error
}

// FileLock is a whole-file lock taken by FS.Lock or FS.LockShared (flock
// on the OS).
type FileLock interface {
	// Share turns an exclusive lock into a shared one. The change is not
	// atomic on the OS: another process may take the lock in between, so
	// callers serialize it with a lock of their own.
	Share() error
	// Close releases the lock.
	Close() error
}

// Shared is a region of a file mapped read-write and shared: every
// mapping of the same file, in any process, sees the same bytes at once.
// It is for coordination, not storage: nothing is synced, and after a
// power cut (or in a MemFS crash clone) its content is undefined.
type Shared struct {
	data  []byte
	unmap func([]byte) error
}

// Bytes returns the mapped bytes. They are valid until Close.
func (s *Shared) Bytes() []byte { return s.data }

// Uint64 returns the 8-byte field at off (a multiple of 8) for atomic
// loads, stores and compare-and-swaps, which other processes see.
func (s *Shared) Uint64(off int) *atomic.Uint64 {
	if off%8 != 0 || off < 0 || off+8 > len(s.data) {
		panic("vfs: Shared.Uint64: offset not an aligned field of the mapping")
	}
	return (*atomic.Uint64)(unsafe.Pointer(&s.data[off]))
}

// Close unmaps the region. It is idempotent.
func (s *Shared) Close() error {
	d, f := s.data, s.unmap
	s.data, s.unmap = nil, nil
	if f == nil {
		return nil
	}
	return f(d)
}

// Uint32 returns the 4-byte word at off (a multiple of 4) for atomic
// operations that other processes see, and for Wait and Wake.
func (s *Shared) Uint32(off int) *atomic.Uint32 {
	if off%4 != 0 || off < 0 || off+4 > len(s.data) {
		panic("vfs: Shared.Uint32: offset not an aligned word of the mapping")
	}
	return (*atomic.Uint32)(unsafe.Pointer(&s.data[off]))
}

// Wait blocks while the word at off (see Uint32) holds old, until a Wake
// of that word in any process, or for at most d; it may also return early
// for no reason (a futex wait on Linux), so callers loop on what they
// wait for and keep d short enough to recover a missed wake-up (a waker
// that died between its store and its Wake).
func (s *Shared) Wait(off int, old uint32, d time.Duration) {
	futexWait(s.Uint32(off), old, d)
}

// Wake wakes every Wait on the word at off, in every process.
func (s *Shared) Wake(off int) {
	futexWake(s.Uint32(off))
}

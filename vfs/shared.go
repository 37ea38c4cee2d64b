package vfs

import (
	"runtime/debug"
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
	// HeldByOther reports whether another holder has byte off locked
	// exclusive, without taking it (fcntl F_OFD_GETLK on the OS): what
	// it reports may change at once.
	HeldByOther(off int64) (bool, error)
	// ID returns the identity of the file the locks are on.
	ID() (FileID, error)
	// Close releases every lock of the holder.
	Close() error
}

// FileLock is a whole-file lock taken by FS.Lock, FS.LockShared or
// FS.LockDir (flock on the OS).
type FileLock interface {
	// Share turns an exclusive lock into a shared one. The change is not
	// atomic on the OS: another process may take the lock in between, so
	// callers serialize it with a lock of their own.
	Share() error
	// ID returns the identity of the locked file (or directory).
	ID() (FileID, error)
	// Close releases the lock.
	Close() error
}

// Shared is a region of a file mapped read-write and shared: every
// mapping of the same file, in any process, sees the same bytes at once.
// It is for coordination, not storage: nothing is synced, and after a
// power cut (or in a MemFS crash clone) its content is undefined.
//
// Its fields are read and written only through Uint64 and Uint32, whose
// operations survive the file being cut short under the mapping (by
// another process, or by hand): on the OS a touch of a page past the
// file's end faults (SIGBUS), which would end the process. Each operation
// turns such a fault into the mapping's lost state instead: from then on
// loads return 0, stores and adds do nothing, swaps fail, Wait returns at
// once, and Lost reports true. A cut that leaves part of the first page
// (the OS zeroes the rest of it) faults nothing: Size tells it. So a
// caller that must not act on zeros a cut left reads what it acts on,
// then checks Lost and Size, then acts.
type Shared struct {
	data  []byte
	unmap func([]byte) error
	// size reports the mapped file's size now; release closes what the
	// mapping keeps open for it
	size    func() (int64, error)
	release func() error
	id      FileID
	// limit, on a MemFS, is the file's current size: an access past it
	// is lost as one past the end of a real file faults (nil on the OS,
	// where the MMU tells)
	limit *atomic.Int64
	lost  atomic.Bool
}

// Word64 is an 8-byte field of a Shared (see Shared.Uint64).
type Word64 struct {
	s   *Shared
	off int
}

// Word32 is a 4-byte word of a Shared (see Shared.Uint32).
type Word32 struct {
	s   *Shared
	off int
}

// Uint64 returns the 8-byte field at off (a multiple of 8) for atomic
// loads, stores, adds and compare-and-swaps, which other processes see.
func (s *Shared) Uint64(off int) Word64 {
	if off%8 != 0 || off < 0 || off+8 > len(s.data) {
		panic("vfs: Shared.Uint64: offset not an aligned field of the mapping")
	}
	return Word64{s, off}
}

// Uint32 returns the 4-byte word at off (a multiple of 4) for atomic
// operations that other processes see, and for Wait and Wake.
func (s *Shared) Uint32(off int) Word32 {
	if off%4 != 0 || off < 0 || off+4 > len(s.data) {
		panic("vfs: Shared.Uint32: offset not an aligned word of the mapping")
	}
	return Word32{s, off}
}

// gone reports whether an access to the bytes before end must not be made:
// the mapping is lost, or (on a MemFS) the file no longer reaches end.
func (s *Shared) gone(end int) bool {
	if s.lost.Load() {
		return true
	}
	if s.limit != nil && s.limit.Load() < int64(end) {
		s.lost.Store(true)
		return true
	}
	return false
}

// survive, deferred by every access (its argument the result of
// debug.SetPanicOnFault(true), evaluated at the defer), restores the
// goroutine's setting and turns a fault of the access into the lost
// state. Any other panic goes on.
func (s *Shared) survive(old bool) {
	debug.SetPanicOnFault(old)
	if r := recover(); r != nil {
		if _, ok := r.(interface{ Addr() uintptr }); !ok {
			panic(r)
		}
		s.lost.Store(true)
	}
}

func (w Word64) p() *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&w.s.data[w.off])) }
func (w Word32) p() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&w.s.data[w.off])) }

// Load loads the field (0 once the mapping is lost).
func (w Word64) Load() uint64 {
	if w.s.gone(w.off + 8) {
		return 0
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	return w.p().Load()
}

// Store stores v in the field (nothing once the mapping is lost).
func (w Word64) Store(v uint64) {
	if w.s.gone(w.off + 8) {
		return
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	w.p().Store(v)
}

// Add adds d to the field and returns the new value (0, and nothing
// added, once the mapping is lost).
func (w Word64) Add(d uint64) uint64 {
	if w.s.gone(w.off + 8) {
		return 0
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	return w.p().Add(d)
}

// CompareAndSwap swaps the field from old to new if it holds old (never
// once the mapping is lost).
func (w Word64) CompareAndSwap(old, new uint64) bool {
	if w.s.gone(w.off + 8) {
		return false
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	return w.p().CompareAndSwap(old, new)
}

// Load loads the word (0 once the mapping is lost).
func (w Word32) Load() uint32 {
	if w.s.gone(w.off + 4) {
		return 0
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	return w.p().Load()
}

// Store stores v in the word (nothing once the mapping is lost).
func (w Word32) Store(v uint32) {
	if w.s.gone(w.off + 4) {
		return
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	w.p().Store(v)
}

// Add adds d to the word and returns the new value (0, and nothing added,
// once the mapping is lost).
func (w Word32) Add(d uint32) uint32 {
	if w.s.gone(w.off + 4) {
		return 0
	}
	defer w.s.survive(debug.SetPanicOnFault(true))
	return w.p().Add(d)
}

// Clear zeroes the whole region (nothing once the mapping is lost).
func (s *Shared) Clear() {
	if s.gone(len(s.data)) {
		return
	}
	defer s.survive(debug.SetPanicOnFault(true))
	clear(s.data)
}

// Lost reports whether an access found the file cut short under the
// mapping: every operation since has been a no-op.
func (s *Shared) Lost() bool { return s.lost.Load() }

// Size returns the mapped file's size now: less than the mapping once
// the file was cut short (by hand: nothing of seglog shrinks it).
func (s *Shared) Size() (int64, error) {
	if s.size == nil {
		return int64(len(s.data)), nil
	}
	return s.size()
}

// ID returns the identity of the mapped file.
func (s *Shared) ID() FileID { return s.id }

// Close unmaps the region. It is idempotent.
func (s *Shared) Close() error {
	d, f, r := s.data, s.unmap, s.release
	s.data, s.unmap, s.release = nil, nil, nil
	var err error
	if f != nil {
		err = f(d)
	}
	if r != nil {
		if rerr := r(); err == nil {
			err = rerr
		}
	}
	return err
}

// Wait blocks while the word at off (see Uint32) holds old, until a Wake
// of that word in any process, or for at most d; it may also return early
// for no reason (a futex wait on Linux), so callers loop on what they
// wait for and keep d short enough to recover a missed wake-up (a waker
// that died between its store and its Wake). Once the mapping is lost it
// returns at once.
func (s *Shared) Wait(off int, old uint32, d time.Duration) {
	w := s.Uint32(off)
	if s.gone(off + 4) {
		return
	}
	// (A futex wait on a page the file no longer reaches fails with
	// EFAULT: no fault, it returns.)
	futexWait(w.p(), old, d)
}

// Wake wakes every Wait on the word at off, in every process.
func (s *Shared) Wake(off int) {
	w := s.Uint32(off)
	if s.gone(off + 4) {
		return
	}
	futexWake(w.p())
}

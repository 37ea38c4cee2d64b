package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/seglog/seglog/internal/vfs"
)

// The files and locks processes that share a store coordinate with
// (docs/DESIGN.md, Many processes).
const (
	lockName  = "LOCK"  // flock: shared by every process of this build
	locksName = "locks" // byte-range locks that die with their process
	shmName   = "shm"   // shared memory: positions every process reads
	shmSize   = 4096

	// shm fields (8 bytes each, atomic)
	shmMagic   = 0  // shmMagicValue once a writer published; 0 when nothing is known
	shmVersion = 8  // shmVersionValue
	shmDurable = 32 // position below which everything is fdatasynced
	shmLayout  = 48 // bumped after a compaction removed or rewrote a segment
	shmWriter  = 56 // pid of the process that writes the store

	// bytes of locksName
	lockInit   = 0 // held while a process opens the store
	lockWriter = 4 // held by the process that writes the store
)

var shmMagicValue = binary.LittleEndian.Uint64([]byte("seglogsh"))

const shmVersionValue = 1

// position packs a segment ID and an offset in it into one ordered word.
func position(seg uint64, off int64) uint64 { return seg<<40 | uint64(off) }

// splitPosition is the inverse of position.
func splitPosition(p uint64) (seg uint64, off int64) { return p >> 40, int64(p & (1<<40 - 1)) }

// shared is what a DB holds of the store's coordination files: the LOCK
// flock, the byte locks and the shared memory. A read-only open of a store
// it cannot coordinate on (a read-only file system) has none of them and
// reads the segments as they are.
type shared struct {
	flock vfs.FileLock
	locks vfs.Locks
	shm   *vfs.Shared
	// first: no other process had the store open when this one opened it
	first bool
	// writer: this process holds lockWriter
	writer bool
}

// join takes this process's place among those that have the store in dir
// open: it takes lockInit (released by opened, once the recovery is done),
// LOCK (exclusive if no process has the store open: the first opener; else
// shared; an older build holds it exclusive), and for a write open
// lockWriter (one writing process at a time, for now).
func join(fsys vfs.FS, dir string, write bool) (*shared, error) {
	sh := &shared{}
	var err error
	if sh.locks, err = fsys.OpenLocks(filepath.Join(dir, locksName)); err != nil {
		if !write {
			return &shared{}, nil // nothing to coordinate with: read what is there
		}
		return nil, err
	}
	if err := sh.locks.Lock(lockInit, true); err != nil {
		sh.close()
		return nil, err
	}
	lock := filepath.Join(dir, lockName)
	if sh.flock, err = fsys.Lock(lock); err == nil {
		sh.first = true
	} else if sh.flock, err = fsys.LockShared(lock); err != nil {
		// An older build has the store open: it takes LOCK exclusive.
		sh.close()
		if !write && errors.Is(err, vfs.ErrLocked) {
			return &shared{}, nil
		}
		return nil, err
	}
	if sh.shm, err = fsys.MapShared(filepath.Join(dir, shmName), shmSize); err != nil {
		sh.close()
		return nil, err
	}
	if sh.first {
		// Whatever it holds is from a time no process had the store open
		// (before a power cut, or a restore of older files): nothing in it
		// is known.
		clear(sh.shm.Bytes())
	}
	if write {
		ok, err := sh.locks.TryLock(lockWriter, true)
		if err != nil {
			sh.close()
			return nil, err
		}
		if !ok {
			pid := int(sh.shm.Uint64(shmWriter).Load())
			sh.close()
			return nil, &vfs.LockError{Path: filepath.Join(dir, locksName), PID: pid}
		}
		sh.writer = true
	}
	return sh, nil
}

// opened ends the open: the first opener lets others share LOCK, and
// lockInit lets the next opener in.
func (sh *shared) opened() error {
	if sh.locks == nil {
		return nil
	}
	if sh.first {
		if err := sh.flock.Share(); err != nil {
			return err
		}
	}
	return sh.locks.Unlock(lockInit)
}

// publish records, as the writing process, what is durable: everything
// before position (seg, off). Readers in other processes read up to it.
func (sh *shared) publish(seg uint64, off int64) {
	if sh.shm == nil || !sh.writer {
		return
	}
	p := position(seg, off)
	d := sh.shm.Uint64(shmDurable)
	for {
		old := d.Load()
		if old >= p || d.CompareAndSwap(old, p) {
			break
		}
	}
	if sh.shm.Uint64(shmMagic).Load() != shmMagicValue {
		sh.shm.Uint64(shmVersion).Store(shmVersionValue)
		sh.shm.Uint64(shmWriter).Store(uint64(os.Getpid()))
		sh.shm.Uint64(shmMagic).Store(shmMagicValue)
	}
}

// durable returns the position a writing process published as durable,
// and false if none did (no writer since the store was first opened).
func (sh *shared) durable() (uint64, bool) {
	if sh.shm == nil || sh.shm.Uint64(shmMagic).Load() != shmMagicValue {
		return 0, false
	}
	if v := sh.shm.Uint64(shmVersion).Load(); v != shmVersionValue {
		return 0, false
	}
	return sh.shm.Uint64(shmDurable).Load(), true
}

// The layout counter works as a seqlock: compaction makes it odd before
// it removes or rewrites a segment and even again once the files and the
// index agree. A reader in another process that saw it move (or odd)
// during an open or a read does it again.

// layoutBegin marks a change of the segments' layout in progress.
func (sh *shared) layoutBegin() {
	if sh.shm != nil && sh.writer {
		sh.shm.Uint64(shmLayout).Add(1)
	}
}

// layoutEnd marks it done.
func (sh *shared) layoutEnd() {
	if sh.shm != nil && sh.writer {
		sh.shm.Uint64(shmLayout).Add(1)
	}
}

// settleLayout, at a writer's open, ends a change the previous writer
// began and never ended (it died): the recovery has settled the files.
func (sh *shared) settleLayout() {
	if sh.shm != nil && sh.writer && sh.shm.Uint64(shmLayout).Load()%2 == 1 {
		sh.shm.Uint64(shmLayout).Add(1)
	}
}

// layout returns the layout counter.
func (sh *shared) layout() uint64 {
	if sh.shm == nil {
		return 0
	}
	return sh.shm.Uint64(shmLayout).Load()
}

// stableLayout returns the layout counter once no change is in progress
// (or the writer that began one is gone: nothing changes the files then).
func (sh *shared) stableLayout() uint64 {
	for i := 0; ; i++ {
		v := sh.layout()
		if v%2 == 0 || sh.locks == nil || sh.writer {
			// (The writer settles a change left in progress; and its probe
			// of lockWriter below would give up the lock it holds.)
			return v
		}
		if i%64 == 63 { // a writer may have died mid-change
			if ok, err := sh.locks.TryLock(lockWriter, false); err == nil && ok {
				sh.locks.Unlock(lockWriter)
				return v
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// close releases everything, the writer's lock with the rest.
func (sh *shared) close() error {
	var errs []error
	if sh.shm != nil {
		errs = append(errs, sh.shm.Close())
		sh.shm = nil
	}
	if sh.locks != nil {
		errs = append(errs, sh.locks.Close())
		sh.locks = nil
	}
	if sh.flock != nil {
		errs = append(errs, sh.flock.Close())
		sh.flock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: releasing the store's locks: %w", err)
	}
	return nil
}

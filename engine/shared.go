package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The files and locks processes that share a store coordinate with
// (docs/DESIGN.md, Many processes).
const (
	lockName  = "LOCK"  // flock: shared by every process of this build
	locksName = "locks" // byte-range locks that die with their process
	shmName   = "shm"   // shared memory: positions every process reads
	shmSize   = 4096

	// shm fields (8 bytes each, atomic)
	shmMagic     = 0  // shmMagicValue once a writing process set the log up; 0 when nothing is known
	shmVersion   = 8  // shmVersionValue
	shmTail      = 24 // position after the last placed frame; moved under lockAppend
	shmDurable   = 32 // position below which everything is fdatasynced
	shmIndexed   = 40 // the index checkpoint the checkpointer last committed
	shmLayout    = 48 // bumped around a compaction's removal or rewrite of a segment
	shmPID       = 56 // pid of the process that set the log up (an older build: of its writer)
	shmFrames    = 64 // events frames in the active segment (its seal counts them)
	shmPlacing   = 72 // end of the placement in progress; past shmTail if its placer died mid-write
	shmIndexWant = 80 // non-zero while a rebuild of the index (check --repair) waits for the checkpointer to step down
	// shmSyncSeq (a 4-byte word) moves after every raise of durable and
	// every release of lockSync: processes waiting for either sleep on
	// it (a futex) and shmSyncWaiters (4 bytes) counts them, so that a
	// publisher makes the wake-up call only when someone waits
	shmSyncSeq     = 88
	shmSyncWaiters = 92
	// The stamp: shmStampValue, then the identities (device, inode: 16
	// bytes each) of the LOCK, locks and shm files the process that set
	// shm up held. A process that joins others compares them with the
	// files it opened.
	shmStamp      = 96
	shmStampFiles = 104
	// shmSlots + 8*i: the follow position of the writing process holding
	// slot i (lockSlot0 + i), 0 while it opens; a compaction leaves alone
	// what one of them has not followed yet
	shmSlots = 1024
	nSlots   = 64

	// bytes of locksName
	lockInit    = 0  // held while a process opens the store
	lockAppend  = 1  // held while a process places frames at the tail
	lockIndex   = 2  // held by the process that checkpoints the index (and runs background compaction)
	lockCompact = 3  // held while a process compacts
	lockBuild   = 4  // shared by the writing processes of this build; an older build's writer holds it exclusive
	lockWriters = 5  // shared by every writing process; a compaction without an index takes it exclusive (it runs alone)
	lockPrepare = 6  // held while a process creates the next segment
	lockSync    = 7  // held while a process fdatasyncs the active segment: the others wait, and their next sync covers them all
	lockFixed   = 8  // shared by a writing process that cannot follow a compaction (no slot, or no index); a compaction takes it exclusive
	lockWant    = 9  // held by a rebuild of the index while it waits for the checkpointer to step down (shmIndexWant)
	lockTypes   = 10 // held while a process rewrites types.json (RegisterTypes)
	lockDict    = 11 // held while a process makes (or looks for) a new compression dictionary
	lockSlot0   = 16 // lockSlot0 + i, i < nSlots: slot i's holder
	// leaseBase + xxhash64(id) mod 2^62: the write lease of session id
	leaseBase = 1 << 32
)

var (
	shmMagicValue = binary.LittleEndian.Uint64([]byte("seglogsh"))
	shmStampValue = binary.LittleEndian.Uint64([]byte("seglogid"))
)

// shmVersionValue 2: several writing processes (tail, placing, frames).
// Version 1 (one writer) was never published beside a writer of this build:
// lockBuild keeps the two apart.
const shmVersionValue = 2

// position packs a segment ID and an offset in it into one ordered word.
func position(seg uint64, off int64) uint64 { return seg<<40 | uint64(off) }

// splitPosition is the inverse of position.
func splitPosition(p uint64) (seg uint64, off int64) { return p >> 40, int64(p & (1<<40 - 1)) }

// shared is what a DB holds of the store's coordination files: the LOCK
// flock, the byte locks and the shared memory. A read-only open of a store
// it cannot coordinate on (a read-only file system) has none of them and
// reads the segments as they are.
type shared struct {
	// mu orders the release of leases with close
	mu     sync.Mutex
	closed bool
	dir    string
	// dirLock: the flock on the store directory itself, held shared by
	// every process of this build that has the store open (exclusive by
	// one that found none, until its open is done: solo); nil where the
	// file system cannot lock a directory (LOCK alone tells then)
	dirLock vfs.FileLock
	flock   vfs.FileLock
	locks   vfs.Locks
	shm     *vfs.Shared
	// solo: no other process of this build had the store open when this
	// one opened it (it took dirLock exclusive)
	solo bool
	// first: no other process had the store open when this one opened it
	first bool
	// lostErr: shm was found cut (or its fields wiped) under this
	// process: nothing it says is trusted any more
	lostErr atomic.Pointer[store.CoordinationError]
	// sawLive: this process saw the log set up in shm (which only a first
	// opener, with no other process left, ever undoes)
	sawLive atomic.Bool
	// write: this process writes the store (it holds lockBuild and
	// lockWriters shared)
	write bool
	// index: this process holds lockIndex: it checkpoints the index
	// (guarded by the DB's idxMu once the store is open)
	index bool
	// compacting: this process holds lockCompact (tryCompact)
	compacting atomic.Bool
	// seen, of a writing DB, is its follower's layout: the layout counter
	// its state agrees with (see bump)
	seen *atomic.Uint64
	// bumpMu makes a bump of the layout counter and of seen one step for
	// layoutMoved
	bumpMu sync.Mutex
	// bumpHook, if set, runs in a bump between the counter's move and
	// the follower's (tests only: the DB's testingKnobs.bump)
	bumpHook func()
	// slot: the shm slot this writing process publishes its follow
	// position in, -1 if it has none (it holds lockFixed shared instead)
	slot int
	// watch wakes this process's Handle.Waits when a sync publishes
	watch durableWatch
}

// join takes this process's place among those that have the store in dir
// open: for a write open lockWriters (shared: waiting out a compaction
// without an index, which runs alone) and lockBuild; then lockInit
// (released by opened, once the recovery is done), the directory's lock
// and LOCK (exclusive if no process has the store open: the first opener;
// else shared; an older build holds LOCK exclusive); then, for a write
// open, a slot if it follows compactions (follows: it has an index to
// reload frame offsets from), else lockFixed shared (waiting out a
// compaction in progress).
//
// A process that joins others of this build (their lock on the directory
// says they are there) proves that it opened the files they hold: shm
// must exist whole (it is never created or grown beside them) and carry
// the stamp of its first opener, naming the LOCK, locks and shm it
// opened. Else the open fails with a *CoordinationError
// (ErrCoordinationLost) and changes nothing (docs/DESIGN.md, Many
// processes, "When the coordination files are removed or cut").
func join(fsys vfs.FS, dir string, write, follows bool) (*shared, error) {
	sh := &shared{slot: -1, dir: dir}
	sh.watch.sh = sh
	var err error
	if sh.locks, err = fsys.OpenLocks(filepath.Join(dir, locksName)); err != nil {
		if !write {
			return &shared{}, nil // nothing to coordinate with: read what is there
		}
		return nil, err
	}
	if write {
		if err := sh.locks.Lock(lockWriters, false); err != nil {
			sh.close()
			return nil, err
		}
	}
	if err := sh.locks.Lock(lockInit, true); err != nil {
		sh.close()
		return nil, err
	}
	if err := sh.lockDir(fsys); err != nil {
		sh.close()
		return nil, err
	}
	lock := filepath.Join(dir, lockName)
	if sh.flock, err = fsys.Lock(lock); err == nil {
		if sh.dirLock != nil && !sh.solo {
			// Others of this build have the store open, yet no process
			// holds this LOCK: it is not theirs.
			sh.close()
			return nil, sh.lostFile(lockName)
		}
		sh.first, sh.solo = true, true
	} else if !errors.Is(err, vfs.ErrLocked) {
		sh.close()
		return nil, err
	} else if sh.flock, err = fsys.LockShared(lock); err != nil {
		// An older build has the store open: it takes LOCK exclusive.
		sh.close()
		if !write && errors.Is(err, vfs.ErrLocked) {
			return &shared{}, nil
		}
		return nil, err
	}
	// Beside others of this build, shm is theirs or nothing: never
	// created, never grown.
	if sh.shm, err = fsys.MapShared(filepath.Join(dir, shmName), shmSize, sh.solo); err != nil {
		sh.close()
		if !sh.solo && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, vfs.ErrShortFile)) {
			return nil, sh.lostFile(shmName)
		}
		return nil, err
	}
	switch {
	case sh.first:
		// Whatever it holds is from a time no process had the store open
		// (before a power cut, or a restore of older files): nothing in it
		// is known.
		sh.shm.Clear()
		fallthrough
	case sh.solo:
		// (Beside processes of an older build only, which hold LOCK but
		// not the directory, and stamp nothing: this process's files are
		// theirs as far as it can tell.)
		if err := sh.stamp(); err != nil {
			sh.close()
			return nil, err
		}
	default:
		if err := sh.checkStamp(); err != nil {
			sh.close()
			return nil, err
		}
	}
	if write {
		ok, err := sh.locks.TryLock(lockBuild, false)
		if err != nil {
			sh.close()
			return nil, err
		}
		if !ok {
			// An older build's writer (it shares LOCK, but writes alone).
			pid := int(sh.shm.Uint64(shmPID).Load())
			sh.close()
			return nil, &vfs.LockError{Path: filepath.Join(dir, locksName), PID: pid}
		}
		sh.write = true
		if follows {
			if sh.index, err = sh.locks.TryLock(lockIndex, true); err != nil {
				sh.close()
				return nil, err
			}
		}
		if err := sh.takeSlot(follows); err != nil {
			sh.close()
			return nil, err
		}
	}
	return sh, nil
}

// lockDir takes the lock on the store directory: exclusive if no other
// process of this build has the store open (solo), else shared. One that
// holds it exclusive while this process holds lockInit cannot share the
// locks file with it: that open passed a lockInit of another file. A
// file system that cannot lock a directory (flock on a directory fails
// otherwise than by a conflict: NFS, say) leaves dirLock nil: LOCK alone
// tells then, as in the builds before the directory's lock, and a LOCK
// removed beside live processes goes unnoticed.
func (sh *shared) lockDir(fsys vfs.FS) error {
	var err error
	if sh.dirLock, err = fsys.LockDir(sh.dir, true); err == nil {
		sh.solo = true
		return nil
	}
	if !errors.Is(err, vfs.ErrLocked) {
		return nil
	}
	if sh.dirLock, err = fsys.LockDir(sh.dir, false); errors.Is(err, vfs.ErrLocked) {
		return sh.lostFile(locksName)
	}
	return err
}

// lostFile is the error of an open that found the coordination file name
// not to be the one the processes that have the store open hold.
func (sh *shared) lostFile(name string) error {
	return &store.CoordinationError{
		Path:   filepath.Join(sh.dir, name),
		Reason: "is not the file the processes that have the store open hold: it was removed or replaced while they had it open",
	}
}

// stamp records in shm the identities of the files this process holds.
// Called with lockInit and the directory's lock held exclusive.
func (sh *shared) stamp() error {
	ids, err := sh.fileIDs()
	if err != nil {
		return err
	}
	for i, id := range ids {
		sh.field(shmStampFiles + 16*i).Store(id.Dev)
		sh.field(shmStampFiles + 16*i + 8).Store(id.Ino)
	}
	sh.field(shmStamp).Store(shmStampValue)
	return nil
}

// checkStamp fails with a *CoordinationError unless shm carries a stamp
// that names the files this process opened.
func (sh *shared) checkStamp() error {
	if sh.field(shmStamp).Load() != shmStampValue {
		return sh.lostFile(shmName)
	}
	ids, err := sh.fileIDs()
	if err != nil {
		return err
	}
	// shm first: a copy of it carries the stamp, not the file's identity.
	for _, i := range []int{2, 1, 0} {
		if sh.field(shmStampFiles+16*i).Load() != ids[i].Dev || sh.field(shmStampFiles+16*i+8).Load() != ids[i].Ino {
			return sh.lostFile([]string{lockName, locksName, shmName}[i])
		}
	}
	return nil
}

// fileIDs returns the identities of the LOCK, locks and shm this process
// holds.
func (sh *shared) fileIDs() ([3]vfs.FileID, error) {
	var ids [3]vfs.FileID
	var err error
	if ids[0], err = sh.flock.ID(); err != nil {
		return ids, err
	}
	if ids[1], err = sh.locks.ID(); err != nil {
		return ids, err
	}
	ids[2] = sh.shm.ID()
	return ids, nil
}

// lost returns the *CoordinationError of a shm found cut (or wiped) under
// this process, nil while it is whole as far as it knows. No system call:
// an access that faulted tells, and what verify found before.
func (sh *shared) lost() error {
	if e := sh.lostErr.Load(); e != nil {
		return e
	}
	if sh.shm != nil && sh.shm.Lost() {
		return sh.lose("was cut short under the processes that have the store open (an access to it faulted)")
	}
	return nil
}

// verify returns lost, and with stat, first asks the file's size (one
// fstat): a cut that leaves part of its first page faults nothing, and
// the fields past the cut read as zeros. Callers read the fields they act
// on, then verify, then act: a cut after the fstat came after those
// reads (the OS sets the new size before it zeroes the page).
func (sh *shared) verify(stat bool) error {
	if sh.shm == nil {
		return nil
	}
	if err := sh.lost(); err != nil || !stat {
		return err
	}
	if n, err := sh.shm.Size(); err == nil && n < shmSize {
		return sh.lose(fmt.Sprintf("was cut to %d bytes under the processes that have the store open", n))
	}
	return sh.lost()
}

// wiped is verify for a process that read fields of shm that cannot hold
// what they do (the magic gone, durable in segment 0): cut, or written
// over.
func (sh *shared) wiped() error {
	if err := sh.verify(true); err != nil {
		return err
	}
	return sh.lose("lost the state the processes that have the store open keep in it (its fields were written over)")
}

// lose records why shm can no longer be trusted (the first reason stays)
// and returns it.
func (sh *shared) lose(reason string) error {
	sh.lostErr.CompareAndSwap(nil, &store.CoordinationError{Path: filepath.Join(sh.dir, shmName), Reason: reason})
	return sh.lostErr.Load()
}

// takeSlot takes a free follow slot (publishing position 0 until the open
// is done: a compaction then touches nothing), or, if there is none or
// the process cannot follow a compaction, lockFixed shared.
func (sh *shared) takeSlot(follows bool) error {
	for i := 0; follows && i < nSlots; i++ {
		ok, err := sh.locks.TryLock(lockSlot0+int64(i), true)
		if err != nil {
			return err
		}
		if ok {
			sh.slot = i
			sh.field(shmSlots + 8*i).Store(0)
			return nil
		}
	}
	return sh.locks.Lock(lockFixed, false)
}

// withoutIndex gives up what only a writing process that keeps the index
// holds: its follow slot, for lockFixed shared (waiting out a compaction
// in progress, which touches nothing while the slot still holds position
// 0), and lockIndex.
func (sh *shared) withoutIndex() error {
	if sh.slot >= 0 {
		if err := sh.locks.Lock(lockFixed, false); err != nil {
			return err
		}
		if err := sh.locks.Unlock(lockSlot0 + int64(sh.slot)); err != nil {
			return err
		}
		sh.slot = -1
	}
	if sh.index {
		if err := sh.locks.Unlock(lockIndex); err != nil {
			return err
		}
		sh.index = false
	}
	return nil
}

// tryCompact takes lockCompact, if no process holds it. Within a
// process, the DB's compactMu keeps two holders apart.
func (sh *shared) tryCompact() bool {
	if sh.locks == nil {
		return false
	}
	ok, err := sh.locks.TryLock(lockCompact, true)
	if err != nil || !ok {
		return false
	}
	sh.compacting.Store(true)
	return true
}

// endCompact releases lockCompact.
func (sh *shared) endCompact() {
	sh.compacting.Store(false)
	sh.locks.Unlock(lockCompact)
}

// indexWanted reports whether a rebuild of the index waits for the
// checkpointer to step down: shmIndexWant is set and its rebuild is alive
// (it holds lockWant). One that died is forgotten.
func (sh *shared) indexWanted() bool {
	if sh.field(shmIndexWant).Load() == 0 {
		return false
	}
	ok, err := sh.locks.TryLock(lockWant, false)
	if err != nil || !ok {
		return true
	}
	sh.locks.Unlock(lockWant)
	sh.field(shmIndexWant).Store(0) // its rebuild died
	return false
}

// publishFollow publishes this process's follow position in its slot.
func (sh *shared) publishFollow(p uint64) {
	if sh.slot >= 0 && sh.shm != nil {
		sh.field(shmSlots + 8*sh.slot).Store(p)
	}
}

// horizon returns the lowest follow position among the other writing
// processes that hold a slot, and own: what every writing process has
// fed its fold. Called by a compaction, which holds lockCompact and
// lockFixed (no writer without a slot is open).
func (sh *shared) horizon(own uint64) uint64 {
	h := own
	for i := range nSlots {
		if i == sh.slot {
			continue // (a lock held through this open file would be granted, and released by Unlock)
		}
		ok, err := sh.locks.TryLock(lockSlot0+int64(i), true)
		if err == nil && ok {
			sh.locks.Unlock(lockSlot0 + int64(i)) // free
			continue
		}
		// Held (or unknown: then as if held). A new holder stores 0 right
		// after taking it; until then the old value stands, and its open
		// notices a layout change (see open).
		h = min(h, sh.field(shmSlots+8*i).Load())
	}
	return h
}

// alone reports whether no other process writes the store now: it turns
// this process's shared lockWriters exclusive and back (another writer
// opening meanwhile waits that long). Only an optimization may rest on
// it: a writer may join right after.
func (sh *shared) alone() bool {
	if sh.locks == nil || !sh.write {
		return false
	}
	ok, err := sh.locks.TryLock(lockWriters, true)
	if err != nil || !ok {
		return false
	}
	sh.locks.TryLock(lockWriters, false)
	return true
}

// opened ends the open: the first opener lets others share LOCK (and
// one that was solo, the directory), and lockInit lets the next opener
// in.
func (sh *shared) opened() error {
	if sh.locks == nil {
		return nil
	}
	if sh.solo && sh.dirLock != nil {
		if err := sh.dirLock.Share(); err != nil {
			return err
		}
	}
	if sh.first {
		if err := sh.flock.Share(); err != nil {
			return err
		}
	}
	return sh.locks.Unlock(lockInit)
}

// live reports whether a writing process has set the shared log up since
// the store was first opened: tail and durable are known.
func (sh *shared) live() bool {
	if sh.shm != nil && sh.shm.Uint64(shmMagic).Load() == shmMagicValue &&
		sh.shm.Uint64(shmVersion).Load() == shmVersionValue {
		sh.sawLive.Store(true)
		return true
	}
	return false
}

// setUp publishes the shared log as a writing process's recovery left it:
// its tail at (seg, off), durable, with frames events frames in seg.
func (sh *shared) setUp(seg uint64, off int64, frames uint32) {
	p := position(seg, off)
	sh.shm.Uint64(shmTail).Store(p)
	sh.shm.Uint64(shmPlacing).Store(p)
	sh.shm.Uint64(shmDurable).Store(p)
	sh.shm.Uint64(shmFrames).Store(uint64(frames))
	sh.shm.Uint64(shmVersion).Store(shmVersionValue)
	sh.shm.Uint64(shmPID).Store(uint64(os.Getpid()))
	sh.shm.Uint64(shmMagic).Store(shmMagicValue)
}

// field returns the shared field at off.
func (sh *shared) field(off int) vfs.Word64 { return sh.shm.Uint64(off) }

// publish raises durable to p: everything before it is fdatasynced.
func (sh *shared) publish(p uint64) {
	raise(sh.field(shmDurable), p)
	sh.notify()
}

// notify wakes the processes waiting in waitSync: durable moved, or
// lockSync was released.
func (sh *shared) notify() {
	sh.shm.Uint32(shmSyncSeq).Add(1)
	if sh.shm.Uint32(shmSyncWaiters).Load() > 0 {
		sh.shm.Wake(shmSyncSeq)
	}
}

// syncSeq reads the word waitSync sleeps on: read it before looking at
// what to wait for, and pass it to waitSync.
func (sh *shared) syncSeq() uint32 { return sh.shm.Uint32(shmSyncSeq).Load() }

// waitSync sleeps until a notify after seq was read, or for at most d (a
// notifier may have died, or be of an older build, which does not
// notify).
func (sh *shared) waitSync(seq uint32, d time.Duration) {
	w := sh.shm.Uint32(shmSyncWaiters)
	w.Add(1)
	sh.shm.Wait(shmSyncSeq, seq, d)
	w.Add(^uint32(0))
}

// word is a 64-bit word for raise: a field of shm, or an atomic.Uint64.
type word interface {
	Load() uint64
	CompareAndSwap(old, new uint64) bool
}

// raise moves f up to p (compare-and-swap: it never goes down). A swap
// that fails while f still holds what it read (f only grows, so it never
// went and came back) is one of a lost shm, which never swaps: raise gives
// up (its caller's next look at shm finds it lost).
func raise(f word, p uint64) {
	for {
		old := f.Load()
		if old >= p || f.CompareAndSwap(old, p) || f.Load() == old {
			return
		}
	}
}

// durable returns the position a writing process published as durable,
// and false if none did (no writer since the store was first opened).
func (sh *shared) durable() (uint64, bool) {
	if !sh.live() {
		return 0, false
	}
	return sh.field(shmDurable).Load(), true
}

// followable returns an error if durable (d, ok: as durable returned it)
// cannot be what the writing processes published: shm was cut under this
// process. No system call: the log, once set up, stays so while any
// process has the store open, and durable is never in segment 0; a cut
// reads as zeros.
func (sh *shared) followable(d uint64, ok bool) error {
	if err := sh.lost(); err != nil {
		return err
	}
	if seg, _ := splitPosition(d); ok && seg != 0 || !ok && !sh.sawLive.Load() {
		return nil
	}
	return sh.wiped()
}

// The layout counter works as a seqlock: compaction makes it odd before
// it removes or rewrites a segment and even again once the files and the
// index agree. A process that saw it move (or odd) during an open or a
// read does it again.

// layoutBegin marks a change of the segments' layout in progress. Called
// with lockCompact held.
func (sh *shared) layoutBegin() { sh.bump() }

// layoutEnd marks it done.
func (sh *shared) layoutEnd() { sh.bump() }

// settleLayout, with lockCompact held, ends a change a compaction that
// died began and never ended, after its rewrite intent was settled.
func (sh *shared) settleLayout() {
	if sh.shm != nil && sh.write && sh.layout()%2 == 1 {
		sh.bump()
	}
}

// bump moves the layout counter on, with lockCompact held (no other
// process moves it meanwhile). The change is this process's own: its
// state follows it (the compaction moves its references itself), so the
// follower's layout moves along, if it was up to date; if not, the next
// catch-up relayouts for the other processes' changes before it.
func (sh *shared) bump() {
	if sh.shm == nil || !sh.write {
		return
	}
	sh.bumpMu.Lock()
	defer sh.bumpMu.Unlock()
	now := sh.field(shmLayout).Add(1)
	if sh.bumpHook != nil {
		sh.bumpHook()
	}
	if sh.seen != nil {
		sh.seen.CompareAndSwap(now-1, now)
	}
}

// layoutMoved reports whether the layout counter differs from seen (a
// follower's layout): whether another process removed or rewrote
// segments since the follower last looked. A bump of this process's own
// moves both in one step: seen between the two, it would pass for another
// process's change, and the relayout it sets off would close readers its
// compaction is reading.
func (sh *shared) layoutMoved(seen *atomic.Uint64) bool {
	sh.bumpMu.Lock()
	defer sh.bumpMu.Unlock()
	return sh.layout() != seen.Load()
}

// layout returns the layout counter.
func (sh *shared) layout() uint64 {
	if sh.shm == nil {
		return 0
	}
	return sh.field(shmLayout).Load()
}

// stableLayout returns the layout counter once no change is in progress
// (or the compaction that began one is gone: nothing changes the files
// then).
func (sh *shared) stableLayout() uint64 {
	for i := 0; ; i++ {
		v := sh.layout()
		if v%2 == 0 || sh.locks == nil || sh.compacting.Load() {
			// (The change in progress is this process's own: its
			// compaction keeps its reads right under the DB's layoutMu.)
			return v
		}
		if i%64 == 63 { // a compaction may have died mid-change
			if ok, err := sh.locks.TryLock(lockCompact, false); err == nil && ok {
				sh.locks.Unlock(lockCompact)
				return v
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// close releases everything, the locks with the rest.
func (sh *shared) close() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.closed = true
	var errs []error
	if sh.shm != nil {
		sh.watch.stop()
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
	if sh.dirLock != nil {
		errs = append(errs, sh.dirLock.Close())
		sh.dirLock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine: releasing the store's locks: %w", err)
	}
	return nil
}

package coord

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/vfs"
)

// Shared is what a DB holds of the store's coordination files: the LOCK
// flock, the byte locks and the shared memory. A read-only open of a store
// it cannot coordinate on (a read-only file system) has none of them and
// reads the segments as they are.
type Shared struct {
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
	lostErr atomic.Pointer[base.CoordinationError]
	// sawLive: this process saw the log set up in shm (which only a first
	// opener, with no other process left, ever undoes)
	sawLive atomic.Bool
	// write: this process writes the store (it holds LockBuild and
	// LockWriters shared)
	write bool
	// index: this process holds LockIndex: it checkpoints the index
	// (guarded by the DB's checkpoints lock once the store is open)
	index bool
	// compacting: this process holds LockCompact (tryCompact)
	compacting atomic.Bool
	// seen, of a writing DB, is its follower's layout: the layout counter
	// its state agrees with (see bump)
	seen *atomic.Uint64
	// bumpMu makes a bump of the layout counter and of seen one step for
	// layoutMoved
	bumpMu sync.Mutex
	// slot: the shm slot this writing process publishes its follow
	// position in, -1 if it has none (it holds LockFixed shared instead)
	slot int
	// watch wakes this process's Handle.Waits when a sync publishes
	watch durableWatch
	// Knobs are a test's hooks and overrides; the engine sets them from
	// its DB's testing knobs right after Join
	Knobs Knobs
}

// Knobs are a test's hooks and overrides.
type Knobs struct {
	// Bump, if set, runs in a bump of the layout counter between the
	// counter's move and the follower's.
	Bump func()
	// WatchPoll, if set, bounds one sleep of the watching goroutine
	// instead of watchPoll; set before the goroutine can start.
	WatchPoll time.Duration
}

// First reports whether no other process had the store open when this
// one opened it (it recovers the store; shm was cleared).
func (sh *Shared) First() bool { return sh.first }

// Writes reports whether this process writes the store (it holds
// LockBuild and LockWriters shared).
func (sh *Shared) Writes() bool { return sh.write }

// Mapped reports whether this process maps shm (a read-only open of a
// store it cannot coordinate on does not).
func (sh *Shared) Mapped() bool { return sh.shm != nil }

// Slot is the follow slot this writing process publishes its follow
// position in, -1 if it has none (it holds LockFixed shared instead).
func (sh *Shared) Slot() int { return sh.slot }

// SetSeen, of a writing process, names its follower's layout: the layout
// counter its state agrees with, which its own bumps move along.
func (sh *Shared) SetSeen(seen *atomic.Uint64) { sh.seen = seen }

// HoldsIndex reports whether this process holds LockIndex: it
// checkpoints the index. (The engine's DB.checkpoints guards it and TakeIndex and
// ReleaseIndex once the store is open.)
func (sh *Shared) HoldsIndex() bool { return sh.index }

// TakeIndex takes LockIndex without waiting, and reports whether it did.
func (sh *Shared) TakeIndex() (bool, error) {
	ok, err := sh.TryLock(LockIndex, true)
	if ok && err == nil {
		sh.index = true
	}
	return ok, err
}

// ReleaseIndex releases LockIndex.
func (sh *Shared) ReleaseIndex() error {
	if err := sh.Unlock(LockIndex); err != nil {
		return err
	}
	sh.index = false
	return nil
}

// Lock takes byte l of the locks file, waiting for it.
func (sh *Shared) Lock(l Lock, exclusive bool) error { return sh.locks.Lock(int64(l), exclusive) }

// TryLock takes byte l without waiting, and reports whether it did
// (vfs.Locks.TryLock).
func (sh *Shared) TryLock(l Lock, exclusive bool) (bool, error) {
	return sh.locks.TryLock(int64(l), exclusive)
}

// Unlock releases byte l.
func (sh *Shared) Unlock(l Lock) error { return sh.locks.Unlock(int64(l)) }

// Word returns word w of shm.
func (sh *Shared) Word(w Word) vfs.Word64 { return sh.shm.Uint64(int(w)) }

// Waiters returns how many of the store's processes' goroutines sleep in
// WaitSync now.
func (sh *Shared) Waiters() uint32 { return sh.shm.Uint32(syncWaiters).Load() }

// Join takes this process's place among those that have the store in dir
// open: for a write open LockWriters (shared: waiting out a compaction
// without an index, which runs alone) and LockBuild; then LockInit
// (released by opened, once the recovery is done), the directory's lock
// and LOCK (exclusive if no process has the store open: the first opener;
// else shared; an older build holds LOCK exclusive); then, for a write
// open, a slot if it follows compactions (follows: it has an index to
// reload frame offsets from), else LockFixed shared (waiting out a
// compaction in progress).
//
// A process that joins others of this build (their lock on the directory
// says they are there) proves that it opened the files they hold: shm
// must exist whole (it is never created or grown beside them) and carry
// the stamp of its first opener, naming the LOCK, locks and shm it
// opened. Else the open fails with a *CoordinationError
// (ErrCoordinationLost) and changes nothing (docs/MULTIPROCESS.md, Many
// processes, "When the coordination files are removed or cut").
func Join(fsys vfs.FS, dir string, write, follows bool) (*Shared, error) {
	sh := &Shared{slot: -1, dir: dir}
	sh.watch.sh = sh
	var err error
	if sh.locks, err = fsys.OpenLocks(filepath.Join(dir, LocksFile)); err != nil {
		if !write && !noRoom(err) {
			return &Shared{}, nil // nothing to coordinate with: read what is there
		}
		// (A full disk is no read-only store: a writer may open it as
		// soon as there is room, beside a reader that coordinates with
		// nobody.)
		return nil, err
	}
	if write {
		if err := sh.Lock(LockWriters, false); err != nil {
			sh.Close()
			return nil, err
		}
	}
	if err := sh.Lock(LockInit, true); err != nil {
		sh.Close()
		return nil, err
	}
	if err := sh.lockDir(fsys); err != nil {
		sh.Close()
		return nil, err
	}
	lock := filepath.Join(dir, LockFile)
	if sh.flock, err = fsys.Lock(lock); err == nil {
		if sh.dirLock != nil && !sh.solo {
			// Others of this build have the store open, yet no process
			// holds this LOCK: it is not theirs.
			sh.Close()
			return nil, sh.lostFile(LockFile)
		}
		sh.first, sh.solo = true, true
	} else if !errors.Is(err, vfs.ErrLocked) {
		sh.Close()
		return nil, err
	} else if sh.flock, err = fsys.LockShared(lock); err != nil {
		// An older build has the store open: it takes LOCK exclusive.
		sh.Close()
		if !write && errors.Is(err, vfs.ErrLocked) {
			return &Shared{}, nil
		}
		return nil, err
	}
	// Beside others of this build, shm is theirs or nothing: never
	// created, never grown.
	if sh.shm, err = fsys.MapShared(filepath.Join(dir, ShmFile), ShmSize, sh.solo); err != nil {
		sh.Close()
		if !sh.solo && errors.Is(err, vfs.ErrShortFile) {
			// (Only a first opener makes or grows shm, alone: one whose
			// allocation failed left it short, and the next opener, alone
			// too, grows it. Beside others, short is cut.)
			return nil, &base.CoordinationError{
				Path:   filepath.Join(dir, ShmFile),
				Reason: fmt.Sprintf("is shorter than %d bytes while other processes have the store open (they hold the lock on its directory): it was cut, or replaced, under them", ShmSize),
			}
		}
		if !sh.solo && errors.Is(err, fs.ErrNotExist) {
			return nil, sh.lostFile(ShmFile)
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
			sh.Close()
			return nil, err
		}
		if sh.shm.Lost() {
			// No other process of this build has the store open: nobody
			// cut it. Its page could not be had (MapShared allocated it,
			// but a file system without fallocate leaves a hole a full
			// disk cannot fill).
			sh.Close()
			return nil, &os.PathError{Op: "set up", Path: filepath.Join(dir, ShmFile), Err: ErrShmUnbacked}
		}
	default:
		if err := sh.checkStamp(); err != nil {
			sh.Close()
			return nil, err
		}
	}
	if write {
		ok, err := sh.TryLock(LockBuild, false)
		if err != nil {
			sh.Close()
			return nil, err
		}
		if !ok {
			// An older build's writer (it shares LOCK, but writes alone).
			pid := int(sh.Word(PID).Load())
			sh.Close()
			return nil, &vfs.LockError{Path: filepath.Join(dir, LocksFile), PID: pid}
		}
		sh.write = true
		if follows {
			if sh.index, err = sh.TryLock(LockIndex, true); err != nil {
				sh.Close()
				return nil, err
			}
		}
		if err := sh.takeSlot(follows); err != nil {
			sh.Close()
			return nil, err
		}
	}
	return sh, nil
}

// lockDir takes the lock on the store directory: exclusive if no other
// process of this build has the store open (solo), else shared. One that
// holds it exclusive while this process holds LockInit cannot share the
// locks file with it: that open passed a LockInit of another file. A
// file system that cannot lock a directory (flock on a directory fails
// otherwise than by a conflict: NFS, say) leaves dirLock nil: LOCK alone
// tells then, as in the builds before the directory's lock, and a LOCK
// removed beside live processes goes unnoticed.
func (sh *Shared) lockDir(fsys vfs.FS) error {
	var err error
	if sh.dirLock, err = fsys.LockDir(sh.dir, true); err == nil {
		sh.solo = true
		return nil
	}
	if !errors.Is(err, vfs.ErrLocked) {
		return nil
	}
	if sh.dirLock, err = fsys.LockDir(sh.dir, false); errors.Is(err, vfs.ErrLocked) {
		return sh.lostFile(LocksFile)
	}
	return err
}

// ErrShmUnbacked: an access to shm faulted while the process that
// opened the store alone set it up: the file system could not give it
// the page (a full disk, where it cannot allocate ahead).
var ErrShmUnbacked = errors.New("the file system could not back its page while no other process of this build had the store open (a full disk?)")

// noRoom reports whether err is a full disk (or quota): a coordination
// file that could not be made or grown for want of room.
func noRoom(err error) bool { return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) }

// lostFile is the error of an open that found the coordination file name
// not to be the one the processes that have the store open hold.
func (sh *Shared) lostFile(name string) error {
	return &base.CoordinationError{
		Path:   filepath.Join(sh.dir, name),
		Reason: "is not the file the processes that have the store open hold: it was removed or replaced while they had it open",
	}
}

// stamp records in shm the identities of the files this process holds.
// Called with LockInit and the directory's lock held exclusive.
func (sh *Shared) stamp() error {
	ids, err := sh.fileIDs()
	if err != nil {
		return err
	}
	for i, id := range ids {
		sh.Word(stampFiles + Word(16*i)).Store(id.Dev)
		sh.Word(stampFiles + Word(16*i+8)).Store(id.Ino)
	}
	sh.Word(Stamp).Store(stampValue)
	return nil
}

// checkStamp fails with a *CoordinationError unless shm carries a stamp
// that names the files this process opened.
func (sh *Shared) checkStamp() error {
	if sh.Word(Stamp).Load() != stampValue {
		if err := sh.Lost(); err != nil {
			return err // its page is gone: cut under the processes there
		}
		return sh.lostFile(ShmFile)
	}
	ids, err := sh.fileIDs()
	if err != nil {
		return err
	}
	// shm first: a copy of it carries the stamp, not the file's identity.
	for _, i := range []int{2, 1, 0} {
		if sh.Word(stampFiles+Word(16*i)).Load() != ids[i].Dev || sh.Word(stampFiles+Word(16*i+8)).Load() != ids[i].Ino {
			return sh.lostFile([]string{LockFile, LocksFile, ShmFile}[i])
		}
	}
	return nil
}

// fileIDs returns the identities of the LOCK, locks and shm this process
// holds.
func (sh *Shared) fileIDs() ([3]vfs.FileID, error) {
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

// Lost returns the *CoordinationError of a shm found cut (or wiped) under
// this process, nil while it is whole as far as it knows. No system call:
// an access that faulted tells, and what Verify found before.
func (sh *Shared) Lost() error {
	if e := sh.lostErr.Load(); e != nil {
		return e
	}
	if sh.shm != nil && sh.shm.Lost() {
		return sh.lose("was cut short under the processes that have the store open (an access to it faulted)")
	}
	return nil
}

// Verify returns lost, and with stat, first asks the file's size (one
// fstat): a cut that leaves part of its first page faults nothing, and
// the fields past the cut read as zeros. Callers read the fields they act
// on, then verify, then act: a cut after the fstat came after those
// reads (the OS sets the new size before it zeroes the page).
func (sh *Shared) Verify(stat bool) error {
	if sh.shm == nil {
		return nil
	}
	if err := sh.Lost(); err != nil || !stat {
		return err
	}
	if n, err := sh.shm.Size(); err == nil && n < ShmSize {
		return sh.lose(fmt.Sprintf("was cut to %d bytes under the processes that have the store open", n))
	}
	return sh.Lost()
}

// Wiped is verify for a process that read fields of shm that cannot hold
// what they do (the magic gone, durable in segment 0): cut, or written
// over.
func (sh *Shared) Wiped() error {
	if err := sh.Verify(true); err != nil {
		return err
	}
	return sh.lose("lost the state the processes that have the store open keep in it (its fields were written over)")
}

// lose records why shm can no longer be trusted (the first reason stays)
// and returns it.
func (sh *Shared) lose(reason string) error {
	sh.lostErr.CompareAndSwap(nil, &base.CoordinationError{Path: filepath.Join(sh.dir, ShmFile), Reason: reason})
	return sh.lostErr.Load()
}

// takeSlot takes a free follow slot (publishing position 0 until the open
// is done: a compaction then touches nothing), or, if there is none or
// the process cannot follow a compaction, LockFixed shared.
func (sh *Shared) takeSlot(follows bool) error {
	for i := 0; follows && i < Slots; i++ {
		ok, err := sh.TryLock(SlotLock(i), true)
		if err != nil {
			return err
		}
		if ok {
			sh.slot = i
			sh.Word(SlotWord(i)).Store(0)
			return nil
		}
	}
	return sh.Lock(LockFixed, false)
}

// WithoutIndex gives up what only a writing process that keeps the index
// holds: its follow slot, for LockFixed shared (waiting out a compaction
// in progress, which touches nothing while the slot still holds position
// 0), and LockIndex.
func (sh *Shared) WithoutIndex() error {
	if sh.slot >= 0 {
		if err := sh.Lock(LockFixed, false); err != nil {
			return err
		}
		if err := sh.Unlock(SlotLock(sh.slot)); err != nil {
			return err
		}
		sh.slot = -1
	}
	if sh.index {
		if err := sh.Unlock(LockIndex); err != nil {
			return err
		}
		sh.index = false
	}
	return nil
}

// TryCompact takes LockCompact, if no process holds it. Within a
// process, the DB's compaction lock keeps two holders apart.
func (sh *Shared) TryCompact() bool {
	if sh.locks == nil {
		return false
	}
	ok, err := sh.TryLock(LockCompact, true)
	if err != nil || !ok {
		return false
	}
	sh.compacting.Store(true)
	return true
}

// CheckWaits reports whether a check waits to keep compactions out (it
// holds LockCheck shared while it waits for LockCompact): a compaction
// that has just taken LockCompact gives it up instead of starting, so that
// the check gets it once the compaction in progress ends, however busy
// the compactors are.
func (sh *Shared) CheckWaits() bool {
	ok, err := sh.TryLock(LockCheck, true)
	if err != nil || !ok {
		return true
	}
	sh.Unlock(LockCheck)
	return false
}

// KeepCompactionsOut takes LockCompact for a check (which keeps it until
// it closes), waiting at most d for the compaction in progress to end; it
// reports whether it did. Meanwhile it holds LockCheck shared: compactions
// that begin give way (CheckWaits).
func (sh *Shared) KeepCompactionsOut(d time.Duration) bool {
	if sh.locks == nil {
		return false
	}
	deadline := time.Now().Add(d)
	for {
		ok, err := sh.TryLock(LockCheck, false)
		if err != nil {
			return false
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return false // (a compaction looks at it this instant, every time)
		}
		time.Sleep(time.Millisecond)
	}
	defer sh.Unlock(LockCheck)
	for !sh.TryCompact() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// EndCompact releases LockCompact.
func (sh *Shared) EndCompact() {
	sh.compacting.Store(false)
	sh.Unlock(LockCompact)
}

// IndexWanted reports whether a rebuild of the index waits for the
// checkpointer to step down: IndexWant is set and its rebuild is alive
// (it holds LockWant). One that died is forgotten.
func (sh *Shared) IndexWanted() bool {
	if sh.Word(IndexWant).Load() == 0 {
		return false
	}
	ok, err := sh.TryLock(LockWant, false)
	if err != nil || !ok {
		return true
	}
	sh.Unlock(LockWant)
	sh.Word(IndexWant).Store(0) // its rebuild died
	return false
}

// PublishFollow publishes this process's follow position in its slot.
func (sh *Shared) PublishFollow(p uint64) {
	if sh.slot >= 0 && sh.shm != nil {
		sh.Word(SlotWord(sh.slot)).Store(p)
	}
}

// Horizon returns the lowest follow position among the other writing
// processes that hold a slot, and own: what every writing process has
// fed its fold. Called by a compaction, which holds LockCompact and
// LockFixed (no writer without a slot is open).
func (sh *Shared) Horizon(own uint64) uint64 {
	h := own
	for i := range Slots {
		if i == sh.slot {
			continue // (a lock held through this open file would be granted, and released by Unlock)
		}
		ok, err := sh.TryLock(SlotLock(i), true)
		if err == nil && ok {
			sh.Unlock(SlotLock(i)) // free
			continue
		}
		// Held (or unknown: then as if held). A new holder stores 0 right
		// after taking it; until then the old value stands, and its open
		// notices a layout change (see open).
		h = min(h, sh.Word(SlotWord(i)).Load())
	}
	return h
}

// Alone reports whether no other process writes the store now: it turns
// this process's shared LockWriters exclusive and back (another writer
// opening meanwhile waits that long). Only an optimization may rest on
// it: a writer may join right after.
func (sh *Shared) Alone() bool {
	if sh.locks == nil || !sh.write {
		return false
	}
	ok, err := sh.TryLock(LockWriters, true)
	if err != nil || !ok {
		return false
	}
	sh.TryLock(LockWriters, false)
	return true
}

// Opened ends the open: the first opener lets others share LOCK (and
// one that was solo, the directory), and LockInit lets the next opener
// in.
func (sh *Shared) Opened() error {
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
	return sh.Unlock(LockInit)
}

// Live reports whether a writing process has set the shared log up since
// the store was first opened: tail and durable are known.
func (sh *Shared) Live() bool {
	if sh.shm != nil && sh.Word(Magic).Load() == MagicValue &&
		sh.Word(Version).Load() == VersionValue {
		sh.sawLive.Store(true)
		return true
	}
	return false
}

// SetUp publishes the shared log as a writing process's recovery left it:
// its tail at (seg, off), durable, with frames events frames in seg.
func (sh *Shared) SetUp(seg uint64, off int64, frames uint32) {
	p := Position(seg, off)
	sh.Word(Tail).Store(p)
	sh.Word(Placing).Store(p)
	sh.Word(Durable).Store(p)
	sh.Word(Frames).Store(uint64(frames))
	sh.Word(Version).Store(VersionValue)
	sh.Word(PID).Store(uint64(os.Getpid()))
	sh.Word(Magic).Store(MagicValue)
}

// Publish raises durable to p: everything before it is fdatasynced.
func (sh *Shared) Publish(p uint64) {
	Raise(sh.Word(Durable), p)
	sh.Notify()
}

// Notify wakes the processes waiting in WaitSync: durable moved, or
// LockSync was released.
func (sh *Shared) Notify() {
	sh.shm.Uint32(syncSeq).Add(1)
	if sh.shm.Uint32(syncWaiters).Load() > 0 {
		sh.shm.Wake(syncSeq)
	}
}

// SyncSeq reads the word waitSync sleeps on: read it before looking at
// what to wait for, and pass it to WaitSync.
func (sh *Shared) SyncSeq() uint32 { return sh.shm.Uint32(syncSeq).Load() }

// WaitSync sleeps until a notify after seq was read, or for at most d (a
// notifier may have died, or be of an older build, which does not
// notify).
func (sh *Shared) WaitSync(seq uint32, d time.Duration) {
	w := sh.shm.Uint32(syncWaiters)
	w.Add(1)
	sh.shm.Wait(syncSeq, seq, d)
	w.Add(^uint32(0))
}

// Raise moves f up to p (compare-and-swap: it never goes down). A swap
// that fails while f still holds what it read (f only grows, so it never
// went and came back) is one of a lost shm, which never swaps: Raise gives
// up (its caller's next look at shm finds it lost).
func Raise(f vfs.Word64, p uint64) {
	for {
		old := f.Load()
		if old >= p || f.CompareAndSwap(old, p) || f.Load() == old {
			return
		}
	}
}

// Durable returns the position a writing process published as durable,
// and false if none did (no writer since the store was first opened).
func (sh *Shared) Durable() (uint64, bool) {
	if !sh.Live() {
		return 0, false
	}
	return sh.Word(Durable).Load(), true
}

// Followable returns an error if durable (d, ok: as durable returned it)
// cannot be what the writing processes published: shm was cut under this
// process. No system call: the log, once set up, stays so while any
// process has the store open, and durable is never in segment 0; a cut
// reads as zeros.
func (sh *Shared) Followable(d uint64, ok bool) error {
	if err := sh.Lost(); err != nil {
		return err
	}
	if seg, _ := SplitPosition(d); ok && seg != 0 || !ok && !sh.sawLive.Load() {
		return nil
	}
	return sh.Wiped()
}

// The layout counter works as a seqlock: compaction makes it odd before
// it removes or rewrites a segment and even again once the files and the
// index agree. A process that saw it move (or odd) during an open or a
// read does it again.

// LayoutBegin marks a change of the segments' layout in progress. Called
// with LockCompact held.
func (sh *Shared) LayoutBegin() { sh.bump() }

// LayoutEnd marks it done.
func (sh *Shared) LayoutEnd() { sh.bump() }

// SettleLayout, with LockCompact held, ends a change a compaction that
// died began and never ended, after its rewrite intent was settled.
func (sh *Shared) SettleLayout() {
	if sh.shm != nil && sh.write && sh.Layout()%2 == 1 {
		sh.bump()
	}
}

// bump moves the layout counter on, with LockCompact held (no other
// process moves it meanwhile). The change is this process's own: its
// state follows it (the compaction moves its references itself), so the
// follower's layout moves along, if it was up to date; if not, the next
// catch-up relayouts for the other processes' changes before it.
func (sh *Shared) bump() {
	if sh.shm == nil || !sh.write {
		return
	}
	sh.bumpMu.Lock()
	defer sh.bumpMu.Unlock()
	now := sh.Word(Layout).Add(1)
	if sh.Knobs.Bump != nil {
		sh.Knobs.Bump()
	}
	if sh.seen != nil {
		sh.seen.CompareAndSwap(now-1, now)
	}
}

// LayoutMoved reports whether the layout counter differs from seen (a
// follower's layout): whether another process removed or rewrote
// segments since the follower last looked. A bump of this process's own
// moves both in one step: seen between the two, it would pass for another
// process's change, and the relayout it sets off would close readers its
// compaction is reading.
func (sh *Shared) LayoutMoved(seen *atomic.Uint64) bool {
	sh.bumpMu.Lock()
	defer sh.bumpMu.Unlock()
	return sh.Layout() != seen.Load()
}

// Layout returns the layout counter.
func (sh *Shared) Layout() uint64 {
	if sh.shm == nil {
		return 0
	}
	return sh.Word(Layout).Load()
}

// StableLayout returns the layout counter once no change is in progress
// (or the compaction that began one is gone: nothing changes the files
// then).
func (sh *Shared) StableLayout() uint64 {
	for i := 0; ; i++ {
		v := sh.Layout()
		if v%2 == 0 || sh.locks == nil || sh.compacting.Load() {
			// (The change in progress is this process's own: its
			// compaction keeps its reads right under the DB's layoutMu.)
			return v
		}
		if i%64 == 63 { // a compaction may have died mid-change
			if ok, err := sh.TryLock(LockCompact, false); err == nil && ok {
				sh.Unlock(LockCompact)
				return v
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// Close releases everything, the locks with the rest.
func (sh *Shared) Close() error {
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

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// A closing process that is the last to have the store open cuts the
// preallocated room off the active segment: the zeros past its last
// frame, which the growth in place wrote ahead of the placements (up to
// half of the file), and an empty segment prepared for a roll (its
// preallocated zeros; the next first open removes it anyway). What a user
// sees with du after the last close is then the frames, not the room
// (docs/DURABILITY.md, Preallocation, "Trimmed at the last close"). The next
// write open's placements grow the file again, in place.
//
// It trims only what it proves is past every frame and that no other
// process can use:
//   - before the coordination is released: LockInit (on a file
//     description of its own) keeps every opener out until the trim is
//     over; no other process writes (LockWriters, Alone); the log is live
//     and clean (no placement or seal cut short: Placing at Tail), so
//     Tail, which this process read last, is where the frames end;
//   - after it is released (this process's segment maps closed): the
//     store's directory lock and LOCK, taken exclusive on new file
//     descriptions, prove that no process of any build has it open, so
//     none maps the file being cut;
//   - the first bytes past Tail are zeros (a frame never starts with
//     one).
//
// A truncation is the only change, to a length past every frame: a power
// cut or a kill before, during or after it leaves the file long (zeros
// past the frames: a preallocated tail) or cut at the tail, and an open
// reads either.

// trimProbe is how many bytes past the tail the trim checks for zeros.
const trimProbe = 64 << 10

// trimPlan is what Close found, before releasing the coordination, that
// allows a trim: the openers kept out (lockInit) and where the frames end.
type trimPlan struct {
	locks vfs.Locks // a file description of the locks file holding LockInit
	tail  uint64
}

// planTrim returns the plan of a trim at this close, or nil if this
// process may not be the last to have the store open or the log's end is
// not known. Called by Close once everything is synced and the index
// checkpointed, before closeFiles.
func (db *DB) planTrim() *trimPlan {
	if db.opts.ReadOnly || db.opts.NoPreallocate || db.log == nil {
		return nil
	}
	sh := db.shared
	if !sh.Mapped() || !sh.Writes() || db.poisonErr() != nil {
		return nil
	}
	locks, err := db.opts.FS.OpenLocks(filepath.Join(db.dir, coord.LocksFile))
	if err != nil {
		return nil
	}
	if ok, err := locks.TryLock(int64(coord.LockInit), true); err != nil || !ok {
		locks.Close() // (an opener is in its open)
		return nil
	}
	if db.knobs.trimPlanned != nil {
		db.knobs.trimPlanned()
	}
	// No other writer now, and none joins (LockInit): the tail read after
	// this is final.
	if sh.Verify(true) != nil || !sh.Alone() || !sh.Live() {
		locks.Close()
		return nil
	}
	tail := sh.Word(coord.Tail).Load()
	if sh.Word(coord.Placing).Load() != tail {
		locks.Close()
		return nil
	}
	return &trimPlan{locks: locks, tail: tail}
}

// trim carries plan out, once closeFiles released this process's hold of
// the store. Nothing in it is needed by anyone: a failure is only logged.
func (db *DB) trim(plan *trimPlan) {
	defer plan.locks.Close()
	if dl, err := db.opts.FS.LockDir(db.dir, true); err == nil {
		defer dl.Close()
	} else if errors.Is(err, vfs.ErrLocked) {
		return // another process of this build has the store open
	}
	// (A file system that cannot lock a directory: LOCK alone tells.)
	fl, err := db.opts.FS.Lock(filepath.Join(db.dir, coord.LockFile))
	if err != nil {
		return // another process has it open
	}
	defer fl.Close()
	seg, off := coord.SplitPosition(plan.tail)
	if err := db.trimSegment(seg, off); err != nil {
		db.opts.Logger.Warn("engine: trimming the active segment's room at close", "error", err)
		return
	}
	// A segment prepared for the roll to come holds no frame (the tail
	// is before it): its room goes as well.
	if err := db.trimSegment(seg+1, segment.HeaderSize); err != nil {
		db.opts.Logger.Warn("engine: trimming the prepared segment at close", "error", err)
	}
	if db.index != nil {
		db.compactIndex(db.index.path)
	}
}

// compactIndexMax is the largest index file the last close compacts: a
// copy of it is read and written at close, which a small store pays for
// in milliseconds and a store of a million sessions (520 MB of index)
// would in seconds.
const compactIndexMax = 32 << 20

// compactIndex rewrites the index file at path without the free pages
// and the half-full ones that its checkpoints' commits leave
// (index.Compact), if it is no larger than compactIndexMax. The index is
// a cache: a failure is only logged (the file stays as it was).
func (db *DB) compactIndex(path string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > compactIndexMax {
		return
	}
	if _, _, err := index.Compact(path); err != nil {
		db.opts.Logger.Warn("engine: compacting the index at close", "error", err)
	}
}

// trimSegment cuts segment seg's file (if it exists) to off, which is
// past its last frame, if the file is longer and zeros follow off.
func (db *DB) trimSegment(seg uint64, off int64) error {
	path := filepath.Join(db.dir, segment.Name(seg))
	f, err := db.opts.FS.OpenReadWrite(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil || size <= off || off < segment.HeaderSize {
		return err
	}
	probe := make([]byte, min(size-off, trimProbe))
	if _, err := f.ReadAt(probe, off); err != nil {
		return err
	}
	if slices.ContainsFunc(probe, func(b byte) bool { return b != 0 }) {
		return fmt.Errorf("%s: bytes other than zeros past its tail at %d: left as it is", path, off)
	}
	if err := f.Truncate(off); err != nil {
		return err
	}
	if db.knobs.trimmed != nil {
		db.knobs.trimmed(seg)
	}
	return f.Sync()
}

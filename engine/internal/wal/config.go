package wal

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// Config is what a Log needs from the DB that writes through it.
type Config struct {
	FS  vfs.FS
	Dir string // the store's directory, where its segments are
	// SegmentSize is the size at which segment id is sealed.
	SegmentSize func(id uint64) int64
	// CreateOptions are the options of the creation of segment id.
	CreateOptions func(id uint64) segment.CreateOptions
	// NoPreallocate: no growth of the active segment ahead of its tail;
	// PreallocateStart: the least a growth adds.
	NoPreallocate    bool
	PreallocateStart int64

	// Shared is the coordination with the other processes that write
	// the store.
	Shared Shared
	// AppendMu is held while this process places frames (with
	// LockAppend across processes); the DB takes it to wait out a
	// placement of this process.
	AppendMu sync.Locker
	// Locker is held, once a placement's frames are written, around
	// OnWrite and the placements' Register calls: the DB's lock over
	// what it knows of the frames.
	Locker sync.Locker
	// OnWrite is called under Locker for each frame written by this
	// process (its segment, offset and size), in log order, before any
	// Register of it.
	OnWrite func(seg uint64, off, size int64)

	// Poisoned returns the error that poisoned the store, or nil;
	// Poison poisons it with err (the first error wins) and returns
	// what Poisoned then returns. A failed fdatasync poisons.
	Poisoned func() error
	Poison   func(err error) error

	// Written counts the frames of one write (t is reset after);
	// Fsynced counts one fdatasync of the active segment.
	Written func(t *Tally)
	Fsynced func()
	// Kick is sent to (without blocking) when the active segment is to
	// be grown or its successor prepared: the DB's preparer then calls
	// Grow and PrepareNext.
	Kick chan<- struct{}
}

// Lock names one of the cross-process byte locks the log takes.
type Lock int

const (
	LockAppend  Lock = iota // held while a process places frames at the tail
	LockPrepare             // held while a process creates the next segment
	LockSync                // held while a process fdatasyncs the active segment
)

// Word names one of the shared-memory words the log reads and moves.
type Word int

const (
	Tail    Word = iota // position after the last placed frame; moved under LockAppend
	Placing             // end of the placement in progress; past Tail if its placer died mid-write
	Durable             // position below which everything is fdatasynced
	Frames              // events frames in the active segment (its seal counts them)
)

// Shared is the part of the store's cross-process coordination the log
// uses: byte locks (exclusive), shared words, and the wake-ups of syncs.
type Shared interface {
	Lock(l Lock) error
	TryLock(l Lock) (bool, error)
	Unlock(l Lock)
	Word(w Word) vfs.Word64
	// Verify returns an error (a *CoordinationError) if the shared
	// memory was found cut or wiped, asking its size first (one fstat);
	// Lost is the same without the fstat; Wiped is for a process that
	// read words that cannot hold what they do (no segment is 0).
	Verify() error
	Lost() error
	Wiped() error
	// Publish raises Durable to p and wakes the processes in WaitSync;
	// Notify only wakes them (LockSync was released).
	Publish(p uint64)
	Notify()
	// SyncSeq reads the word WaitSync sleeps on; WaitSync sleeps until
	// a Notify after seq was read, or for at most d.
	SyncSeq() uint32
	WaitSync(seq uint32, d time.Duration)
}

// Tally adds up the frames of one write before they are counted at once
// (Config.Written).
type Tally struct {
	Events, Bytes uint64
	Codec         [5]struct{ Frames, Raw, Stored uint64 } // by segment.Codec
}

// Add counts e.
func (t *Tally) Add(e *segment.Encoded) {
	t.Events += uint64(e.Count())
	t.Bytes += uint64(e.Size())
	if c := e.Codec(); int(c) < len(t.Codec) {
		t.Codec[c].Frames++
		t.Codec[c].Raw += uint64(e.RawLen())
		t.Codec[c].Stored += uint64(e.StoredLen())
	}
}

// position packs a segment ID and an offset in it into one ordered word
// (the encoding of the shared words: the same as the engine's).
func position(seg uint64, off int64) uint64 { return seg<<40 | uint64(off) }

// splitPosition is the inverse of position.
func splitPosition(p uint64) (seg uint64, off int64) { return p >> 40, int64(p & (1<<40 - 1)) }

// raise moves f up to p (compare-and-swap: it never goes down).
func raise(f *atomic.Uint64, p uint64) {
	for {
		old := f.Load()
		if old >= p || f.CompareAndSwap(old, p) || f.Load() == old {
			return
		}
	}
}

func (a *Log) segPath(id uint64) string { return filepath.Join(a.cfg.Dir, segment.Name(id)) }

// PlacedEnd returns the position after the last frame this process
// placed.
func (a *Log) PlacedEnd() uint64 { return a.placedEnd.Load() }

// SyncPlaced returns once every frame this process placed is durable.
func (a *Log) SyncPlaced() error { return a.Sync(a.placedEnd.Load()) }

// SetAlone records whether another process wrote the store when last
// looked: alone, syncs skip LockSync, which only groups the fdatasyncs
// of several processes.
func (a *Log) SetAlone(alone bool) { a.alone.Store(alone) }

// Alone returns what SetAlone last recorded.
func (a *Log) Alone() bool { return a.alone.Load() }

// SetTailVersion sets the format version the log takes the active
// segment to have until its next placement (tests).
func (a *Log) SetTailVersion(v int) { a.tailVersion.Store(int32(v)) }

// SyncWaiters returns how many syncs of this process wait for the one in
// progress.
func (a *Log) SyncWaiters() int {
	a.syncer.Lock()
	defer a.syncer.Unlock()
	return a.syncer.waiting
}

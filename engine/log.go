package engine

import (
	"time"

	"github.com/seglog/seglog/engine/internal/wal"
	"github.com/seglog/seglog/vfs"
)

// newLog returns the log db's frames are placed in (package wal: the
// placement queue, rolls, preparation and growth, group fdatasync), wired
// to db's coordination, lock, poison and metrics.
func newLog(db *DB) *wal.Log {
	return wal.New(wal.Config{
		FS:               db.opts.FS,
		Dir:              db.dir,
		SegmentSize:      db.opts.segmentSize,
		CreateOptions:    db.opts.createOptions,
		NoPreallocate:    db.opts.NoPreallocate,
		PreallocateStart: db.opts.PreallocateStart,
		Shared:           walShared{db.shared},
		AppendMu:         &db.appendMu,
		Locker:           &db.mu,
		// (under db.mu) the frames this process placed, which its
		// follower passes over
		OnWrite:  func(seg uint64, off int64) { db.mu.own = append(db.mu.own, position(seg, off)) },
		Poisoned: db.poisonErr,
		Poison: func(err error) error {
			db.poisonWith(err)
			return db.poisonErr()
		},
		Written: db.metrics.written,
		Fsynced: func() { db.metrics.fsyncs.Add(1) },
		Kick:    db.prepKick,
	})
}

// walShared is the log's view of shared: its byte locks (exclusive) and
// its shm words.
type walShared struct{ sh *shared }

var (
	walLocks = [...]int64{wal.LockAppend: lockAppend, wal.LockPrepare: lockPrepare, wal.LockSync: lockSync}
	walWords = [...]int{wal.Tail: shmTail, wal.Placing: shmPlacing, wal.Durable: shmDurable, wal.Frames: shmFrames}
)

func (s walShared) Lock(l wal.Lock) error                { return s.sh.locks.Lock(walLocks[l], true) }
func (s walShared) TryLock(l wal.Lock) (bool, error)     { return s.sh.locks.TryLock(walLocks[l], true) }
func (s walShared) Unlock(l wal.Lock)                    { s.sh.locks.Unlock(walLocks[l]) }
func (s walShared) Word(w wal.Word) vfs.Word64           { return s.sh.field(walWords[w]) }
func (s walShared) Verify() error                        { return s.sh.verify(true) }
func (s walShared) Lost() error                          { return s.sh.lost() }
func (s walShared) Wiped() error                         { return s.sh.wiped() }
func (s walShared) Publish(p uint64)                     { s.sh.publish(p) }
func (s walShared) Notify()                              { s.sh.notify() }
func (s walShared) SyncSeq() uint32                      { return s.sh.syncSeq() }
func (s walShared) WaitSync(seq uint32, d time.Duration) { s.sh.waitSync(seq, d) }

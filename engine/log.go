package engine

import (
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
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
		OnWrite: func(seg uint64, off, size int64) {
			db.mu.own = append(db.mu.own, ownFrame{coord.Position(seg, off), coord.Position(seg, off+size)})
		},
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

// walShared is the log's view of the store's coordination (package
// coord): its byte locks (exclusive) and its shm words.
type walShared struct{ sh *coord.Shared }

var (
	walLocks = [...]coord.Lock{wal.LockAppend: coord.LockAppend, wal.LockPrepare: coord.LockPrepare, wal.LockSync: coord.LockSync}
	walWords = [...]coord.Word{wal.Tail: coord.Tail, wal.Placing: coord.Placing, wal.Durable: coord.Durable, wal.Frames: coord.Frames}
)

func (s walShared) Lock(l wal.Lock) error                { return s.sh.Lock(walLocks[l], true) }
func (s walShared) TryLock(l wal.Lock) (bool, error)     { return s.sh.TryLock(walLocks[l], true) }
func (s walShared) Unlock(l wal.Lock)                    { s.sh.Unlock(walLocks[l]) }
func (s walShared) Word(w wal.Word) vfs.Word64           { return s.sh.Word(walWords[w]) }
func (s walShared) Verify() error                        { return s.sh.Verify(true) }
func (s walShared) Lost() error                          { return s.sh.Lost() }
func (s walShared) Wiped() error                         { return s.sh.Wiped() }
func (s walShared) Publish(p uint64)                     { s.sh.Publish(p) }
func (s walShared) Notify()                              { s.sh.Notify() }
func (s walShared) SyncSeq() uint32                      { return s.sh.SyncSeq() }
func (s walShared) WaitSync(seq uint32, d time.Duration) { s.sh.WaitSync(seq, d) }

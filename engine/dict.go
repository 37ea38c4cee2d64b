package engine

import (
	"errors"
	"fmt"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/dict"
	"github.com/seglog/seglog/segment"
)

// Dictionaries (docs/FORMAT.md, Dictionaries): a writing process that
// compresses trains a zstd dictionary from the small frames it writes,
// within a CPU budget; package engine/internal/dict decides when one is
// due, keeps the samples, trains it and makes it durable (segment.WriteDict,
// segment.SyncDict for one another process made) before a frame names
// it. The engine gives it the store's directory and the dictionary lock,
// runs its loop (dictLoop) and decides what a failure does. Readers load
// the dictionaries that frames name from the directory (segment.Dicts).
// Dictionaries are never removed: compaction keeps frames' bytes as they
// are, so every dictionary a frame ever named stays readable.

// newDictTrainer returns the trainer of a writing DB, with the tuning of
// its test knobs if they set one, and takes the store's newest
// dictionary (a damaged one fails the open).
func newDictTrainer(db *DB) (*dict.Trainer, error) {
	t := dict.DefaultTuning()
	if db.knobs.dict != nil {
		t = *db.knobs.dict
	}
	d := dict.New(t)
	return d, d.Load(db.opts.FS, db.dir, db.dicts)
}

// dictLoop trains (or takes) a dictionary when the trainer says one is
// due. A failed fsync poisons the DB; any other failure is logged (and
// the trainer waits a while before it tries again): it never takes the
// process down (segment.TrainDict). The poison comes before the
// trainer's Done: whoever learns from Done that the renewal is over (a
// test's Ask) finds the DB poisoned.
func (db *DB) dictLoop() {
	defer db.wg.Done()
	for {
		select {
		case <-db.stop:
			return
		case <-db.dict.Kick():
		}
		db.dict.Begin()
		err := db.renewDict()
		if errors.Is(err, segment.ErrSyncFailed) {
			db.poisonWith(err)
		}
		db.dict.Done(err)
		if err != nil {
			db.opts.Logger.Warn("engine: making a compression dictionary failed", "error", err)
		}
	}
}

// renewDict replaces the current dictionary (dict.Trainer.Renew) under
// coord.LockDict: by one another process made since, else by one trained
// from this process's recent payloads.
func (db *DB) renewDict() error {
	if err := db.poisonErr(); err != nil {
		return nil // nothing more is written
	}
	if err := db.shared.Lock(coord.LockDict, true); err != nil {
		return fmt.Errorf("engine: taking the dictionary lock: %w", err)
	}
	defer db.shared.Unlock(coord.LockDict)
	return db.dict.Renew(db.opts.FS, db.dir, db.dicts)
}

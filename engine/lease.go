package engine

import (
	"errors"
	"sync"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
)

// lease is a session's write lease: this process's (handle.Owners: one
// write handle per session in the process) and the session's byte in the
// locks file, which no other process can take while this one holds it and
// which the kernel releases when the process dies (docs/MULTIPROCESS.md, Many
// processes, Leases).
type lease struct {
	*handle.Lease
	db   *DB
	id   string
	once sync.Once
	// slot: the slot of this process's holder file that names this
	// lease (holders.record), -1 if none does
	slot int
}

// acquire takes session id's lease, or fails with a *store.OwnedError
// (errors.Is(err, store.ErrAlreadyOwned)) naming its holder while a write
// handle of this process or of another holds it.
func (db *DB) acquire(id string) (*lease, error) {
	l, err := db.owners.Acquire(id)
	if err != nil {
		return nil, db.ownedError(id, true)
	}
	ok, err := db.shared.LockLease(id)
	if err != nil || !ok {
		l.Release()
		if err == nil {
			err = db.ownedError(id, false)
		}
		return nil, err
	}
	return &lease{Lease: l, db: db, id: id, slot: db.holders.record(db, coord.LeaseKey(id))}, nil
}

// ownedKind is the kind of a refused acquire's SessionError: the
// *store.OwnedError naming the holder, or ErrAlreadyOwned (the lease's
// byte could not be asked for).
func ownedKind(err error) error {
	var o *store.OwnedError
	if errors.As(err, &o) {
		return o
	}
	return store.ErrAlreadyOwned
}

// Release gives the session up, to this process and to the others. It is
// idempotent.
func (l *lease) Release() {
	l.once.Do(func() {
		l.db.waitUnpinned(l.id)
		// The record before the byte: once the byte is free, the next
		// holder's record is the one there.
		l.db.holders.clear(l.slot)
		// The byte first: while this process's lease is still held, no
		// other handle of it can take the byte and lose it here.
		l.db.shared.UnlockLease(l.id)
		l.Lease.Release()
	})
}

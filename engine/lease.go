package engine

import (
	"sync"

	"github.com/seglog/seglog/handle"
)

// lease is a session's write lease: this process's (handle.Owners: one
// write handle per session in the process) and the session's byte in the
// locks file, which no other process can take while this one holds it and
// which the kernel releases when the process dies (docs/DESIGN.md, Many
// processes, Leases).
type lease struct {
	*handle.Lease
	db   *DB
	id   string
	once sync.Once
}

// acquire takes session id's lease, or fails with handle.ErrAlreadyOwned
// while a write handle of this process or of another holds it.
func (db *DB) acquire(id string) (*lease, error) {
	l, err := db.owners.Acquire(id)
	if err != nil {
		return nil, err
	}
	ok, err := db.shared.LockLease(id)
	if err != nil || !ok {
		l.Release()
		if err == nil {
			err = handle.ErrAlreadyOwned
		}
		return nil, err
	}
	return &lease{Lease: l, db: db, id: id}, nil
}

// Release gives the session up, to this process and to the others. It is
// idempotent.
func (l *lease) Release() {
	l.once.Do(func() {
		l.db.waitUnpinned(l.id)
		// The byte first: while this process's lease is still held, no
		// other handle of it can take the byte and lose it here.
		l.db.shared.UnlockLease(l.id)
		l.Lease.Release()
	})
}

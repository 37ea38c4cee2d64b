package engine

import (
	"github.com/seglog/seglog/store"
)

// liveHolder names the writer that holds session id's write lease, nil if
// none does (or it cannot tell: a store opened without its coordination
// files). It takes nothing: the lease byte is asked, not locked.
func (db *DB) liveHolder(id string) *store.OwnedError {
	if db.owners.Held(id) {
		return db.ownedError(id, true)
	}
	if held, err := db.shared.LeaseHeld(id); err == nil && held {
		return db.ownedError(id, false)
	}
	return nil
}

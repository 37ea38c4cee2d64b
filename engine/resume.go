package engine

import (
	"context"
	"errors"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
)

// Resume opens session id for write and closes a turn that a crash left
// open: it reads the log, appends the closers of recovery.
// InterruptedTurnClosers as one ordinary batch, flushes, and returns the
// handle with the closers it wrote (none if the log was balanced). Repair
// happens only under the write lease: while another handle owns the
// session, Resume fails with ErrAlreadyOwned and writes nothing.
func (db *DB) Resume(ctx context.Context, id string) (*Handle, []event.Event, error) {
	h, err := db.Open(ctx, id, store.Write)
	if err != nil {
		return nil, nil, err
	}
	closers, err := storekit.ResumeHandle(ctx, h)
	if err != nil {
		return nil, nil, errors.Join(err, h.Close())
	}
	return h, closers, nil
}

// Inspect returns session id's log and the closers Resume would append to
// it (nil if its last turn is closed), without the write lease and
// writing nothing: the read-only balanced view of an observer, also of a
// session another handle or process writes. Holder names a live writer
// (a write handle of this process, or another process: its pid, host and
// since, from the lease holder files) that held the session's write lease
// when Inspect looked, nil if none did: its turn is then in progress, and
// the closers are what a resume would append if it died. It fails as
// Open(id, Read) does.
func (db *DB) Inspect(ctx context.Context, id string) (store.Inspection, error) {
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		return store.Inspection{}, err
	}
	defer h.Close()
	in, err := storekit.InspectHandle(ctx, h)
	if err == nil {
		in.Holder = db.liveHolder(id)
	}
	return in, err
}

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

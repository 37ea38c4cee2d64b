package engine

import (
	"context"

	"github.com/seglog/seglog/store"
)

// Fork creates session h.ID as a fork of session parent at n events: its
// events 0..n-1 are the parent's, seq n is the inherited end-seed marker
// (session/end-seed {"inherited": true}), and its header is seeded
// (IsSeeded, InheritedEventCount n) and names the parent (ParentSession is
// set when empty; another value is ErrInvalidHeader). It returns the
// child's write handle once the fork is durable; the host appends the
// child's own events from seq n+1.
//
// The parent is read through a read handle, so it may have a writer (in
// this process or another): its events up to n must be stored (flushed or
// at least appended before Fork reads them). A fork past the parent's end
// is a *store.ForkRangeError (errors.Is ErrInvalidArgument) and creates
// nothing; an ID that exists is ErrSessionExists. The child is a session of
// its own: deleting or compacting the parent leaves it whole.
//
// This build copies the parent's first n events into the child's frames
// (one read and one compressed write of them). If the copy fails after
// the child was created, the child is deleted again.
func (db *DB) Fork(ctx context.Context, parent string, n uint64, h Header) (*Handle, error) {
	if db.opts.ReadOnly {
		return nil, ErrReadOnlyStore
	}
	return store.CopyFork[*Handle](ctx, db, parent, n, h, db.Delete)
}

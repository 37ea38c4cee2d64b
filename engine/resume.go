package engine

import (
	"context"
	"errors"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// Resume opens session id for write and closes a turn that a crash left
// open: it reads the log, appends the closers of recovery.
// InterruptedTurnClosers as one ordinary batch, flushes, and returns the
// handle with the closers it wrote (none if the log was balanced). Repair
// happens only under the write lease: while another handle owns the
// session, Resume fails with ErrAlreadyOwned and writes nothing.
func (db *DB) Resume(ctx context.Context, id string) (*Handle, []event.Event, error) {
	h, err := db.Open(ctx, id, Write)
	if err != nil {
		return nil, nil, err
	}
	closers, err := ResumeHandle(ctx, h)
	if err != nil {
		return nil, nil, errors.Join(err, h.Close())
	}
	return h, closers, nil
}

// ResumeHandle is Resume through a write handle of any backend (package
// backend/jetstream resumes so): it reads the log whole, appends the
// closers of recovery.InterruptedTurnClosers as one batch and flushes, and
// returns them (nil if the log was balanced). The caller closes the
// handle if it fails.
func ResumeHandle(ctx context.Context, h store.Handle) ([]event.Event, error) {
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return nil, err
	}
	closers, err := recovery.InterruptedTurnClosers(evs)
	if err != nil {
		return nil, sessionErr(h.ID(), "resume", err)
	}
	if len(closers) == 0 {
		return nil, nil
	}
	if err := h.Append(ctx, closers...); err != nil {
		return nil, err
	}
	if err := h.Flush(ctx); err != nil {
		return nil, err
	}
	return closers, nil
}

// Inspect returns session id's log and the closers Resume would append to
// it (nil if its last turn is closed), without the write lease and
// writing nothing: the read-only balanced view of an observer, also of a
// session another handle or process writes. It fails as Open(id, Read)
// does.
func (db *DB) Inspect(ctx context.Context, id string) (Inspection, error) {
	h, err := db.Open(ctx, id, Read)
	if err != nil {
		return Inspection{}, err
	}
	defer h.Close()
	return InspectHandle(ctx, h)
}

// InspectHandle is Inspect through an open handle of any backend: the
// log, read whole, and its closers.
func InspectHandle(ctx context.Context, h store.Handle) (Inspection, error) {
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return Inspection{}, err
	}
	closers, err := recovery.InterruptedTurnClosers(evs)
	if err != nil {
		return Inspection{}, sessionErr(h.ID(), "inspect", err)
	}
	return Inspection{Header: h.Header(), Events: evs, Closers: closers}, nil
}

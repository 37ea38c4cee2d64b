package engine

import (
	"context"
	"errors"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
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
	closers, err := h.closeInterruptedTurn(ctx)
	if err != nil {
		return nil, nil, errors.Join(err, h.Close())
	}
	return h, closers, nil
}

func (h *Handle) closeInterruptedTurn(ctx context.Context) ([]event.Event, error) {
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

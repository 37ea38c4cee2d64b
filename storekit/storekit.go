package storekit

import (
	"context"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// ResumeHandle is a store's Resume through a write handle of any backend
// of the store contract: it reads the log whole, appends the closers of
// recovery.InterruptedTurnClosers as one batch and flushes, and returns them (nil
// if the log was balanced). The caller closes the handle if it fails.
func ResumeHandle(ctx context.Context, h store.Handle) ([]event.Event, error) {
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return nil, err
	}
	closers, err := recovery.InterruptedTurnClosers(evs)
	if err != nil {
		return nil, &store.SessionError{ID: h.ID(), Op: "resume", Err: err}
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

// InspectHandle is a store's Inspect through an open handle of any
// backend: the log, read whole, and the closers Resume would append.
func InspectHandle(ctx context.Context, h store.Handle) (store.Inspection, error) {
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return store.Inspection{}, err
	}
	closers, err := recovery.InterruptedTurnClosers(evs)
	if err != nil {
		return store.Inspection{}, &store.SessionError{ID: h.ID(), Op: "inspect", Err: err}
	}
	return store.Inspection{Header: h.Header(), Events: evs, Closers: closers}, nil
}

// SurfaceRulesChecker is the store.FrontConfig.Surface of a backend whose
// SurfaceRules option is on (nil when off): it makes a SurfaceChecker that
// knows catalog c's types (recovery.NewSurfaceChecker).
func SurfaceRulesChecker(on bool, c *event.Catalog) func() store.SurfaceChecker {
	if !on {
		return nil
	}
	return func() store.SurfaceChecker { return recovery.NewSurfaceChecker(c) }
}

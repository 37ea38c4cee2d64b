package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/seglog/seglog/event"
)

// PrepareForkHeader applies Fork's rules to the header of a fork of
// session parent at n events: the header is seeded (IsSeeded is set) and
// names its parent (ParentSession is set when empty; another parent is
// ErrInvalidHeader), the fork's ID is not its parent's, and it is in the
// current format (Version 0 or FormatVersion; an older one is
// ErrInvalidHeader). It returns the header as Create would store it.
func PrepareForkHeader(h Header, parent string, n uint64) (Header, error) {
	if h.ID == parent {
		return h, fmt.Errorf("%w: session %q: a fork cannot have its parent's id", ErrInvalidHeader, h.ID)
	}
	if h.ParentSession == "" {
		h.ParentSession = parent
	} else if h.ParentSession != parent {
		return h, fmt.Errorf("%w: session %q: parentSession %q is not the session it forks, %q", ErrInvalidHeader, h.ID, h.ParentSession, parent)
	}
	h.IsSeeded = true
	h, _, err := PrepareHeader(h, Inherited(n))
	if err == nil && h.Version != FormatVersion {
		// Its events are the parent's as reads see them, current: a fork
		// in an older format would have them migrated again on each read.
		err = fmt.Errorf("%w: session %q: a fork is in the current format (version %d), not version %d", ErrInvalidHeader, h.ID, FormatVersion, h.Version)
	}
	return h, err
}

// ForkMarker is the event a fork at n carries at seq n, after its parent's
// events: session/end-seed with data {"inherited": true}, at time ms.
func ForkMarker(n uint64, ms int64) event.Event {
	return event.Event{Seq: n, Type: "session/end-seed", Time: ms, Data: json.RawMessage(`{"inherited":true}`)}
}

// ForkRangeError is a fork point past the end of the parent's log.
type ForkRangeError struct {
	Parent string
	N      uint64 // the fork point asked for
	Len    uint64 // the parent's events
}

func (e *ForkRangeError) Error() string {
	return fmt.Sprintf("fork of session %q at %d: it has %d events", e.Parent, e.N, e.Len)
}

// Is makes a *ForkRangeError match ErrInvalidArgument.
func (e *ForkRangeError) Is(target error) bool { return target == ErrInvalidArgument }

// CopyFork is Fork for a backend that cannot share frames, or when a
// backend cannot share them now: it reads the parent's first n events
// through a read handle, creates the child seeded with them (h as
// PrepareForkHeader makes it), appends them, the marker (ForkMarker) and
// flushes, and returns the child's write handle. A failure after Create
// closes the child unflushed and calls drop(ctx, id) if drop is not nil
// (a backend that can delete removes what was written of it). opts are
// Fork's (MarkerTime).
func CopyFork[H Handle](ctx context.Context, b Backend[H], parent string, n uint64, h Header, drop func(context.Context, string) error, opts ...ForkOption) (H, error) {
	var zero H
	h, err := PrepareForkHeader(h, parent, n)
	if err != nil {
		return zero, err
	}
	p, err := b.Open(ctx, parent, Read)
	if err != nil {
		return zero, err
	}
	defer p.Close()
	// The parent's length first: a fork past its end is refused before
	// the child exists. By its event n-1 as reads see it: a read handle's
	// Len may count the events stored (a session read migrated).
	at := n
	if n > 0 {
		at = n - 1
	}
	last, err := p.Read(ctx, int(at), 1)
	if err != nil {
		return zero, err
	}
	if n > 0 && len(last) == 0 {
		return zero, &ForkRangeError{Parent: parent, N: n, Len: p.Len()}
	}
	c, err := b.Create(ctx, h, Inherited(n))
	if err != nil {
		return zero, err
	}
	fail := func(err error) (H, error) {
		c.Close()
		if drop != nil {
			if derr := drop(context.WithoutCancel(ctx), h.ID); derr != nil && !errors.Is(derr, ErrSessionNotFound) {
				err = errors.Join(err, fmt.Errorf("removing the fork's partial copy: %w", derr))
			}
		}
		return zero, err
	}
	const chunk = 4096
	for off := uint64(0); off < n; off += chunk {
		evs, err := p.Read(ctx, int(off), int(min(chunk, n-off)))
		if err != nil {
			return fail(err)
		}
		if uint64(len(evs)) != min(chunk, n-off) {
			return fail(&ForkRangeError{Parent: parent, N: n, Len: off + uint64(len(evs))})
		}
		if err := c.Append(ctx, evs...); err != nil {
			return fail(err)
		}
	}
	if err := c.Append(ctx, ForkOptionsOf(opts).Marker(n)); err != nil {
		return fail(err)
	}
	if err := c.Flush(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
)

// Handle is one open channel onto a session: a read handle, or the single
// write handle. It is safe for concurrent use; appends through one handle
// are applied in call order.
type Handle struct {
	db     *DB
	s      *session
	id     string
	hdr    Header
	inh    uint64
	access Access
	lease  *handle.Lease

	mu       sync.Mutex
	closed   bool
	closeErr error
	front    handle.Front  // Enqueue's write-behind
	seen     atomic.Uint64 // longest log this handle has observed

	lost atomic.Pointer[lostErr] // set when a failed write lost events appended through it
}

// newHandle is called with db.mu held.
func (db *DB) newHandle(s *session, access Access, lease *handle.Lease) *Handle {
	h := &Handle{db: db, s: s, id: s.id, hdr: s.hdr, inh: s.inherited, access: access, lease: lease}
	if access == Write {
		db.handles[h] = struct{}{}
	}
	return h
}

// ID returns the session ID.
func (h *Handle) ID() string { return h.id }

// Header returns the session header, fixed when the handle opened.
func (h *Handle) Header() Header { return h.hdr }

// InheritedEventCount returns the length of a seeded session's inherited
// prefix (0 for an unseeded one).
func (h *Handle) InheritedEventCount() uint64 { return h.inh }

// Access returns Read or Write.
func (h *Handle) Access() Access { return h.access }

func (h *Handle) usable(op string) error {
	if h.closed {
		return sessionErr(h.id, op, ErrHandleClosed)
	}
	return nil
}

// writable is called with h.mu held.
func (h *Handle) writable(op string) error {
	if err := h.usable(op); err != nil {
		return err
	}
	if h.access != Write {
		return sessionErr(h.id, op, ErrReadOnly)
	}
	if err := h.lease.Check(); err != nil {
		return sessionErr(h.id, op, ErrOwnershipLost)
	}
	if l := h.lost.Load(); l != nil {
		return sessionErr(h.id, op, fmt.Errorf("%w; close this handle and open the session again to continue from its stored events", l.err))
	}
	return nil
}

// checkLog is a write open's validation of the stored log: every event's
// type against the catalog, and the seed marker rules (REFERENCE.md §(f)).
// Events already checked by an earlier write open of this DB are skipped.
func (h *Handle) checkLog(ctx context.Context) error {
	db := h.db
	db.mu.Lock()
	from, n := h.s.checked, h.s.next
	seeded, inh := h.hdr.IsSeeded, h.inh
	db.mu.Unlock()
	if err := store.CheckLog(ctx, h.id, seeded, inh, from, n, h.Read); err != nil {
		return err
	}
	db.mu.Lock()
	if h.s.checked < n {
		h.s.checked = n
	}
	db.mu.Unlock()
	return nil
}

// Close ends the handle. A write handle first appends what Enqueue
// buffered and makes the session's appends durable, then releases its
// lease; a creator that never appended or flushed erases the session, as
// if it never existed. Later calls on the handle fail with
// ErrHandleClosed. Close is idempotent and returns the first call's error;
// the lease is released even when draining fails.
func (h *Handle) Close() error {
	h.mu.Lock()
	if h.closed {
		err := h.closeErr
		h.mu.Unlock()
		return err
	}
	wb := h.front.Buffer()
	h.mu.Unlock()
	var errs []error
	if wb != nil {
		if err := wb.Close(context.Background()); err != nil {
			errs = append(errs, sessionErr(h.id, "close", fmt.Errorf("close failed to drain: %w", err)))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return h.closeErr
	}
	h.closed = true
	if h.access == Write {
		db := h.db
		db.mu.Lock()
		delete(db.handles, h)
		s := h.s
		if s.owner == h {
			s.owner = nil
		}
		erase := s.pending && s.next == 0 && !s.erased // never appended, never flushed
		if erase {
			s.erased = true
			if db.sessions[s.id] == s {
				delete(db.sessions, s.id)
			}
		}
		dbClosed := db.closed
		db.mu.Unlock()
		if !erase && !dbClosed && h.lease.Check() == nil {
			err := h.cut()
			if err == nil {
				err = db.sync()
			}
			if err != nil {
				errs = append(errs, sessionErr(h.id, "close", err))
			}
		}
		h.lease.Release()
	}
	h.closeErr = errors.Join(errs...)
	return h.closeErr
}

package engine

import (
	"context"
	"errors"
	"iter"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
)

// Handle is one open channel onto a session: a read handle, or the single
// write handle. It is safe for concurrent use; appends through one handle
// are applied in call order.
type Handle struct {
	front store.Front // what every backend's handle does the same
	db    *DB
	s     *session
	lease *lease
	// behind is the write-out CutBehind started, until a later cut waits
	// for it; set and waited for with the Front's lock held.
	behind *cutJob
}

// newHandle is called with db.mu held.
func (db *DB) newHandle(s *session, access store.Access, lease *lease) *Handle {
	h := &Handle{db: db, s: s, lease: lease}
	var w store.Writer
	if access == store.Write {
		db.mu.handles[h] = struct{}{}
		w = handleWriter{h}
	}
	cfg := store.FrontConfig{
		Catalog: db.opts.Catalog, Reload: db.loadTypes, Window: db.opts.WriteBehindWindow, Logger: db.opts.Logger, AfterFunc: db.opts.AfterFunc,
		Surface: storekit.SurfaceRulesChecker(db.opts.SurfaceRules, db.opts.Catalog),
		Stats:   &db.metrics.writeBehind,
	}
	if access == store.Write && !db.opts.FlushOnly {
		cfg.Flush = h.windowFlush
	}
	h.front.Init(s.id, *s.hdr, s.inherited, access, w, cfg)
	db.metrics.handleOpened(access)
	return h
}

// ID returns the session ID.
func (h *Handle) ID() string { return h.front.ID() }

// Header returns the session header, fixed when the handle opened.
func (h *Handle) Header() store.Header { return h.front.Header() }

// InheritedEventCount returns the length of a seeded session's inherited
// prefix (0 for an unseeded one).
func (h *Handle) InheritedEventCount() uint64 { return h.front.InheritedEventCount() }

// Len returns the session's length as the handle knows it. On a write
// handle it is the seq the next Append (or Enqueue) must carry: stored,
// appended and enqueued events all count, so a host (and the plan
// controller) can number its next event without tracking Enqueue itself.
// On a read handle it is the length of the longest log a read through it
// returned.
func (h *Handle) Len() uint64 { return h.front.Len() }

// Events iterates over the session's events from seq from on, reading
// them a chunk at a time (store.Iterate), for logs too long to load
// whole. Each chunk is a Read: the same checks, the same errors (the
// iteration ends with the first, yielded once).
func (h *Handle) Events(ctx context.Context, from int) iter.Seq2[event.Event, error] {
	return store.Iterate(ctx, h.Read, from)
}

// Access returns Read or Write.
func (h *Handle) Access() store.Access { return h.front.Access() }

// Append adds events to the session. The first seq must be the session's
// next seq and the seqs contiguous (*SeqError); every event must be valid
// (*event.InvalidError). A bad batch fails whole and writes nothing.
//
// When Append returns, the events are ordered and visible to every read
// started afterwards on this DB; they are durable within
// Options.WriteBehindWindow (plus one fdatasync), and Flush waits for it. Events handed to Enqueue before are appended
// first. An empty batch does nothing. Once the DB's Close has begun, it
// fails with ErrClosed (and ErrOwnershipLost) and stores nothing. Once a
// write-out or flush of the handle failed (a window's in the background
// too: a full disk), it fails with a *store.NotDurableError naming the
// cause and the first seq not made durable, and takes nothing, until a
// flush succeeds (the window retries by itself; docs/DURABILITY.md, The
// durability window).
func (h *Handle) Append(ctx context.Context, evs ...event.Event) error {
	if err := h.db.enter(); err != nil {
		return sessionErr(h.ID(), "append", errClosedLease)
	}
	defer h.db.leave()
	return h.front.Append(ctx, evs...)
}

// Enqueue hands events to the write-behind buffer without waiting for
// I/O: the first pending event opens a batching window (Options.
// WriteBehindWindow) that later events do not extend; then the batch is
// appended, and made durable, in the background. Seqs, shapes and the catalog are checked
// here, so a background write fails only on I/O; such a failure keeps the
// events in order, pauses the automatic path and logs a warning, and
// fails the handle as Append says: the next Append or Enqueue returns a
// *store.NotDurableError until a flush succeeds. An Append, a Read or a Flush
// through the handle first appends what is buffered, so the paths can be
// mixed and the handle reads its own enqueued events; Len counts them.
// Enqueued events are durable within the window, as appended ones are.
func (h *Handle) Enqueue(evs ...event.Event) error {
	if err := h.db.enter(); err != nil {
		return sessionErr(h.ID(), "enqueue", errClosedLease)
	}
	defer h.db.leave()
	return h.front.Enqueue(evs...)
}

// checkLog is a write open's validation of the stored log: every event's
// type against the catalog, and the seed marker rules (docs/EVENTS.md, Seeded sessions).
// Events known to be checked under a catalog this DB's has had are
// skipped (opencheck.go): so a write open costs what its new events do,
// not what the log does. With Options.SurfaceRules the whole log is then
// fed to the handle's surface checker.
func (h *Handle) checkLog(ctx context.Context) error {
	db := h.db
	db.mu.Lock()
	from, n := db.checkedFrom(h.s), h.s.next
	seeded, inh := h.Header().IsSeeded, h.InheritedEventCount()
	db.mu.Unlock()
	db.metrics.openChecked.Add(n - from)
	if err := store.CheckLog(ctx, h.ID(), seeded, inh, from, n, h.Read); err != nil {
		return err
	}
	if err := h.front.CheckSurfaceLog(ctx, n, h.Read); err != nil {
		return err
	}
	db.mu.Lock()
	db.setChecked(h.s, n) // (under the lease: nothing was placed meanwhile)
	db.mu.Unlock()
	return nil
}

// Close ends the handle. A write handle first appends what Enqueue
// buffered and makes the session's appends durable, then releases its
// lease; a creator that never appended or flushed erases the session, as
// if it never existed. A handle whose DB closed (revoking its lease) has
// nothing to write if the DB's Close made its events durable; if it still
// holds events (that flush failed), they are dropped and Close returns a
// *DroppedError (ErrOwnershipLost) saying how many. Later calls on the
// handle fail with ErrHandleClosed. Close is idempotent and returns the
// first call's error; the lease is released even when draining fails.
// A write handle's Close that begins while its DB's Close runs waits for
// that to end (which flushes the handle), then has nothing to write.
func (h *Handle) Close() error {
	db := h.db
	dbClosed := false
	if h.Access() == store.Write {
		if err := db.enter(); err != nil {
			// (Not in the gate: Close does not wait for this.)
			<-db.closed
			dbClosed = true
		} else {
			defer db.leave()
		}
	}
	return h.front.Close(func(drained error) error {
		db.metrics.handleClosed(h.Access())
		errs := []error{drained}
		if h.Access() == store.Write {
			h.waitBehind() // its error: the cut below writes the events again
			db.mu.Lock()
			delete(db.mu.handles, h)
			s := h.s
			if s.owner == h {
				s.owner = nil
			}
			erase := s.pending && s.next == 0 && !s.erased // never appended, never flushed
			if erase {
				s.erased = true
				if db.mu.sessions[s.id] == s {
					delete(db.mu.sessions, s.id)
				}
			}
			staged := len(s.open)
			db.mu.Unlock()
			switch {
			case erase:
			case !dbClosed && h.lease.Check() == nil:
				err := h.cut()
				if err == nil {
					err = db.sync()
				}
				if err != nil {
					errs = append(errs, sessionErr(h.ID(), "close", err))
				}
			default:
				// The DB closed (and made durable what it could): what the
				// handle still holds cannot be written any more.
				if errors.Is(drained, store.ErrOwnershipLost) {
					errs = errs[:0] // the same cause: Dropped counts them
				}
				errs = append(errs, h.front.Dropped(staged))
			}
			h.lease.Release()
		}
		return errors.Join(errs...)
	})
}

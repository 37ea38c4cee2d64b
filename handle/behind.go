package handle

import (
	"context"

	"github.com/seglog/seglog/event"
)

// Behind is a write handle's side of write-behind, the same for every
// backend: Enqueue checks a batch against the seq that follows everything
// appended and enqueued so far, and buffers copies of it (the caller may
// reuse its events' bytes at once) in a WriteBehind made on first use.
// Before an Append, Drain writes what is buffered, so the two paths keep
// seq order. A Behind is guarded by its handle's mutex; its WriteBehind is
// safe for concurrent use.
type Behind struct {
	wb   *WriteBehind[event.Event]
	next uint64 // the seq the next Enqueue starts at, if past the stored log
}

// Enqueue checks evs with check, from the larger of stored (the log's next
// seq) and the seq after what was enqueued, and buffers copies. cfg makes
// the WriteBehind on the first call. check's error is returned as it is; a
// closed buffer returns ErrClosed.
func (f *Behind) Enqueue(cfg WriteBehindConfig[event.Event], stored uint64, evs []event.Event, check func(evs []event.Event, next uint64) error) error {
	f.next = max(f.next, stored)
	if err := check(evs, f.next); err != nil {
		return err
	}
	if f.wb == nil {
		f.wb = NewWriteBehind(cfg)
	}
	if err := f.wb.Enqueue(event.CloneBatch(evs)...); err != nil {
		return err
	}
	f.next += uint64(len(evs))
	return nil
}

// Next returns the seq the next Enqueue starts at: the seq after what
// was enqueued, or stored (the log's next seq) if that is larger.
func (f *Behind) Next(stored uint64) uint64 { return max(f.next, stored) }

// Buffer returns the WriteBehind, or nil before the first Enqueue. Callers
// take it under the handle's mutex and drain it without.
func (f *Behind) Buffer() *WriteBehind[event.Event] { return f.wb }

// DrainPending writes what wb buffered, if anything, once a background
// write in flight is done: what an Append does first. An empty buffer is
// not enough: a background write that has taken its batch may not have
// appended it yet, and the Append's events follow that batch. wb may be
// nil.
func DrainPending(ctx context.Context, wb *WriteBehind[event.Event]) error {
	if wb == nil {
		return nil
	}
	return wb.Drain(ctx)
}

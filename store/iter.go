package store

import (
	"context"
	"iter"

	"github.com/seglog/seglog/event"
)

// iterChunk is how many events Iterate reads at a time.
const iterChunk = 1024

// Iterate yields the events of a session from seq from on, reading them
// through read (a handle's Read) iterChunk at a time, so that a log too
// long to load whole is walked in bounded memory. It ends at the end of
// the log as the last chunk's read saw it, or with the first error (the
// pair's error, once; the event is then zero), or when the caller stops.
// Handles' Events methods use it.
func Iterate(ctx context.Context, read func(ctx context.Context, offset, limit int) ([]event.Event, error), from int) iter.Seq2[event.Event, error] {
	return func(yield func(event.Event, error) bool) {
		for off := from; ; {
			evs, err := read(ctx, off, iterChunk)
			if err != nil {
				yield(event.Event{}, err)
				return
			}
			for _, e := range evs {
				if !yield(e, nil) {
					return
				}
			}
			if len(evs) < iterChunk {
				return
			}
			off += len(evs)
		}
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// What a session is listed by (Snapshot.Title and UpdatedAt) is kept in
// memory with the session, as of a count of its events (session.metaAt),
// without reading logs on List:
//
//   - an append through this process brings it past each frame it
//     registers, from the events in hand (noteFrame), if it was up to
//     date before;
//   - the index's session record keeps it (as of at most the events the
//     record holds: indexUpdate), so an open starts from it;
//   - frames it has not seen that way (replayed past the index's
//     checkpoint by an open, followed from another process, written by a
//     migration, or every frame of a session whose record an older build
//     wrote) leave it behind, and Stat and List bring it up to date
//     (refreshMeta) by reading the frames after it from the end: the last
//     one for the update time, back to the latest session/title for the
//     title.

// noteFrame brings s's listing past a frame of evs it just registered
// (p, its index entry, which keeps the listing as of the frame's end for
// the index record), if it was up to date before the frame. Called with
// db.mu held.
func (s *session) noteFrame(evs []event.Event, p *pendFrame) {
	if s.metaAt != p.ref.first || len(evs) == 0 {
		return // behind: refreshMeta catches up
	}
	if t, ok := store.LastTitle(evs); ok {
		s.title = t
	}
	s.updatedAt = evs[len(evs)-1].Time
	s.metaAt = p.ref.first + uint64(p.ref.count)
	p.metaAt, p.title, p.updatedAt = s.metaAt, s.title, s.updatedAt
}

// setListing sets s's listing to that of evs, its first len(evs) events
// (a migration writing them).
func (s *session) setListing(evs []event.Event) {
	s.title, _ = store.LastTitle(evs)
	s.updatedAt, s.metaAt = 0, uint64(len(evs))
	if len(evs) > 0 {
		s.updatedAt = evs[len(evs)-1].Time
	}
}

// stale reports whether s's listing is behind its framed events. Called
// with db.mu held.
func (s *session) stale() bool { return s.metaAt < s.framed }

// freshListings brings the listing of each of ss up to date. Called with
// db.mu held, which it releases while it reads frames. A session deleted
// meanwhile is left as it is, and so is one whose frames are damaged: it
// is listed with what is known (a warning names the damage, and a read
// of the session reports it), so that one damaged session does not stop
// a store's listing.
func (db *DB) freshListings(ctx context.Context, ss []*session) error {
	var stale []*session
	for _, s := range ss {
		if s.stale() && !s.pending {
			stale = append(stale, s)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	db.mu.Unlock()
	defer db.mu.Lock()
	for _, s := range stale {
		err := db.refreshMeta(ctx, s)
		switch {
		case err == nil, errors.Is(err, store.ErrSessionNotFound):
		case errors.Is(err, store.ErrCorrupt):
			db.opts.Logger.Warn("engine: the title and update time of a damaged session are not read", "session", s.id, "error", err)
		default:
			return sessionErr(s.id, "list", err)
		}
	}
	return nil
}

// refreshMeta brings s's listing up to its framed events, reading the
// frames after it from the last one back. Called with no lock held.
func (db *DB) refreshMeta(ctx context.Context, s *session) error {
	for try := 1; ; try++ {
		var layout uint64
		if db.follow != nil {
			layout = db.shared.StableLayout()
		}
		err := db.refreshMetaOnce(ctx, s)
		if err == nil || db.follow == nil || db.shared.Layout() == layout || try == openTries {
			return err
		}
		// A compaction by another process moved frames: again, from the
		// rebuilt state.
	}
}

func (db *DB) refreshMetaOnce(ctx context.Context, s *session) error {
	db.layoutMu.RLock()
	defer db.layoutMu.RUnlock()
	v, err := db.snapshot(s)
	if err != nil {
		return err
	}
	db.mu.Lock()
	s = db.current(s)
	from, title := s.metaAt, s.title
	db.mu.Unlock()
	if from >= v.framed {
		return nil
	}
	if n := len(v.refs); n == 0 || v.refs[n-1].first+uint64(v.refs[n-1].count) != v.framed {
		return &store.CorruptionError{Path: db.dir, Offset: -1, Reason: fmt.Sprintf("session %q: its frames do not end at its event %d", s.id, v.framed)}
	}
	var updatedAt int64
	found := false
	for i := len(v.refs) - 1; i >= 0 && !found; i-- {
		ref := v.refs[i]
		if ref.first+uint64(ref.count) <= from {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := db.readFrame(s.id, ref, ref.first < v.shared, v.owner(s.id, ref.first))
		if err != nil {
			return err
		}
		evs := f.Events[:ref.count] // (a fork's last shared frame may hold more)
		if i == len(v.refs)-1 {
			updatedAt = evs[len(evs)-1].Time
		}
		if ref.first < from {
			evs = evs[from-ref.first:]
		}
		if t, ok := store.LastTitle(evs); ok {
			title, found = t, true
		}
	}
	db.mu.Lock()
	if s.metaAt < v.framed { // (else a concurrent refresh got further)
		s.title, s.updatedAt, s.metaAt = title, updatedAt, v.framed
	}
	db.mu.Unlock()
	return nil
}

// listingAt is the listing to store in s's index record, which holds its
// first n events: of those noted in the batch's entries of s (last, the
// latest that has one) and s's own, the latest not past n (nothing known,
// metaAt 0, if neither is). Called with db.mu held.
func (s *session) listingAt(n uint64, last *pendFrame) (title string, updatedAt int64, metaAt uint64) {
	if last != nil && last.metaAt <= n {
		title, updatedAt, metaAt = last.title, last.updatedAt, last.metaAt
	}
	if s.metaAt <= n && s.metaAt > metaAt {
		title, updatedAt, metaAt = s.title, s.updatedAt, s.metaAt
	}
	return title, updatedAt, metaAt
}

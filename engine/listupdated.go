package engine

import (
	"context"
	"slices"

	"github.com/seglog/seglog/engine/internal/listorder"
	"github.com/seglog/seglog/store"
)

// updatedOrder keeps the sessions in OrderUpdated order (Snapshot
// UpdatedAt descending, then by ID), so that a page of ListPage in that
// order costs a binary search and the page's own sessions, not a sort of
// every session (a million sessions took over a second a page). Guarded
// by db.mu. It works as listorder.IDs does for IDs:
//
// keys is sorted and may hold entries that are out of date: of sessions
// deleted or replaced since, or whose listing moved (the entry's time is
// not the session's any more). They are skipped, and keys is built again
// once they are many. A session whose listing may have moved (made, or
// its frames, title or update time changed: DB.relist, called wherever
// that happens, the replay fold's frames of other processes included) is
// queued in moved and keyed again on the next page, in added, which is
// merged into keys once it is large; one whose listing is behind its
// frames is brought up to date first (freshListings). The zero value is
// not built: the first page keys every session and sorts them once. An
// open seeds it from the index's listings instead (seed), sorted on the
// first page by a radix sort that needs no comparison. If many sessions
// are queued with no page in this order meanwhile, the order is dropped
// (and built again when needed), so that a process that never lists in
// this order holds neither the queue nor the sessions deleted since.
type updatedOrder struct {
	built bool
	keys  []updatedKey
	// byID: keys is in ID order, not sorted yet (seed): pages select
	// their candidates from it (listorder.Top) while a goroutine sorts it
	// (sorting), and added waits to be merged
	byID    bool
	sorting bool
	added   []updatedKey
	// sorted: added is sorted
	sorted bool
	// stale: about how many entries of keys are out of date
	stale int
	moved []*session // sessions with relisted set
}

// updatedKey places session s at time At (its listedAt when keyed).
type updatedKey = listorder.Key[*session]

// ListID is the ID by which sessions of one update time are listed
// (listorder.Item).
func (s *session) ListID() string { return s.id }

// validKey reports whether k still places its session, which db.mu.sessions
// must hold.
func (db *DB) validKey(k updatedKey) bool {
	s := k.S
	return !s.erased && db.mu.sessions[s.id] == s && (s.metaAt != 0 || s.hdr != nil) && s.listedAt() == k.At
}

// relist tells the orders ListPage keeps that s was made (made) or that
// its listing may have moved: its frames, title or update time changed.
// Called with db.mu held, or by the open's replay.
func (db *DB) relist(s *session, made bool) {
	if made {
		db.mu.list.Add(s.id)
	}
	u := &db.mu.byUpdated
	if !u.built || s.relisted {
		return
	}
	if len(u.moved) > len(u.keys)/4+listorder.MergeAddedAt {
		u.reset()
		return
	}
	s.relisted = true
	u.moved = append(u.moved, s)
}

// seed starts the order from ss, every session (in ID order if byID: an
// open's, sorted by listorder.SortByTime on the first page): those whose listing
// is known as of their frames are keyed, the others queued.
func (u *updatedOrder) seed(ss []*session, byID bool) {
	u.reset()
	*u = updatedOrder{built: true, byID: byID, sorted: true, keys: make([]updatedKey, 0, len(ss))}
	for _, s := range ss {
		switch {
		case s.erased:
		case s.metaAt == 0 || s.stale(): // (listed at its creation, or behind)
			s.relisted = true
			u.moved = append(u.moved, s)
		default:
			u.keys = append(u.keys, updatedKey{At: s.updatedAt, S: s})
		}
	}
}

// reset forgets the order (the sessions were replaced wholesale).
func (u *updatedOrder) reset() {
	for _, s := range u.moved {
		s.relisted = false
	}
	*u = updatedOrder{}
}

// prepareUpdated brings db.mu.byUpdated up to date and returns the two
// sorted lists to walk together. Called with db.mu held, which it
// releases while it reads frames (freshListings).
func (db *DB) prepareUpdated(ctx context.Context) (keys, added []updatedKey, err error) {
	u := &db.mu.byUpdated
again:
	if !u.built || u.stale > len(u.keys)/4+listorder.MergeAddedAt {
		ss := make([]*session, 0, len(db.mu.sessions))
		for _, s := range db.mu.sessions {
			ss = append(ss, s)
		}
		u.seed(ss, false)
		slices.SortFunc(u.keys, listorder.Compare[*session])
	}
	// Listings behind their frames are brought up to date (each page
	// tries again those it could not: see freshListings).
	var current []*session
	for _, s := range u.moved {
		if !s.erased && db.mu.sessions[s.id] == s {
			current = append(current, s)
		}
	}
	if err := db.freshListings(ctx, current); err != nil {
		return nil, nil, err
	}
	if !u.built {
		goto again // (dropped meanwhile: a reload, or many changes)
	}
	moved := u.moved
	u.moved = nil
	for i, s := range moved {
		if s.erased || db.mu.sessions[s.id] != s {
			s.relisted = false
			continue
		}
		if s.metaAt == 0 { // (listed at its creation time: in its header)
			if _, err := db.header(s); err != nil {
				u.moved = append(u.moved, moved[i:]...) // (still queued)
				return nil, nil, err
			}
		}
		u.added = append(u.added, updatedKey{At: s.listedAt(), S: s})
		u.sorted = false
		u.stale++ // (its entry in keys before, if it had one)
		if s.stale() && !s.pending {
			u.moved = append(u.moved, s) // (as of now; the next page tries again)
		} else {
			s.relisted = false
		}
	}
	if !u.sorted {
		slices.SortFunc(u.added, listorder.Compare[*session])
		u.sorted = true
	}
	if !u.byID && (len(u.added) > listorder.MergeAddedAt || len(u.added)*16 > len(u.keys)) {
		u.keys, u.added = listorder.Merge(u.keys, u.added, db.validKey), nil
	}
	return u.keys, u.added, nil
}

// walkUpdated calls fn for each session opts does not skip by ID alone
// (Prefix), in OrderUpdated from after opts.After, until fn returns
// false. Called with db.mu held, which it releases while it brings
// listings up to date (prepareUpdated); fn must not release it.
//
// While the order is an open's seed, not sorted yet, a page does not
// wait for the sort (56 ms for a million sessions): it selects from the
// keys the few that can come first after the cursor (listorder.Top, one
// pass, a few ms), walks those, and starts the sort on a goroutine of its
// own for the pages after it. Only a walk that wants more than it
// selected (a filter that passes few) sorts the keys there and then.
func (db *DB) walkUpdated(ctx context.Context, opts store.ListOptions, fn func(s *session) bool) error {
	keys, added, err := db.prepareUpdated(ctx)
	if err != nil {
		return err
	}
	var from *updatedKey // (walk the keys that follow it)
	if opts.After != "" {
		at, id, err := store.ParseUpdatedCursor(opts.After)
		if err != nil {
			return err
		}
		from = &updatedKey{At: at, S: &session{id: id}}
	}
	u := &db.mu.byUpdated
	if u.byID {
		if want := 2*(opts.Limit+1) + 64; opts.Limit > 0 && want*8 < len(keys) {
			top, all := listorder.Top(keys, from, want)
			last, more := db.walkKeys(top, added, from, !all, opts.Prefix, fn)
			db.sortUpdated(false)
			if !more {
				return nil
			}
			from = &last // (the walk wants more than the selection held)
		}
		db.sortUpdated(true)
		keys = u.keys
	}
	db.walkKeys(keys, added, from, false, opts.Prefix, fn)
	return nil
}

// walkKeys walks keys and added together (listorder.Walk) from after
// from, calling fn for each valid key with the prefix until fn returns
// false; if partial, keys are a selection (see listorder.Walk). Keys of
// sessions deleted or replaced count as stale.
func (db *DB) walkKeys(keys, added []updatedKey, from *updatedKey, partial bool, prefix string, fn func(s *session) bool) (last updatedKey, more bool) {
	gone := func(k updatedKey) {
		if k.S.erased || db.mu.sessions[k.S.id] != k.S {
			db.mu.byUpdated.stale++ // (one re-keyed is counted as it is)
		}
	}
	return listorder.Walk(keys, added, from, partial, prefix, db.validKey, gone, fn)
}

// sortUpdated sorts the seeded keys (byID) into OrderUpdated: now, or on
// a goroutine of its own that puts them in place if they are still the
// keys then (not rebuilt, reloaded or sorted meanwhile). Called with
// db.mu held. The keys themselves are never written: pages read them
// beside the goroutine.
func (db *DB) sortUpdated(now bool) {
	u := &db.mu.byUpdated
	if !u.byID {
		return
	}
	if now {
		u.keys, u.byID = listorder.SortByTime(u.keys), false
		return
	}
	if u.sorting {
		return
	}
	u.sorting = true
	keys := u.keys
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		sorted := listorder.SortByTime(keys)
		db.mu.Lock()
		defer db.mu.Unlock()
		if u := &db.mu.byUpdated; u.byID && len(u.keys) == len(keys) && &u.keys[0] == &keys[0] {
			u.keys, u.byID, u.sorting = sorted, false, false
		}
	}()
}

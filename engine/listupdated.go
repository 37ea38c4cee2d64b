package engine

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/seglog/seglog/store"
)

// updatedOrder keeps the sessions in OrderUpdated order (Snapshot
// UpdatedAt descending, then by ID), so that a page of ListPage in that
// order costs a binary search and the page's own sessions, not a sort of
// every session (a million sessions took over a second a page). Guarded
// by db.mu. It works as listOrder does for IDs:
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
	// their candidates from it (topUpdated) while a goroutine sorts it
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

// updatedKey places session s at time at (its listedAt when keyed).
type updatedKey struct {
	at int64
	s  *session
}

// before reports whether a sorts before b in OrderUpdated.
func (a updatedKey) before(b updatedKey) bool {
	return a.at > b.at || (a.at == b.at && a.s.id < b.s.id)
}

func compareKeys(a, b updatedKey) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return 0
}

// validKey reports whether k still places its session, which db.mu.sessions
// must hold.
func (db *DB) validKey(k updatedKey) bool {
	s := k.s
	return !s.erased && db.mu.sessions[s.id] == s && (s.metaAt != 0 || s.hdr != nil) && s.listedAt() == k.at
}

// relist tells the orders ListPage keeps that s was made (made) or that
// its listing may have moved: its frames, title or update time changed.
// Called with db.mu held, or by the open's replay.
func (db *DB) relist(s *session, made bool) {
	if made {
		db.mu.list.add(s.id)
	}
	u := &db.mu.byUpdated
	if !u.built || s.relisted {
		return
	}
	if len(u.moved) > len(u.keys)/4+mergeAddedAt {
		u.reset()
		return
	}
	s.relisted = true
	u.moved = append(u.moved, s)
}

// seed starts the order from ss, every session (in ID order if byID: an
// open's, sorted by sortByTime on the first page): those whose listing
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
			u.keys = append(u.keys, updatedKey{s.updatedAt, s})
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
	if !u.built || u.stale > len(u.keys)/4+mergeAddedAt {
		ss := make([]*session, 0, len(db.mu.sessions))
		for _, s := range db.mu.sessions {
			ss = append(ss, s)
		}
		u.seed(ss, false)
		slices.SortFunc(u.keys, compareKeys)
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
		u.added = append(u.added, updatedKey{s.listedAt(), s})
		u.sorted = false
		u.stale++ // (its entry in keys before, if it had one)
		if s.stale() && !s.pending {
			u.moved = append(u.moved, s) // (as of now; the next page tries again)
		} else {
			s.relisted = false
		}
	}
	if !u.sorted {
		slices.SortFunc(u.added, compareKeys)
		u.sorted = true
	}
	if !u.byID && (len(u.added) > mergeAddedAt || len(u.added)*16 > len(u.keys)) {
		merged := make([]updatedKey, 0, len(u.keys)+len(u.added))
		i, j := 0, 0
		for i < len(u.keys) || j < len(u.added) {
			if j == len(u.added) || (i < len(u.keys) && !u.added[j].before(u.keys[i])) {
				merged = append(merged, u.keys[i])
				i++
			} else {
				if db.validKey(u.added[j]) { // (added is short: its stale entries go now)
					merged = append(merged, u.added[j])
				}
				j++
			}
		}
		u.keys, u.added = merged, nil
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
// keys the few that can come first after the cursor (topUpdated, one
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
		from = &updatedKey{at, &session{id: id}}
	}
	u := &db.mu.byUpdated
	if u.byID {
		if want := 2*(opts.Limit+1) + 64; opts.Limit > 0 && want*8 < len(keys) {
			top, all := topUpdated(keys, from, want)
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

// walkKeys walks keys and added together in OrderUpdated from after
// from (all if nil), calling fn for each valid key with the prefix until
// fn returns false. If partial, keys are a selection: the walk stops
// where they end, before the keys of added past them. It returns the
// last key it walked and whether it ran out of keys with fn wanting more
// (only if partial).
func (db *DB) walkKeys(keys, added []updatedKey, from *updatedKey, partial bool, prefix string, fn func(s *session) bool) (last updatedKey, more bool) {
	i, j := 0, 0
	if from != nil {
		follows := func(k updatedKey) bool { return from.before(k) }
		i = sort.Search(len(keys), func(n int) bool { return follows(keys[n]) })
		j = sort.Search(len(added), func(n int) bool { return follows(added[n]) })
	}
	var prev *session
	for i < len(keys) || j < len(added) {
		if partial && i == len(keys) {
			return last, true
		}
		var k updatedKey
		inKeys := j == len(added) || (i < len(keys) && !added[j].before(keys[i]))
		if inKeys {
			k, i = keys[i], i+1
		} else {
			k, j = added[j], j+1
		}
		last = k
		if k.s == prev {
			continue // (in both lists)
		}
		if !db.validKey(k) {
			if inKeys && (k.s.erased || db.mu.sessions[k.s.id] != k.s) {
				db.mu.byUpdated.stale++ // (one re-keyed is counted as it is)
			}
			continue
		}
		prev = k.s
		if !strings.HasPrefix(k.s.id, prefix) {
			continue
		}
		if !fn(k.s) {
			return last, false
		}
	}
	return last, false
}

// topUpdated returns, sorted, the n keys that come first in OrderUpdated
// of those after from (all if nil), and whether they are all of them.
// One pass over keys, which it does not change: a bounded heap whose
// root is the last of those kept, so that most keys cost one comparison.
func topUpdated(keys []updatedKey, from *updatedKey, n int) (top []updatedKey, all bool) {
	heap := make([]updatedKey, 0, n)
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(heap) {
				return
			}
			if c+1 < len(heap) && heap[c].before(heap[c+1]) {
				c++ // (the later child)
			}
			if !heap[i].before(heap[c]) {
				return
			}
			heap[i], heap[c] = heap[c], heap[i]
			i = c
		}
	}
	all = true
	for _, k := range keys {
		if from != nil && !from.before(k) {
			continue
		}
		if len(heap) < n {
			heap = append(heap, k)
			for i := len(heap) - 1; i > 0; {
				p := (i - 1) / 2
				if !heap[p].before(heap[i]) {
					break
				}
				heap[p], heap[i] = heap[i], heap[p]
				i = p
			}
			continue
		}
		all = false
		if k.before(heap[0]) {
			heap[0] = k
			down(0)
		}
	}
	slices.SortFunc(heap, compareKeys)
	return heap, all
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
		u.keys, u.byID = sortByTime(u.keys), false
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
		sorted := sortByTime(keys)
		db.mu.Lock()
		defer db.mu.Unlock()
		if u := &db.mu.byUpdated; u.byID && len(u.keys) == len(keys) && &u.keys[0] == &keys[0] {
			u.keys, u.byID, u.sorting = sorted, false, false
		}
	}()
}

// sortByTime returns keys, which are in ID order, sorted into
// OrderUpdated by time alone: a stable radix sort (least significant
// digit first), so that sessions of one time stay in ID order. It does
// not write keys (pages read them meanwhile); the result may be keys
// itself if they were in order.
func sortByTime(keys []updatedKey) []updatedKey {
	if len(keys) < 2 {
		return keys
	}
	hi, lo := keys[0].at, keys[0].at
	for _, k := range keys {
		hi, lo = max(hi, k.at), min(lo, k.at)
	}
	// The digits are of hi-at: most recent first. (uint64 arithmetic:
	// any two int64 times are at most 2^64-1 apart.)
	span := uint64(hi) - uint64(lo)
	const bits = 11
	const mask = 1<<bits - 1
	var bufs [2][]updatedKey // (keys are only read: the passes write these in turn)
	src := keys
	for pass, shift := 0, 0; shift < 64 && span>>shift != 0; pass, shift = pass+1, shift+bits {
		if bufs[pass%2] == nil {
			bufs[pass%2] = make([]updatedKey, len(keys))
		}
		dst := bufs[pass%2]
		var next [mask + 1]int
		for _, k := range src {
			next[(uint64(hi)-uint64(k.at))>>shift&mask]++
		}
		pos := 0
		for d, n := range next {
			next[d], pos = pos, pos+n
		}
		for _, k := range src {
			d := (uint64(hi) - uint64(k.at)) >> shift & mask
			dst[next[d]] = k
			next[d]++
		}
		src = dst
	}
	return src
}

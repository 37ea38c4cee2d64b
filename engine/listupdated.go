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
	// byID: keys is in ID order, not sorted yet (seed)
	byID  bool
	added []updatedKey
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
	if u.byID {
		sortByTime(u.keys)
		u.byID = false
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
	if len(u.added) > mergeAddedAt || len(u.added)*16 > len(u.keys) {
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
func (db *DB) walkUpdated(ctx context.Context, opts ListOptions, fn func(s *session) bool) error {
	keys, added, err := db.prepareUpdated(ctx)
	if err != nil {
		return err
	}
	i, j := 0, 0
	if opts.After != "" {
		at, id, err := store.ParseUpdatedCursor(opts.After)
		if err != nil {
			return err
		}
		follows := func(k updatedKey) bool { return k.at < at || (k.at == at && k.s.id > id) }
		i = sort.Search(len(keys), func(n int) bool { return follows(keys[n]) })
		j = sort.Search(len(added), func(n int) bool { return follows(added[n]) })
	}
	var last *session
	for i < len(keys) || j < len(added) {
		var k updatedKey
		inKeys := j == len(added) || (i < len(keys) && !added[j].before(keys[i]))
		if inKeys {
			k, i = keys[i], i+1
		} else {
			k, j = added[j], j+1
		}
		if k.s == last {
			continue // (in both lists)
		}
		if !db.validKey(k) {
			if inKeys && (k.s.erased || db.mu.sessions[k.s.id] != k.s) {
				db.mu.byUpdated.stale++ // (one re-keyed is counted as it is)
			}
			continue
		}
		last = k.s
		if !strings.HasPrefix(k.s.id, opts.Prefix) {
			continue
		}
		if !fn(k.s) {
			return nil
		}
	}
	return nil
}

// sortByTime sorts keys, which are in ID order, into OrderUpdated, by
// time alone: a stable radix sort (least significant digit first), so
// that sessions of one time stay in ID order.
func sortByTime(keys []updatedKey) {
	if len(keys) < 2 {
		return
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
	src, dst := keys, make([]updatedKey, len(keys))
	for shift := 0; shift < 64 && span>>shift != 0; shift += bits {
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
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

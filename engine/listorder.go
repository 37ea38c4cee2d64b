package engine

import (
	"github.com/seglog/seglog/store"
	"slices"
	"sort"
	"strings"
)

// listOrder keeps the session IDs in order, so that a page of ListPage in
// ID order costs a binary search and the page's own sessions, not a sort
// of every ID: a million sessions took about 0.5 s a page, sorted each
// time. Guarded by db.mu.
//
// ids is sorted and may still hold IDs of sessions deleted since (they
// are skipped, and ids is built again once they are many); added holds
// the IDs of sessions made since ids was sorted (Create, Fork, and
// headers the fold met: another process's, a reopen's tail), merged in
// once they are many. The zero value is not built: the first page sorts
// every ID.
type listOrder struct {
	built bool
	ids   []string
	added []string
	// sorted: added is sorted and without repeats
	sorted bool
	// stale: entries of ids met that name no session any more
	stale int
}

// add records that a session of id was made. Called with db.mu held.
func (l *listOrder) add(id string) {
	if l.built {
		l.added = append(l.added, id)
		l.sorted = false
	}
}

// seed starts the order from every session, in ID order.
func (l *listOrder) seed(inOrder []*session) {
	ids := make([]string, len(inOrder))
	for i, s := range inOrder {
		ids[i] = s.id
	}
	*l = listOrder{built: true, ids: ids, sorted: true}
}

// reset forgets the order (the sessions were replaced wholesale: an open,
// a reload).
func (l *listOrder) reset() { *l = listOrder{} }

// mergeAddedAt is the size of added past which it is merged into ids.
const mergeAddedAt = 4096

// prepare brings the order up to date with sessions and returns the two
// sorted lists to walk together.
func (l *listOrder) prepare(sessions map[string]*session) (ids, added []string) {
	if !l.built || l.stale > len(l.ids)/4+mergeAddedAt {
		l.ids = l.ids[:0]
		for id, s := range sessions {
			if !s.erased {
				l.ids = append(l.ids, id)
			}
		}
		sort.Strings(l.ids)
		l.built, l.added, l.sorted, l.stale = true, nil, true, 0
	}
	if !l.sorted {
		slices.Sort(l.added)
		l.added = slices.Compact(l.added)
		l.sorted = true
	}
	if len(l.added) > mergeAddedAt || len(l.added)*16 > len(l.ids) {
		merged := make([]string, 0, len(l.ids)+len(l.added))
		i, j := 0, 0
		for i < len(l.ids) || j < len(l.added) {
			switch {
			case j == len(l.added) || (i < len(l.ids) && l.ids[i] < l.added[j]):
				merged = append(merged, l.ids[i])
				i++
			case i == len(l.ids) || l.added[j] < l.ids[i]:
				merged = append(merged, l.added[j])
				j++
			default: // the same ID in both
				merged = append(merged, l.ids[i])
				i, j = i+1, j+1
			}
		}
		l.ids, l.added = merged, nil
	}
	return l.ids, l.added
}

// walkIDs calls fn for each session opts does not skip by ID alone
// (Prefix; in ID order, After), in ID order, until fn returns false.
// Called with db.mu held; fn must not release it.
func (db *DB) walkIDs(opts store.ListOptions, fn func(id string, s *session) bool) {
	l := &db.mu.list
	ids, added := l.prepare(db.mu.sessions)
	from := opts.Prefix
	if opts.OrderBy == store.OrderID && opts.After > from {
		from = opts.After
	}
	i, j := sort.SearchStrings(ids, from), sort.SearchStrings(added, from)
	last := ""
	for i < len(ids) || j < len(added) {
		var id string
		if j == len(added) || (i < len(ids) && ids[i] <= added[j]) {
			id, i = ids[i], i+1
		} else {
			id, j = added[j], j+1
		}
		if id == last {
			continue // (in both lists)
		}
		last = id
		if !strings.HasPrefix(id, opts.Prefix) {
			if id > opts.Prefix {
				return // (past every ID with the prefix)
			}
			continue
		}
		if opts.Skips(id) {
			continue
		}
		s := db.mu.sessions[id]
		if s == nil || s.erased {
			l.stale++
			continue
		}
		if !fn(id, s) {
			return
		}
	}
}

package engine

import (
	"github.com/seglog/seglog/store"
)

// liveIDs yields the ID of every session (for listorder.IDs, when it
// builds its order). Called with db.mu held.
func (db *DB) liveIDs(yield func(string) bool) {
	for id, s := range db.mu.sessions {
		if !s.erased && !yield(id) {
			return
		}
	}
}

// idsOf returns the IDs of ss (every session in ID order: an open's, for
// listorder.IDs.Seed).
func idsOf(ss []*session) []string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.id
	}
	return ids
}

// walkIDs calls fn for each session opts does not skip by ID alone
// (Prefix; in ID order, After), in ID order, until fn returns false, over
// db.mu.list (package engine/internal/listorder). Called with db.mu held;
// fn must not release it.
func (db *DB) walkIDs(opts store.ListOptions, fn func(id string, s *session) bool) {
	from := ""
	if opts.OrderBy == store.OrderID {
		from = opts.After
	}
	db.mu.list.Walk(db.liveIDs, from, opts.Prefix, func(id string) (found, more bool) {
		if opts.Skips(id) {
			return true, true
		}
		s := db.mu.sessions[id]
		if s == nil || s.erased {
			return false, true
		}
		return true, fn(id, s)
	})
}

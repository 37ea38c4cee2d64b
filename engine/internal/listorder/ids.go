package listorder

import (
	"iter"
	"slices"
	"sort"
	"strings"
)

// IDs keeps the session IDs in order, so that a page of ListPage in ID
// order costs a binary search and the page's own sessions, not a sort of
// every ID: a million sessions took about 0.5 s a page, sorted each time.
//
// ids is sorted and may still hold IDs of sessions deleted since (they
// are skipped, and ids is built again once they are many); added holds
// the IDs of sessions made since ids was sorted (Create, Fork, and
// headers the fold met: another process's, a reopen's tail), merged in
// once they are many. The zero value is not built: the first page sorts
// every ID.
type IDs struct {
	built bool
	ids   []string
	added []string
	// sorted: added is sorted and without repeats
	sorted bool
	// stale: entries of ids met that name no session any more
	stale int
}

// MergeAddedAt is the size of a list of added entries past which it is
// merged into the sorted one (and of stale entries past which the order
// is built again, beyond a quarter of it).
const MergeAddedAt = 4096

// Add records that a session of id was made.
func (l *IDs) Add(id string) {
	if l.built {
		l.added = append(l.added, id)
		l.sorted = false
	}
}

// Seed starts the order from ids, every session's, sorted.
func (l *IDs) Seed(ids []string) {
	*l = IDs{built: true, ids: ids, sorted: true}
}

// Reset forgets the order (the sessions were replaced wholesale: an open,
// a reload).
func (l *IDs) Reset() { *l = IDs{} }

// prepare brings the order up to date, from every live ID if it is not
// built or too stale, and returns the two sorted lists to walk together.
func (l *IDs) prepare(live iter.Seq[string]) (ids, added []string) {
	if !l.built || l.stale > len(l.ids)/4+MergeAddedAt {
		l.ids = l.ids[:0]
		for id := range live {
			l.ids = append(l.ids, id)
		}
		sort.Strings(l.ids)
		l.built, l.added, l.sorted, l.stale = true, nil, true, 0
	}
	if !l.sorted {
		slices.Sort(l.added)
		l.added = slices.Compact(l.added)
		l.sorted = true
	}
	if len(l.added) > MergeAddedAt || len(l.added)*16 > len(l.ids) {
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

// Walk calls fn, in ID order, for each ID with prefix from the first at
// or after from, until fn reports that it wants no more. live, every live
// ID, is read only if the order must be built. fn reports whether id
// still names a session (found: an ID that does not is counted stale and
// the order built again once they are many) and whether to go on.
func (l *IDs) Walk(live iter.Seq[string], from, prefix string, fn func(id string) (found, more bool)) {
	ids, added := l.prepare(live)
	from = max(from, prefix)
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
		if !strings.HasPrefix(id, prefix) {
			if id > prefix {
				return // (past every ID with the prefix)
			}
			continue
		}
		found, more := fn(id)
		if !found {
			l.stale++
			continue
		}
		if !more {
			return
		}
	}
}

package listorder

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

type item struct{ id string }

func (i *item) ListID() string { return i.id }

// SortByTime sorts keys in ID order as a sort by (time, ID) does, for
// times of any span, ties and signs, and leaves the keys as they were
// (pages read them beside the sort).
func TestSortByTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, span := range []int64{1, 7, 1 << 12, 1 << 40, math.MaxInt64} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			keys := make([]Key[*item], n)
			for i := range keys {
				at := r.Int64N(span)
				if span == math.MaxInt64 && i%2 == 0 {
					at = -at - 1
				}
				keys[i] = Key[*item]{At: at, S: &item{fmt.Sprintf("s%05d", i)}}
			}
			before := slices.Clone(keys)
			want := slices.Clone(keys)
			slices.SortFunc(want, Compare[*item])
			if got := SortByTime(keys); !slices.Equal(got, want) {
				t.Fatalf("span %d, %d keys: sorted differently", span, n)
			}
			if !slices.Equal(keys, before) {
				t.Fatalf("span %d, %d keys: the keys sorted were written", span, n)
			}
		}
	}
}

// Top selects the keys a full sort puts first after a cursor, and says
// whether they are all of them.
func TestTop(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]Key[*item], 2000)
	for i := range keys {
		keys[i] = Key[*item]{At: r.Int64N(300), S: &item{fmt.Sprintf("s%05d", i)}} // (ties)
	}
	sorted := slices.SortedFunc(slices.Values(keys), Compare[*item])
	for _, from := range []int{-1, 0, 999, 1990} {
		var f *Key[*item]
		rest := sorted
		if from >= 0 {
			f, rest = &sorted[from], sorted[from+1:]
		}
		top, all := Top(keys, f, 20)
		if want := rest[:min(20, len(rest))]; !slices.Equal(top, want) {
			t.Fatalf("after %d: top differs from the sorted order", from)
		}
		if all != (len(rest) <= 20) {
			t.Fatalf("after %d: all %v with %d keys after the cursor", from, all, len(rest))
		}
	}
}

// Walk goes through keys and added as one list in order, from after a
// cursor, skipping repeats, keys valid refuses (reporting those of keys
// as gone) and other prefixes; a partial walk stops where its selection
// ends and says it wanted more.
func TestWalkKeys(t *testing.T) {
	a, b, c, d := &item{"a"}, &item{"b"}, &item{"c"}, &item{"xd"}
	keys := []Key[*item]{{At: 9, S: a}, {At: 7, S: b}, {At: 5, S: c}, {At: 3, S: d}}
	added := []Key[*item]{{At: 8, S: c}, {At: 7, S: b}}
	stale := map[Key[*item]]bool{{At: 5, S: c}: true} // (c was re-keyed at 8)
	valid := func(k Key[*item]) bool { return !stale[k] }
	walk := func(from *Key[*item], partial bool, prefix string, limit int) (ids []string, gone int, more bool) {
		_, more = Walk(keys, added, from, partial, prefix, valid, func(Key[*item]) { gone++ }, func(s *item) bool {
			ids = append(ids, s.id)
			return len(ids) < limit
		})
		return ids, gone, more
	}
	if ids, gone, _ := walk(nil, false, "", 10); strings.Join(ids, " ") != "a c b xd" || gone != 1 {
		t.Fatalf("walk: %v, %d gone; want a c b xd, 1 gone", ids, gone)
	}
	if ids, _, _ := walk(&keys[0], false, "", 2); strings.Join(ids, " ") != "c b" {
		t.Fatalf("walk after a, 2: %v", ids)
	}
	if ids, _, _ := walk(nil, false, "x", 10); strings.Join(ids, " ") != "xd" {
		t.Fatalf("walk of prefix x: %v", ids)
	}
	keys = keys[:2] // (a selection: a, b)
	if ids, _, more := walk(nil, true, "", 10); strings.Join(ids, " ") != "a c b" || !more {
		t.Fatalf("partial walk: %v, more %v; want a c b, more", ids, more)
	}
}

// Merge keeps the order and drops the added keys that are out of date.
func TestMerge(t *testing.T) {
	a, b, c := &item{"a"}, &item{"b"}, &item{"c"}
	keys := []Key[*item]{{At: 9, S: a}, {At: 5, S: c}}
	added := []Key[*item]{{At: 7, S: b}, {At: 4, S: a}}
	got := Merge(keys, added, func(k Key[*item]) bool { return k.S != a })
	if want := []Key[*item]{{At: 9, S: a}, {At: 7, S: b}, {At: 5, S: c}}; !slices.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
}

// IDs walks every live ID in order from a start and within a prefix,
// whether it was seeded, added to since (merged in once they are many) or
// never built; IDs no longer live are counted and, once many, the order
// is built again without them.
func TestIDs(t *testing.T) {
	live := map[string]bool{}
	all := func(yield func(string) bool) {
		for id := range live {
			if !yield(id) {
				return
			}
		}
	}
	var l IDs
	walk := func(from, prefix string) []string {
		var out []string
		l.Walk(all, from, prefix, func(id string) (bool, bool) {
			if !live[id] {
				return false, true
			}
			out = append(out, id)
			return true, true
		})
		return out
	}
	want := func(from, prefix string) []string {
		var out []string
		for _, id := range slices.Sorted(maps.Keys(live)) {
			if id >= from && strings.HasPrefix(id, prefix) {
				out = append(out, id)
			}
		}
		return out
	}
	check := func(what string) {
		t.Helper()
		for _, c := range [][2]string{{"", ""}, {"k0500", ""}, {"", "k01"}, {"k0150", "k01"}} {
			if got := walk(c[0], c[1]); !slices.Equal(got, want(c[0], c[1])) {
				t.Fatalf("%s: walk from %q, prefix %q: %d ids, want %d", what, c[0], c[1], len(got), len(want(c[0], c[1])))
			}
		}
	}
	var seed []string
	for i := range 1000 {
		id := fmt.Sprintf("k%04d", i*2)
		live[id] = true
		seed = append(seed, id)
	}
	l.Seed(seed)
	check("seeded")
	for i := range 500 { // (more than a sixteenth: merged in)
		id := fmt.Sprintf("k%04d", i*2+1)
		live[id] = true
		l.Add(id)
		l.Add(id) // (once)
		if i == 10 {
			check("a few added")
		}
	}
	check("many added")
	if len(l.added) != 0 {
		t.Fatalf("%d added not merged", len(l.added))
	}
	for id := range live {
		if id < "k0900" {
			delete(live, id)
		}
	}
	for range 5 {
		check("deleted")
	}
	if len(l.ids) != len(live) || l.stale != 0 {
		t.Fatalf("%d ids (%d stale), %d live: not built again without the deleted", len(l.ids), l.stale, len(live))
	}
	l.Reset()
	check("reset")
}

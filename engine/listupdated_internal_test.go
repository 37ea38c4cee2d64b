package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sortByTime sorts keys in ID order as a sort by (time, ID) does, for
// times of any span, ties and signs.
func TestSortByTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, span := range []int64{1, 7, 1 << 12, 1 << 40, math.MaxInt64} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			keys := make([]updatedKey, n)
			for i := range keys {
				at := r.Int64N(span)
				if span == math.MaxInt64 && i%2 == 0 {
					at = -at - 1
				}
				keys[i] = updatedKey{at, &session{id: fmt.Sprintf("s%05d", i)}}
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, compareKeys)
			sortByTime(keys)
			if !slices.Equal(keys, want) {
				t.Fatalf("span %d, %d keys: sorted differently", span, n)
			}
		}
	}
}

// A process that never lists in OrderUpdated does not hold a queue of
// every session changed, nor the sessions deleted since: past a bound the
// order is dropped (and built again on the next page in that order).
func TestRelistDropsTheOrder(t *testing.T) {
	db := &DB{}
	db.mu.sessions = map[string]*session{}
	db.mu.byUpdated.seed(nil, true)
	var ss []*session
	for i := range mergeAddedAt + 1 {
		s := &session{id: fmt.Sprint(i)}
		ss = append(ss, s)
		db.relist(s, false)
		db.relist(s, false) // (queued once)
	}
	if u := &db.mu.byUpdated; !u.built || len(u.moved) != mergeAddedAt+1 {
		t.Fatalf("built %v, %d queued; want %d", u.built, len(u.moved), mergeAddedAt+1)
	}
	db.relist(&session{id: "one more"}, false)
	if u := &db.mu.byUpdated; u.built || u.moved != nil {
		t.Fatalf("past the bound: built %v, %d queued", u.built, len(u.moved))
	}
	for _, s := range ss {
		if s.relisted {
			t.Fatalf("session %s still marked queued", s.id)
		}
	}
}

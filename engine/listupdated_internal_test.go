package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine/internal/listorder"
	"github.com/seglog/seglog/store"
)

// A process that never lists in OrderUpdated does not hold a queue of
// every session changed, nor the sessions deleted since: past a bound the
// order is dropped (and built again on the next page in that order).
func TestRelistDropsTheOrder(t *testing.T) {
	db := &DB{}
	db.mu.sessions = map[string]*session{}
	db.mu.byUpdated.seed(nil, true)
	var ss []*session
	for i := range listorder.MergeAddedAt + 1 {
		s := &session{id: fmt.Sprint(i)}
		ss = append(ss, s)
		db.relist(s, false)
		db.relist(s, false) // (queued once)
	}
	if u := &db.mu.byUpdated; !u.built || len(u.moved) != listorder.MergeAddedAt+1 {
		t.Fatalf("built %v, %d queued; want %d", u.built, len(u.moved), listorder.MergeAddedAt+1)
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

// Pages in OrderUpdated of an open's seed, before its sort is in place,
// come from a selection of the keys (topUpdated): they are the pages a
// full sort gives, also across sessions relisted meanwhile, and a filter
// that passes fewer than the selection holds sorts the keys there and
// then, and walks on from where the selection ended.
func TestPagesBeforeTheSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	db := &DB{}
	db.mu.sessions = map[string]*session{}
	var ss []*session
	for i := range 3000 {
		s := &session{id: fmt.Sprintf("s%05d", i), metaAt: 1, framed: 1, updatedAt: r.Int64N(500)} // (ties)
		ss = append(ss, s)
		db.mu.sessions[s.id] = s
	}
	want := func(prefix string) []string {
		ks := make([]updatedKey, 0, len(ss))
		for _, s := range ss {
			if strings.HasPrefix(s.id, prefix) {
				ks = append(ks, updatedKey{At: s.updatedAt, S: s})
			}
		}
		slices.SortFunc(ks, listorder.Compare[*session])
		var ids []string
		for _, k := range ks {
			ids = append(ids, k.S.id)
		}
		return ids
	}
	// page walks every page of limit sessions, as ListPage does (one
	// more than the page: the next exists).
	page := func(limit int, prefix string) []string {
		var all []string
		after := ""
		for {
			var keep []*session
			err := db.walkUpdated(context.Background(), store.ListOptions{OrderBy: store.OrderUpdated, Limit: limit, After: after, Prefix: prefix}, func(s *session) bool {
				keep = append(keep, s)
				return len(keep) <= limit
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(keep) > limit {
				keep = keep[:limit]
				for _, s := range keep {
					all = append(all, s.id)
				}
				last := keep[len(keep)-1]
				after = store.UpdatedCursor(last.updatedAt, last.id)
				continue
			}
			for _, s := range keep {
				all = append(all, s.id)
			}
			return all
		}
	}
	seed := func() {
		db.mu.byUpdated.seed(ss, true)
		db.mu.byUpdated.sorting = true // (as if the sort had not ended: none starts)
	}
	seed()
	if got := page(10, ""); !slices.Equal(got, want("")) {
		t.Fatalf("pages of 10 differ from the sorted order:\n%v\n%v", got[:20], want("")[:20])
	}
	if !db.mu.byUpdated.byID {
		t.Fatal("the pages sorted the keys")
	}
	// Sessions updated since the open are placed again, their old keys
	// skipped.
	for i := 0; i < len(ss); i += 7 {
		ss[i].updatedAt = r.Int64N(600)
		db.relist(ss[i], false)
	}
	if got := page(25, ""); !slices.Equal(got, want("")) {
		t.Fatal("pages of 25 after updates differ from the sorted order")
	}
	if !db.mu.byUpdated.byID {
		t.Fatal("the pages after updates sorted the keys")
	}
	// One session in a thousand passes the filter: the selection runs out.
	if got := page(5, "s001"); !slices.Equal(got, want("s001")) {
		t.Fatalf("filtered pages differ:\n%v\n%v", got, want("s001"))
	}
	if db.mu.byUpdated.byID {
		t.Fatal("a walk past the selection left the keys unsorted")
	}
	// The sort on its goroutine puts the keys in place.
	seed()
	db.mu.byUpdated.sorting = false
	db.mu.Lock()
	db.sortUpdated(false)
	db.mu.Unlock()
	db.wg.Wait()
	if u := &db.mu.byUpdated; u.byID || u.sorting {
		t.Fatalf("after the sort: byID %v, sorting %v", u.byID, u.sorting)
	}
	if got := page(100, ""); !slices.Equal(got, want("")) {
		t.Fatal("pages after the sort differ from the sorted order")
	}
}

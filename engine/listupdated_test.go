package engine_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// TestListPageUpdatedKeepsOrder pages through a store in OrderUpdated
// while sessions are updated (here and in another DB, as another
// process: this DB learns of those through its replay of the other's
// frames), made (Create, Fork, Migrate), deleted, and updated to an earlier time,
// and checks each full listing against the update times written (the
// order ListPage keeps between calls must follow all of it). With an
// index, an open seeds the order from it; without, the first page builds
// it from the sessions.
func TestListPageUpdatedKeepsOrder(t *testing.T) {
	t.Run("index", func(t *testing.T) { testListPageUpdatedKeepsOrder(t, nil) })
	t.Run("no-index", func(t *testing.T) { testListPageUpdatedKeepsOrder(t, &engine.Options{NoIndex: true}) })
}

func testListPageUpdatedKeepsOrder(t *testing.T, opts *engine.Options) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	want := map[string]int64{} // the UpdatedAt of each session
	// write appends an event at time at to session id through d (creating
	// the session if it is new).
	write := func(d *engine.DB, id string, at int64) {
		t.Helper()
		h, err := d.Open(ctx, id, store.Write)
		if err != nil {
			if h, err = d.Create(ctx, enginetest.Meta(id)); err != nil {
				t.Fatal(err)
			}
		}
		ev := event.Event{Seq: h.Len(), Type: "turn/start", Time: at, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, h.Len()))}
		if err := h.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		want[id] = at
	}
	check := func(label string, limit int) {
		t.Helper()
		var got []string
		after := ""
		for {
			page, next, err := db.ListPage(ctx, store.ListOptions{OrderBy: store.OrderUpdated, After: after, Limit: limit})
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			for _, s := range page {
				got = append(got, fmt.Sprintf("%s@%d", s.Header.ID, s.UpdatedAt))
			}
			if next == "" {
				break
			}
			after = next
		}
		var ids []string
		for id := range want {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int {
			if c := cmp.Compare(want[b], want[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		var exp []string
		for _, id := range ids {
			exp = append(exp, fmt.Sprintf("%s@%d", id, want[id]))
		}
		if !slices.Equal(got, exp) {
			for i := range min(len(got), len(exp)) {
				if got[i] != exp[i] {
					t.Fatalf("%s: listed %d sessions, want %d; at %d: %s, want %s", label, len(got), len(exp), i, got[i], exp[i])
				}
			}
			t.Fatalf("%s: listed %d sessions, want %d", label, len(got), len(exp))
		}
	}
	for i := range 200 {
		write(db, fmt.Sprintf("s%03d", i), 2000+int64(i*37%200)*10)
	}
	check("first listing", 7)
	for i := range 20 { // updated here, one to an earlier time
		write(db, fmt.Sprintf("s%03d", i*9), 5000+int64(i))
	}
	write(db, "s100", 1500)
	check("after updates here", 9)
	for i := range 10 { // updated and made by another process
		write(other, fmt.Sprintf("s%03d", 150+i), 6000+int64(i*3))
		write(other, fmt.Sprintf("o%03d", i), 5500+int64(i))
	}
	write(other, "s101", 1400)
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("after updates in another process", 11)
	for i := range 15 {
		if err := db.Delete(ctx, fmt.Sprintf("s%03d", 50+i)); err != nil {
			t.Fatal(err)
		}
		delete(want, fmt.Sprintf("s%03d", 50+i))
	}
	fh, err := db.Fork(ctx, "s010", 1, store.Header{ID: "f010", CreatedAt: 1000, IsSeeded: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := db.Stat(ctx, "f010")
	if err != nil {
		t.Fatal(err)
	}
	want["f010"] = st.UpdatedAt
	v2 := v2Events(1)
	createV2(t, db, "m000", v2)
	want["m000"] = v2[len(v2)-1].Time
	check("with a session to migrate", 5)
	for i := range v2 {
		v2[i].Time += 3000
	}
	createV2(t, db, "m001", v2)
	snap, err := db.Migrate(ctx, "m000")
	if err != nil {
		t.Fatal(err)
	}
	want["m000"] = snap.UpdatedAt
	want["m001"] = v2[len(v2)-1].Time
	ph, err := db.Create(ctx, store.Header{ID: "p000", CreatedAt: 4321}) // nothing written yet: listed at its creation
	if err != nil {
		t.Fatal(err)
	}
	defer ph.Close()
	want["p000"] = 4321
	check("after deletes, a fork, a pending session", 13)
	for round := range 3 { // many updates: merged into the order, which is built again
		for i := range 150 {
			id := fmt.Sprintf("s%03d", (i*7+round)%200)
			if _, ok := want[id]; ok {
				write(db, id, 7000+int64(round*1000+i*(i%3)))
			}
		}
		check(fmt.Sprintf("after many updates, round %d", round), 17)
	}
	if err := ph.Close(); err != nil {
		t.Fatal(err)
	}
	delete(want, "p000") // (closed unwritten: it never was)
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = engine.OpenStore(t, dir, opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("reopened", 19)
	write(db, "s001", 9999)
	check("reopened, after an update", 23)
}

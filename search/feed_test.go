package search_test

import (
	"context"
	"database/sql"
	"iter"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// expiring is a store whose change feed refuses, once armed, any cursor
// but the start with store.ErrCursorExpired (what the engine answers
// when compaction removed the frame a cursor names).
type expiring struct {
	store.Store
	armed    atomic.Bool
	expiredN atomic.Int32
}

func (s *expiring) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	if from != "" && s.armed.Load() {
		s.expiredN.Add(1)
		return func(yield func(store.Change, error) bool) {
			yield(store.Change{}, &store.CursorError{Cursor: from, Kind: store.ErrCursorExpired, Reason: "test"})
		}
	}
	if !s.armed.Load() {
		return s.Store.Changes(ctx, from, opts...)
	}
	// From the start, once armed: compaction purged the deleted
	// session b's incarnation, create and delete alike.
	return func(yield func(store.Change, error) bool) {
		for c, err := range s.Store.Changes(ctx, from, opts...) {
			if err == nil && c.Session == "b" {
				continue
			}
			if !yield(c, err) {
				return
			}
		}
	}
}

// meta reads the index's stored feed cursor, and its rows per session.
func indexState(t *testing.T, f *fixture) (cursor string, docs map[string]int) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(f.dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT v FROM meta WHERE k = 'cursor'`).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	docs = map[string]int{}
	rs, err := db.Query(`SELECT s.id, count(d.rowid), count(DISTINCT d.seq) FROM sessions s LEFT JOIN docs d ON d.sid = s.sid GROUP BY s.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		var n, distinct int
		if err := rs.Scan(&id, &n, &distinct); err != nil {
			t.Fatal(err)
		}
		if n != distinct {
			t.Fatalf("session %q: %d rows for %d events: an event indexed twice", id, n, distinct)
		}
		docs[id] = n
	}
	return cursor, docs
}

// lastCursor is the cursor past the store's last change.
func lastCursor(t *testing.T, st store.Store) store.Cursor {
	t.Helper()
	var cur store.Cursor
	for c, err := range st.Changes(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		cur = c.Cursor
	}
	return cur
}

// The index keeps the feed's cursor with its rows: after a catch-up it
// is the cursor past the store's last change, and catching up again
// from it adds nothing.
func TestIndexKeepsTheFeedCursor(t *testing.T) {
	f := newFixture(t)
	f.session("a", "/w/a", "alpha one", "alpha two")
	f.session("b", "/w/b", "beta")
	f.search(search.Query{Text: "alpha"})
	cur, docs := indexState(t, f)
	if want := lastCursor(t, f.st); cur != string(want) {
		t.Fatalf("stored cursor %q, want the feed's last %q", cur, want)
	}
	if docs["a"] != 2 || docs["b"] != 1 || len(docs) != 2 {
		t.Fatalf("docs per session %v, want a:2 b:1", docs)
	}
	// A title event names the session; appends move the cursor on.
	h, err := f.st.Open(f.ctx, "b", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(f.ctx, plain(1, store.TitleEvent, `{"title":"The beta plan"}`), msgEvent(2, "assistant/message", "beta again")); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(f.ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	r := f.search(search.Query{Text: "beta"})
	if ids(r) != "b:0,2" && ids(r) != "b:2,0" {
		t.Fatalf("after append: got %q", ids(r))
	}
	if s := r.Sessions[0]; s.Title != "The beta plan" || s.Cwd != "/w/b" || s.UpdatedAt != msgEvent(2, "", "").Time {
		t.Fatalf("session of the hits: %+v, want the title, cwd and last event's time", s)
	}
	cur2, docs := indexState(t, f)
	if cur2 == cur || cur2 != string(lastCursor(t, f.st)) {
		t.Fatalf("cursor after append %q (was %q)", cur2, cur)
	}
	if docs["b"] != 2 {
		t.Fatalf("docs of b %d, want 2", docs["b"])
	}
	// A second index on the same files (another process) reads on
	// from the stored cursor: nothing twice.
	ix2 := f.open()
	if err := ix2.CatchUp(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, docs := indexState(t, f); docs["a"] != 2 || docs["b"] != 2 {
		t.Fatalf("after a second catch-up %v", docs)
	}
}

// A stored cursor the store no longer holds (ErrCursorExpired) makes the
// index start again from the feed's start: what it held is dropped, the
// store's sessions indexed once, a deleted one gone even when the feed
// no longer shows it at all (its incarnation purged by compaction).
func TestExpiredCursorRebuilds(t *testing.T) {
	f := newFixture(t)
	st := &expiring{Store: f.st}
	f.st = st
	f.ix = f.open()
	f.session("a", "", "alpha")
	f.session("b", "", "alpha beta")
	if got := ids(f.search(search.Query{Text: "alpha", Order: search.Oldest})); got != "a:0 b:0" {
		t.Fatalf("got %q", got)
	}
	if err := st.Delete(f.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	f.session("c", "", "alpha gamma")
	st.armed.Store(true)
	if got := ids(f.search(search.Query{Text: "alpha", Order: search.Oldest})); got != "a:0 c:0" {
		t.Fatalf("after expiry: got %q", got)
	}
	if st.expiredN.Load() != 1 {
		t.Fatalf("feed asked from an expired cursor %d times, want 1", st.expiredN.Load())
	}
	_, docs := indexState(t, f)
	if len(docs) != 2 || docs["a"] != 1 || docs["c"] != 1 {
		t.Fatalf("after the rebuild %v, want a:1 c:1", docs)
	}
}

// A session's UpdatedAt in a result is the store's (Snapshot.UpdatedAt:
// its last event's time), also when its events are older than its
// creation (an imported log, created today with last month's events).
func TestUpdatedIsTheStores(t *testing.T) {
	f := newFixture(t)
	h, err := f.st.Create(f.ctx, store.Header{ID: "old", CreatedAt: 1_800_000_000_000, Cwd: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(f.ctx, msgEvent(0, "user/message", "gamma one"), msgEvent(1, "assistant/message", "gamma two")); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	snap, err := f.st.Stat(f.ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	r := f.search(search.Query{Text: "gamma"})
	if len(r.Sessions) != 1 || r.Sessions[0].UpdatedAt != snap.UpdatedAt || snap.UpdatedAt != msgEvent(1, "", "").Time {
		t.Fatalf("sessions %+v; want UpdatedAt %d, the store's", r.Sessions, snap.UpdatedAt)
	}
}

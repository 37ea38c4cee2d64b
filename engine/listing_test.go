package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// titled is testgen's events first..first+n-1 with a session/title at
// seq title (if within them).
func titled(first uint64, n int, title uint64, name string) []event.Event {
	evs := testgen.Events(first, n, 300)
	if title >= first && title < first+uint64(n) {
		e := &evs[title-first]
		e.Type, e.Ignorable, e.SourceEventSeqs, e.SurfaceOp = "session/title", false, nil, nil
		e.Data = json.RawMessage(`{"title":` + string(must(json.Marshal(name))) + `}`)
	}
	return evs
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// wantListed checks db's Stat of id.
func wantListed(t *testing.T, what string, db *DB, id, title string, updatedAt int64) {
	t.Helper()
	snap, err := db.Stat(context.Background(), id)
	if err != nil || snap.Title != title || snap.UpdatedAt != updatedAt {
		t.Errorf("%s: Stat(%s): title %q, updated %d, %v; want %q, %d", what, id, snap.Title, snap.UpdatedAt, err, title, updatedAt)
	}
}

// TestListingSurvivesReopen: a session's title (set in an early frame)
// and update time are kept in the index's record, so that a reopen knows
// them without reading the log; a reopen without the index, or with
// records of an older build (nothing of them known), reads them from the
// frames.
func TestListingSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{FrameBytes: 4 << 10, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	evs := titled(0, 200, 3, "Early title")
	appendFlushed(t, h, evs[:100]...)
	appendFlushed(t, h, evs[100:]...)
	last := evs[len(evs)-1].Time
	if _, err := db.Create(ctx, store.Header{ID: "empty", CreatedAt: 7}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantListed(t, "written", db, "s", "Early title", last)
	wantListed(t, "written", db, "empty", "", 7)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The index's records hold it, as of all their events.
	x, err := index.Open(dir+"/index.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs []index.Session
	if err := x.Sessions(func(s index.Session) error { recs = append(recs, s); return nil }); err != nil {
		t.Fatal(err)
	}
	cp, err := x.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == "s" && (r.Title != "Early title" || r.UpdatedAt != last || r.MetaEvents != 200 || r.Events != 200) {
			t.Errorf("index record of s: %+v", r)
		}
	}
	x.Close()

	db, err = openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	s := db.mu.sessions["s"]
	known := !s.stale() && len(s.frames) == 0 && !s.loaded // from the record alone, no frame read
	db.mu.Unlock()
	if !known {
		t.Errorf("after a reopen with the index, s's listing is not known from its record")
	}
	wantListed(t, "reopened with the index", db, "s", "Early title", last)
	wantListed(t, "reopened with the index", db, "empty", "", 7)
	db.Close()

	// Without the index: read from the frames.
	db, err = openStore(t, dir, &Options{NoIndex: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	wantListed(t, "reopened without the index", db, "s", "Early title", last)
	wantListed(t, "reopened without the index", db, "empty", "", 7)
	db.Close()

	// Records as an older build wrote them: nothing known, read from the
	// frames (the title from the first ones).
	x, err = index.Open(dir+"/index.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Title, recs[i].UpdatedAt, recs[i].MetaEvents = "", 0, 0
	}
	if err := x.Apply(&index.Update{Sessions: recs, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	x.Close()
	db, err = openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	page, _, err := db.ListPage(ctx, store.ListOptions{OrderBy: store.OrderUpdated})
	if err != nil || len(page) != 2 || page[0].Header.ID != "s" || page[0].Title != "Early title" || page[0].UpdatedAt != last || page[1].UpdatedAt != 7 {
		t.Errorf("list after older records: %+v, %v", page, err)
	}
	// and an append continues from what was read.
	h, err = db.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	more := titled(200, 10, 205, "Later")
	appendFlushed(t, h, more...)
	wantListed(t, "appended after older records", db, "s", "Later", more[9].Time)
}

// TestListingOtherProcess: a DB on the same store (another process) sees
// the title and update time of the sessions the first one writes, as
// they change, and so does a reopen after both wrote.
func TestListingOtherProcess(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1, FrameBytes: 4 << 10})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	ro := liveOpen(t, dir, &Options{ReadOnly: true})

	a, err := w1.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := titled(0, 60, 2, "A one")
	appendFlushed(t, a, evs...)
	for _, db := range []*DB{w2, ro} {
		wantListed(t, "the other process's session", db, "a", "A one", evs[59].Time)
	}
	more := titled(60, 5, 61, "A two")
	appendFlushed(t, a, more...)
	for _, db := range []*DB{w2, ro} {
		wantListed(t, "retitled by the other process", db, "a", "A two", more[4].Time)
	}
	b, err := w2.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	bevs := titled(0, 3, 0, "B")
	bevs[2].Time = more[4].Time + 1000
	appendFlushed(t, b, bevs...)
	page, _, err := w1.ListPage(ctx, store.ListOptions{OrderBy: store.OrderUpdated})
	if err != nil || len(page) != 2 || page[0].Header.ID != "b" || page[0].Title != "B" || page[1].Title != "A two" {
		t.Errorf("w1's list by update: %+v, %v", page, err)
	}
	// w1 checkpoints b's frames, which it followed (their listing not
	// noted): a reopen still shows it.
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{w1, w2, ro} {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := liveOpen(t, dir, nil)
	wantListed(t, "reopened", db, "a", "A two", more[4].Time)
	wantListed(t, "reopened", db, "b", "B", bevs[2].Time)
}

package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// The write open's check of the stored log (docs/DESIGN.md, "A write open
// checks each event once"): what it must read, counted by
// Metrics.OpenCheckedEvents.

// openChecked opens id for writing in db and returns how many stored
// events the open read to check them; the handle is closed.
func openChecked(t *testing.T, db *engine.DB, id string) uint64 {
	t.Helper()
	before := db.Metrics().OpenCheckedEvents
	h, err := db.Open(context.Background(), id, store.Write)
	if err != nil {
		t.Fatalf("write open of %s: %v", id, err)
	}
	n := db.Metrics().OpenCheckedEvents - before
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

func appendSession(t *testing.T, db *engine.DB, id string, evs []event.Event) {
	t.Helper()
	ctx := context.Background()
	h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// After a restart, a write open reads nothing of a log the index's record
// says is checked under the same catalog: the events a write handle
// appended (they passed its catalog check, and their placement the seed
// rules), and those an earlier write open checked. A write open under a
// catalog with another fingerprint checks the log again (and the next
// open under it, after a restart, does not: the checkpoint wrote the new
// count without a frame to index).
func TestWriteOpenSkipsCheckedAfterRestart(t *testing.T) {
	dir := engine.CheckedDir(t)
	open := func(c *event.Catalog) *engine.DB {
		t.Helper()
		db, err := engine.OpenStore(t, dir, &engine.Options{Catalog: c})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open(event.NewCatalog())
	evs := testgen.Events(0, 40, 100)
	appendSession(t, db, "s", evs)
	if n := openChecked(t, db, "s"); n != 0 {
		t.Errorf("write open in the DB that appended the log checked %d events, want 0", n)
	}
	db.Close()

	db = open(event.NewCatalog())
	if n := openChecked(t, db, "s"); n != 0 {
		t.Errorf("write open after a restart checked %d events, want 0 (its appends were checked)", n)
	}
	// Appended after the open: counted as they are placed.
	ctx := context.Background()
	h, err := db.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(40, 10, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// Another catalog: another fingerprint. The log is checked again,
	// once.
	wider := func() *event.Catalog { return event.NewCatalog("acme/one") }
	db = open(wider())
	if n := openChecked(t, db, "s"); n != 50 {
		t.Errorf("write open under another catalog checked %d events, want all 50", n)
	}
	if n := openChecked(t, db, "s"); n != 0 {
		t.Errorf("second write open under it checked %d events, want 0", n)
	}
	db.Close()
	db = open(wider())
	defer db.Close()
	if n := openChecked(t, db, "s"); n != 0 {
		t.Errorf("write open after a restart under that catalog checked %d events, want 0 (the close's checkpoint wrote the count)", n)
	}
	engine.SameEvents(t, "log", engine.ReadAll(t, db, "s"), append(evs, testgen.Events(40, 10, 100)...))
}

// A count checked under a wider catalog says nothing under a narrower
// one: the write open checks again and refuses the event the narrower
// catalog does not know, after a restart (the index's record) and in a
// DB whose catalog it is not.
func TestWriteOpenRechecksUnderANarrowerCatalog(t *testing.T) {
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, &engine.Options{Catalog: event.NewCatalog("acme/one")})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 20, 100)
	evs = append(evs, event.Event{Seq: 20, Type: "acme/one", Time: 1, Data: []byte(`{}`)})
	appendSession(t, db, "s", evs)
	if n := openChecked(t, db, "s"); n != 0 {
		t.Errorf("write open under the wider catalog checked %d events, want 0", n)
	}
	db.Close()
	db, err = engine.OpenStore(t, dir, &engine.Options{Catalog: event.NewCatalog()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Open(context.Background(), "s", store.Write)
	var ue *store.UnsupportedEventError
	if !errors.As(err, &ue) || ue.Seq != 20 || ue.Type != "acme/one" {
		t.Errorf("write open under a narrower catalog: %v, want *UnsupportedEventError for acme/one at seq 20", err)
	}
	db.Close()
	// (The store check at the end reads it with the wider catalog.)
	db, err = engine.OpenStore(t, dir, &engine.Options{Catalog: event.NewCatalog("acme/one")})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

// Events a write handle appended that break the seed rules are not
// counted as checked: the write open after a restart reads them and
// refuses the log (ErrSeed), as it does in the DB that appended them.
func TestWriteOpenAfterRestartChecksBadSeedMarker(t *testing.T) {
	dir := engine.CheckedDir(t)
	engine.ExpectProblem(t, dir, "bad seed marker")
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := db.Create(ctx, store.Header{ID: "plain", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(0, 20, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil { // (a frame of its own)
		t.Fatal(err)
	}
	if err := h.Append(ctx, event.Event{Seq: 20, Type: "session/end-seed", Time: 1, Data: []byte(`{"inherited":true}`)}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := db.Metrics().OpenCheckedEvents
	if _, err := db.Open(context.Background(), "plain", store.Write); !errors.Is(err, store.ErrSeed) {
		t.Errorf("write open of an unseeded log with a tagged marker: %v, want ErrSeed", err)
	}
	if n := db.Metrics().OpenCheckedEvents - before; n != 1 {
		t.Errorf("the open checked %d events, want 1 (the marker's frame: the 20 before it were checked)", n)
	}
}

// A log whose index record is lost (the index rebuilt from the segments)
// is checked again, whole.
func TestWriteOpenChecksALogTheIndexLost(t *testing.T) {
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	appendSession(t, db, "s", testgen.Events(0, 30, 100))
	db.Close()
	if err := os.Remove(filepath.Join(dir, "index.db")); err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := openChecked(t, db, "s"); n != 30 {
		t.Errorf("write open of a log the index lost checked %d events, want 30", n)
	}
}

// A migrated session is a new incarnation: its write open checks the
// migrated log whole.
func TestWriteOpenChecksAMigratedLog(t *testing.T) {
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := v2Events(2)
	want, err := recovery.MigrateV2("old", src)
	if err != nil {
		t.Fatal(err)
	}
	createV2(t, db, "old", src)
	if _, err := db.Migrate(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	if n := openChecked(t, db, "old"); n != uint64(len(want)) {
		t.Errorf("write open of a migrated session checked %d events, want %d", n, len(want))
	}
}

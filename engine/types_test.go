package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// TestRegisterTypes: types one process records in the store are known to
// every other DB of it: one opened later, and one already open, which
// looks again when it meets an unknown type (on append and on read).
// Bad names record nothing; a damaged file does not stop the store from
// opening, and is not overwritten.
func TestRegisterTypes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := engine.OpenStore(t, dir, nil) // already open when a records the types
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deploy := event.Event{Seq: 0, Type: "acme/deploy", Time: 1, Data: []byte(`{}`)}
	ha, _ := a.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err := ha.Append(ctx, deploy); !errors.Is(err, store.ErrUnsupportedEvent) {
		t.Fatalf("append before registering: %v", err)
	}
	for _, bad := range []string{"", "a b", "*", "acme*", "/*", "x\x00"} {
		if err := a.RegisterTypes(ctx, "ok/one", bad); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("RegisterTypes(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
	if types, _ := engine.RecordedTypes(dir); len(types) != 0 {
		t.Fatalf("a refused call recorded %v", types)
	}
	if err := a.RegisterTypes(ctx, "acme/*", "tool/x"); err != nil {
		t.Fatal(err)
	}
	if err := ha.Append(ctx, deploy); err != nil {
		t.Fatalf("append after registering: %v", err)
	}
	if err := ha.Close(); err != nil {
		t.Fatal(err)
	}
	// b learns them when it meets one: a read of the session, and an append.
	rb, err := b.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := rb.Read(ctx, 0, -1); err != nil || len(evs) != 1 {
		t.Fatalf("read in the other DB: %v, %v", evs, err)
	}
	hb, _ := b.Create(ctx, store.Header{ID: "t", CreatedAt: 1})
	if err := hb.Append(ctx, event.Event{Seq: 0, Type: "tool/x", Time: 1, Data: []byte(`{}`)}); err != nil {
		t.Fatalf("append in the other DB: %v", err)
	}
	hb.Close()
	// A DB opened later knows them from the start; so does a read-only one.
	c, err := engine.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := engine.RecordedTypes(dir); err != nil || !slices.Equal(got, []string{"acme/*", "tool/x"}) {
		t.Errorf("recorded %v, %v", got, err)
	}
	rc, _ := c.Open(ctx, "t", store.Read)
	if _, err := rc.Read(ctx, 0, -1); err != nil {
		t.Errorf("read in a DB opened later: %v", err)
	}
	c.Close()
	// A damaged file: the store opens (a warning), and it is not overwritten.
	path := filepath.Join(dir, "types.json")
	os.WriteFile(path, []byte("{nope"), 0o644)
	d, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatalf("open with a damaged types.json: %v", err)
	}
	defer d.Close()
	if err := d.RegisterTypes(ctx, "more/*"); !errors.Is(err, engine.ErrTypesFile) {
		t.Errorf("RegisterTypes over a damaged file: %v, want ErrTypesFile", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{nope" {
		t.Errorf("the damaged file was overwritten: %q", b)
	}
	// The files are the store's own: a first opener and check leave them.
	os.WriteFile(path, []byte(`{"types":["acme/*"]}`), 0o644)
	engine.KeepBroken(t, dir, `types.json now leaves out "tool/x", which session t holds: a read fails closed`)
	os.WriteFile(path+".tmp", []byte("half"), 0o644) // a writer died mid-write
	d.Close()
	a.Close()
	b.Close()
	rep, err := engine.Check(dir, nil)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v, %v", rep.Problems, err)
	}
	e, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.RegisterTypes(ctx, "z/*"); err != nil {
		t.Fatalf("RegisterTypes after a dead writer's temporary: %v", err)
	}
	if got, _ := engine.RecordedTypes(dir); !slices.Equal(got, []string{"acme/*", "z/*"}) {
		t.Errorf("recorded %v", got)
	}
}

// TestRecordedTypesSortedOnce: a types.json edited by hand, out of order
// and with a type twice, is read sorted and each type once, and
// RegisterTypes rewrites it so.
func TestRecordedTypesSortedOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := os.WriteFile(filepath.Join(dir, "types.json"), []byte(`{"types":["zz/b","acme/*","acme/*"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if types, err := engine.RecordedTypes(dir); err != nil || !slices.Equal(types, []string{"acme/*", "zz/b"}) {
		t.Errorf("RecordedTypes of a hand-edited file: %q, %v; want [acme/* zz/b]", types, err)
	}
	if err := db.RegisterTypes(ctx, "new/t"); err != nil {
		t.Fatal(err)
	}
	if types, err := engine.RecordedTypes(dir); err != nil || !slices.Equal(types, []string{"acme/*", "new/t", "zz/b"}) {
		t.Errorf("RecordedTypes after RegisterTypes: %q, %v; want [acme/* new/t zz/b]", types, err)
	}
}

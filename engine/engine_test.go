package engine

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	db, err := openStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s-1", CreatedAt: 1000})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 500, 300)
	if err := h.Append(ctx, evs[:200]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs[200:]...); err != nil {
		t.Fatal(err)
	}
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Fatalf("read before flush mismatch (-want +got):\n%s", diff)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := db.Stat(ctx, "s-1")
	if err != nil || snap.EventCount != 500 {
		t.Fatalf("Stat = %+v, %v", snap, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = openStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snap2, err := db.Stat(ctx, "s-1")
	if err != nil || snap2.Revision != snap.Revision || snap2.EventCount != 500 {
		t.Fatalf("Stat after reopen = %+v, %v (before %+v)", snap2, err, snap)
	}
	r, err := db.Open(ctx, "s-1", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err = r.Read(ctx, 100, 50)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs[100:150], got); diff != "" {
		t.Fatalf("read after reopen mismatch (-want +got):\n%s", diff)
	}
}

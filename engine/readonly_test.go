package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := db.Create(ctx, enginetest.Meta("s"))
	h.Append(ctx, enginetest.OneTurn()...)
	h.Close()
	db.Close()
	if err := tearTail(vfs.Default, dir); err != nil {
		t.Fatal(err)
	}
	ids, _ := segment.List(nil, dir)
	before, _ := vfs.ReadFile(vfs.Default, dir+"/"+segment.Name(ids[len(ids)-1]))

	ro, err := engine.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ro.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(enginetest.OneTurn(), got); diff != "" {
		t.Errorf("read-only read mismatch (-want +got):\n%s", diff)
	}
	if _, err := ro.Create(ctx, enginetest.Meta("t")); !errors.Is(err, store.ErrReadOnlyStore) {
		t.Errorf("Create = %v", err)
	}
	if _, err := ro.Open(ctx, "s", store.Write); !errors.Is(err, store.ErrReadOnlyStore) {
		t.Errorf("Open(Write) = %v", err)
	}
	if err := ro.Flush(ctx); !errors.Is(err, store.ErrReadOnlyStore) {
		t.Errorf("Flush = %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := vfs.ReadFile(vfs.Default, dir+"/"+segment.Name(ids[len(ids)-1]))
	if string(before) != string(after) {
		t.Error("a read-only open changed the newest segment (the torn tail must be left alone)")
	}
	// A read-write open still repairs it.
	db, err = engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

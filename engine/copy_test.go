package engine_test

import (
	"context"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// TestCopySharesForks: store.Copy into a local store makes a fork whose
// parent it copied as a fork there, sharing the parent's frames: the
// copy of a fork of 2,000 events stores its header, its marker and its
// own events, not the 2,000 again.
func TestCopySharesForks(t *testing.T) {
	ctx := context.Background()
	open := func() *engine.DB {
		db, err := engine.OpenStore(t, engine.CheckedDir(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	src, dst := open(), open()
	p, err := src.Create(ctx, enginetest.Meta("p"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, forkEvents(0, 2000, "p")...); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := src.Fork(ctx, "p", 2000, enginetest.Meta("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Append(ctx, forkEvents(2001, 10, "c")...); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := store.Copy(ctx, enginetest.Local(dst), enginetest.Local(src), store.CopyOptions{})
	if err != nil || len(res) != 2 || res[1].ID != "c" || res[1].Status != store.CopyForked {
		t.Fatalf("Copy: %+v, %v", res, err)
	}
	ps, err := dst.Stat(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := dst.Stat(ctx, "c")
	if err != nil || cs.EventCount != 2011 {
		t.Fatalf("the fork's copy: %+v, %v", cs, err)
	}
	if cs.SizeBytes*20 > ps.SizeBytes {
		t.Errorf("the fork's copy stores %d bytes, its parent's %d: not shared", cs.SizeBytes, ps.SizeBytes)
	}
	t.Logf("parent %d bytes, fork %d bytes", ps.SizeBytes, cs.SizeBytes)
}

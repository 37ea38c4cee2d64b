package engine_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// An fsync error poisons the store: the failing flush and every later
// append and flush fail, and the store never retries the fsync.
func TestFsyncErrorPoisons(t *testing.T) {
	for _, fault := range []vfs.Rule{
		{Op: vfs.OpSync, Nth: 1},
		{Op: vfs.OpSync, Nth: 1, Err: syscall.EIO},
	} {
		ctx := context.Background()
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db, err := engine.OpenStore(t, "/db", &engine.Options{FS: ff, NoPreallocate: true})
		if err != nil {
			t.Fatal(err)
		}
		h, err := db.Create(ctx, enginetest.Meta("s"))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
			t.Fatal(err)
		}
		ff.Add(fault)
		if err := h.Flush(ctx); err == nil {
			t.Fatalf("%+v: flush succeeded despite the fault", fault)
		}
		syncs := ff.Count(vfs.OpSync)
		for range 3 {
			if err := h.Flush(ctx); err == nil {
				t.Fatalf("%+v: a later flush succeeded", fault)
			}
			if err := db.Flush(ctx); err == nil {
				t.Fatalf("%+v: a later service flush succeeded", fault)
			}
		}
		if err := h.Append(ctx, enginetest.Turn2()...); err == nil {
			t.Fatalf("%+v: append after poisoning succeeded", fault)
		}
		if got := ff.Count(vfs.OpSync); got != syncs {
			t.Errorf("%+v: %d more fsyncs after the failure: never retry", fault, got-syncs)
		}
		// After the failure, a power cut and a reopen recover to a
		// consistent prefix (nothing was acknowledged).
		crashed := mem.CrashClone(vfs.CrashConfig{KeepAll: true})
		db.Close()
		db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: true})
		if err != nil {
			t.Fatalf("%+v: reopen: %v", fault, err)
		}
		if r, err := db2.Open(ctx, "s", store.Read); err == nil {
			got, err := r.Read(ctx, 0, -1)
			if err != nil || len(got) > 6 {
				t.Fatalf("%+v: after reopen %d events, %v", fault, len(got), err)
			}
			for i := range got {
				if got[i].Type != enginetest.OneTurn()[i].Type {
					t.Fatalf("%+v: event %d is not what was appended", fault, i)
				}
			}
		}
		db2.Close()
	}
}

// A directory sync that fails while a new segment is created (the roll)
// fails the append and poisons the store; reopening recovers every flushed
// event.
func TestDirSyncFailureAtRoll(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: ff, SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpSyncDir, Nth: 1, Sticky: true})
	flushed := 0
	var failed error
	for i := 0; i < 200 && failed == nil; i++ {
		evs := testgen.Events(uint64(flushed), 5, 200)
		if failed = h.Append(ctx, evs...); failed == nil {
			if failed = h.Flush(ctx); failed == nil {
				flushed += 5
			}
		}
	}
	if failed == nil {
		t.Fatal("no roll happened: the directory sync was never needed")
	}
	if err := h.Flush(ctx); err == nil {
		t.Fatal("flush succeeded after the failed roll")
	}
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db.Close()
	db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: true})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer db2.Close()
	r, err := db2.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	if err != nil || len(got) < flushed {
		t.Fatalf("after reopen %d events (%v), %d were flushed", len(got), err, flushed)
	}
}

package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

func TestDelete(t *testing.T) {
	ctx := context.Background()
	for _, variant := range []string{"mem-crash", "os-index"} {
		t.Run(variant, func(t *testing.T) {
			mem := vfs.NewMem()
			dir, opts := "/db", &engine.Options{FS: mem}
			if variant == "os-index" {
				dir, opts = engine.CheckedDir(t), nil
			}
			reopen := func(db *engine.DB) *engine.DB {
				if variant == "mem-crash" {
					crashed := mem.CrashClone(vfs.CrashConfig{}) // only what was synced
					db.Close()
					mem = crashed
					opts = &engine.Options{FS: mem}
				} else {
					db.Close()
				}
				db, err := engine.OpenStore(t, dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				return db
			}
			db, err := engine.OpenStore(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := db.Create(ctx, enginetest.Meta("s"))
			h.Append(ctx, enginetest.OneTurn()...)
			if err := db.Delete(ctx, "s"); !errors.Is(err, store.ErrAlreadyOwned) {
				t.Fatalf("Delete while owned = %v", err)
			}
			h.Close()
			old, _ := db.Stat(ctx, "s")
			r, _ := db.Open(ctx, "s", store.Read)
			if err := db.Delete(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Stat(ctx, "s"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("Stat after Delete = %v", err)
			}
			if _, err := r.Read(ctx, 0, -1); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("read through an earlier handle = %v", err)
			}
			if err := db.Delete(ctx, "s"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("second Delete = %v", err)
			}
			db = reopen(db) // the tombstone was synced: the delete survives a cut
			if _, err := db.Stat(ctx, "s"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Fatalf("after reopen Stat = %v", err)
			}
			// The id can be created again, with new revisions.
			h, err = db.Create(ctx, enginetest.Meta("s"))
			if err != nil {
				t.Fatal(err)
			}
			h.Append(ctx, enginetest.OneTurn()[:2]...)
			h.Close()
			snap, _ := db.Stat(ctx, "s")
			if snap.Revision == old.Revision || snap.EventCount != 2 {
				t.Errorf("recreated session: %+v (old revision %s)", snap, old.Revision)
			}
			db = reopen(db)
			defer db.Close()
			r, err = db.Open(ctx, "s", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := r.Read(ctx, 0, -1)
			if diff := cmp.Diff(enginetest.OneTurn()[:2], got); diff != "" {
				t.Errorf("recreated log mismatch (-want +got):\n%s", diff)
			}
			// A created, never written session just vanishes.
			p, _ := db.Create(ctx, enginetest.Meta("pending"))
			p.Close()
			if err := db.Delete(ctx, "pending"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("Delete of an erased creator = %v", err)
			}
			db.Close()
			if rep, err := engine.Check(dir, opts); err != nil || len(rep.Problems) != 0 || rep.Sessions != 1 {
				t.Errorf("check after delete and recreate: %+v, %v", rep, err)
			}
		})
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// renewInBackground has the DB's dictionary goroutine (dictLoop) make a
// dictionary now, as Observe does when one is due, and waits until that
// renewal is done and its outcome acted on (a failed fsync: the DB
// poisoned). No polling: the trainer closes Ask's channel (dict.Trainer.Done).
func renewInBackground(t *testing.T, db *DB) {
	t.Helper()
	<-db.dict.Ask()
}

// TestDictSyncFails: the fsync of a new dictionary file (or of the
// directory once it is renamed into place) fails while the background
// goroutine makes the store's dictionary. That poisons the store: no
// later flush is acknowledged, and no fdatasync is tried again. Even
// when a dictionary is asked for again, no frame is compressed with one
// that is not durable: a power cut (keeping nothing, everything or part
// of what was not synced) leaves a store Check finds clean, and every
// acknowledged event reads back.
func TestDictSyncFails(t *testing.T) {
	for _, c := range []struct {
		name string
		rule vfs.Rule
	}{
		{"file", vfs.Rule{Op: vfs.OpSync, Nth: 1, Name: ".dict.tmp"}}, // (segment.WriteDict's temporary file)
		{"directory", vfs.Rule{Op: vfs.OpSyncDir, Nth: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			opts := func(fs vfs.FS) *Options { return dictOpts(&Options{FS: fs, CompactInterval: -1}) }
			db, err := openStore(t, "/db", opts(ff))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			appended := writeFlushed(t, h, 0, 100)
			acked := len(appended)
			ff.Add(c.rule)
			renewInBackground(t, db)
			syncs := ff.Count(vfs.OpSync) + ff.Count(vfs.OpSyncDir)
			write := func(label string) {
				for range 10 {
					evs := testgen.Events(uint64(len(appended)), 2, 300)
					if err := h.Append(ctx, evs...); err != nil {
						return
					}
					appended = append(appended, evs...)
					err := h.Flush(ctx)
					if err == nil {
						acked = len(appended)
						t.Errorf("%s: a flush was acknowledged after the dictionary's fsync failed", label)
					} else if !errors.Is(err, segment.ErrSyncFailed) {
						t.Errorf("%s: flush: %v, want ErrSyncFailed (the store is poisoned)", label, err)
					}
				}
			}
			write("after the failure")
			// The next dictionary the goroutine makes (or takes: the file
			// renamed into place before the failed directory sync).
			renewInBackground(t, db)
			write("after another dictionary was asked for")
			if got := ff.Count(vfs.OpSync) + ff.Count(vfs.OpSyncDir); got != syncs {
				t.Errorf("%d fsyncs after the failed one: never retry", got-syncs)
			}

			for v, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(3, 9)), Garble: true}, {Rand: rand.New(rand.NewPCG(4, 9))}} {
				label := fmt.Sprintf("power cut %d", v)
				crashed := mem.CrashClone(cfg)
				rep, err := Check("/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: check: %v", label, err)
				}
				for _, p := range rep.Problems {
					t.Errorf("%s: check: %v", label, p)
				}
				db2, err := openStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: reopen: %v", label, err)
				}
				r, err := db2.Open(ctx, "s", store.Read)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				var got []event.Event
				got, err = r.Read(ctx, 0, -1)
				r.Close()
				db2.Close()
				if err != nil {
					t.Fatalf("%s: read: %v", label, err)
				}
				if len(got) < acked {
					t.Fatalf("%s: %d events, %d were acknowledged", label, len(got), acked)
				}
				sameEvents(t, label, got, appended[:len(got)])
			}
		})
	}
}

// TestDictSyncFailsBesideAnotherProcess: process A's dictionary file is
// renamed into place, and the fsync of the directory fails (A is
// poisoned); the entry may not survive a power cut. Process B, asking
// for a dictionary, finds it the newest (or B opens the store now, and
// its write open takes it): B must not compress a frame it acknowledges
// with it unless it is durable. After a power cut every event B
// acknowledged reads back, and Check finds the store clean.
func TestDictSyncFailsBesideAnotherProcess(t *testing.T) {
	for _, takes := range []string{"renew", "open"} {
		t.Run(takes, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			opts := func(fs vfs.FS) *Options { return dictOpts(&Options{FS: fs, CompactInterval: -1}) }
			a, err := openStore(t, "/db", opts(ff))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			ha, err := a.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer ha.Close()
			wantA := writeFlushed(t, ha, 0, 100)
			var b *DB
			open := func() {
				if b, err = openStore(t, "/db", opts(mem)); err != nil {
					t.Fatal(err)
				}
			}
			if takes == "renew" {
				open()
				defer b.Close()
			}
			ff.Add(vfs.Rule{Op: vfs.OpSyncDir, Nth: 1})
			renewInBackground(t, a)
			if err := a.poisonErr(); !errors.Is(err, segment.ErrSyncFailed) {
				t.Fatalf("A after its dictionary's directory sync failed: poisoned by %v, want ErrSyncFailed", err)
			}
			if takes == "open" {
				open()
				defer b.Close()
			}
			hb, err := b.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer hb.Close()
			wantB := writeFlushed(t, hb, 0, 100)
			if takes == "renew" {
				renewInBackground(t, b)
				wantB = append(wantB, writeFlushed(t, hb, 100, 100)...)
			}
			if b.dict.Cur() == nil {
				t.Fatal("B took no dictionary")
			}

			for v, cfg := range []vfs.CrashConfig{{}, {Rand: rand.New(rand.NewPCG(5, 9))}} {
				label := fmt.Sprintf("power cut %d", v)
				crashed := mem.CrashClone(cfg)
				rep, err := Check("/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: check: %v", label, err)
				}
				for _, p := range rep.Problems {
					t.Errorf("%s: check: %v", label, p)
				}
				db, err := openStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: reopen: %v", label, err)
				}
				sameEvents(t, label+": b", readAll(t, db, "b"), wantB)
				sameEvents(t, label+": a", readAll(t, db, "a"), wantA)
				db.Close()
			}
		})
	}
}

package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestChangesDoNotShowAMigration: a migration rewrites a session in the
// current format (a group: a header that replaces the incarnation, then
// every event again); it is not a change, and a consumer's cursor goes on
// after it with the session's next events.
func TestChangesDoNotShowAMigration(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := v2Events(2)
	createV2(t, db, "old", src)
	var before []store.Change
	for c, err := range db.Changes(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, c)
	}
	if len(before) < 2 || before[0].Kind != store.ChangeCreate || before[0].Header.Version != 2 {
		t.Fatalf("before the migration: %+v", before)
	}
	snap, err := db.Migrate(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Open(ctx, "old", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	next := v2Events(1)[:1]
	next[0].Seq = snap.EventCount
	next[0].Time = 1 << 40
	if err := h.Append(ctx, next...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var after []store.Change
	for c, err := range db.Changes(ctx, before[len(before)-1].Cursor) {
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, c)
	}
	if len(after) != 1 || after[0].Kind != store.ChangeAppend || after[0].Seq != snap.EventCount || after[0].Session != "old" {
		t.Fatalf("after the migration: %+v, want the one append at %d", after, snap.EventCount)
	}
}

// BenchmarkChanges: the whole feed of a store of 100,000 events of 300
// bytes in 1,000 sessions, each flushed in batches of 10 (interleaved),
// read from the start: what a consumer (a search index) pays to catch up.
func BenchmarkChanges(b *testing.B) {
	ctx := context.Background()
	const sessions, per, batch = 1000, 100, 10
	dir := b.TempDir()
	db, err := engine.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	hs := make([]*engine.Handle, sessions)
	for i := range hs {
		if hs[i], err = db.Create(ctx, store.Header{ID: fmt.Sprintf("s%04d", i), CreatedAt: 1}); err != nil {
			b.Fatal(err)
		}
	}
	for seq := 0; seq < per; seq += batch {
		for _, h := range hs {
			if err := h.Append(ctx, testgen.Events(uint64(seq), batch, 300)...); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for c, err := range db.Changes(ctx, "") {
			if err != nil {
				b.Fatal(err)
			}
			n += len(c.Events)
		}
		if n != sessions*per {
			b.Fatalf("%d events in the feed, want %d", n, sessions*per)
		}
	}
	b.ReportMetric(float64(b.N*sessions*per)/b.Elapsed().Seconds(), "events/s")
}

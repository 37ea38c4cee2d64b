package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
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

// purgeStore writes, into db, "s" (created, then deleted) and "k" (live)
// across three segments: s's header and k's first frames in the first,
// k's in the second, s's tombstone and k's last frame in the third. It
// returns the live sessions' event counts.
func purgeStore(t *testing.T, db *engine.DB) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	counts := map[string]uint64{}
	write := func(id string, create bool, n int) {
		t.Helper()
		var h *engine.Handle
		var err error
		if create {
			h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		} else {
			h, err = db.Open(ctx, id, store.Write)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Append(ctx, testgen.Events(counts[id], n, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		counts[id] += uint64(n)
	}
	roll := func() {
		t.Helper()
		if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: -1}); err != nil {
			t.Fatal(err)
		}
	}
	write("s", true, 6)
	write("k", true, 6)
	roll()
	write("k", false, 6)
	roll()
	if err := db.Delete(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	delete(counts, "s")
	write("k", false, 2)
	return counts
}

// applyChange applies c to model (each session's event count).
func applyChange(t *testing.T, model map[string]uint64, c store.Change) {
	t.Helper()
	switch c.Kind {
	case store.ChangeCreate:
		model[c.Session] = 0
	case store.ChangeAppend:
		if n, ok := model[c.Session]; !ok || n != c.Seq {
			t.Fatalf("append of %q at %d, the consumer holds %d events (%v)", c.Session, c.Seq, n, ok)
		}
		model[c.Session] += uint64(len(c.Events))
	case store.ChangeDelete:
		delete(model, c.Session)
	}
}

// TestChangesCompactionDuringAnIteration: a compaction purges "s" with
// its tombstone while a feed that has just given s's create is running
// (the feed reads on from the segments it had open, then opens one the
// compaction rewrote): the feed gives s's delete before it goes on, and
// what it gave ends as the store's sessions.
func TestChangesCompactionDuringAnIteration(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, engine.CheckedDir(t), &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counts := purgeStore(t, db)
	model := map[string]uint64{}
	compacted := false
	for c, err := range db.Changes(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		applyChange(t, model, c)
		if !compacted && c.Kind == store.ChangeCreate && c.Session == "s" {
			compacted = true
			rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Rewritten)+len(rep.Dropped) < 2 {
				t.Fatalf("compaction rewrote %v and dropped %v", rep.Rewritten, rep.Dropped)
			}
		}
	}
	if fmt.Sprint(model) != fmt.Sprint(counts) {
		t.Fatalf("the feed made %v, the store holds %v", model, counts)
	}
}

// TestChangesAfterCutCompaction cuts the power at every file-system
// operation of a compaction that purges "s" with its tombstone, behind a
// consumer that saw s's create; after the reopen, and after a compaction
// of the reopened store, the consumer resumes: it gets s's delete (or
// ErrCursorExpired), and ends as the store's sessions. The purge log is
// durable before any segment changes.
func TestChangesAfterCutCompaction(t *testing.T) {
	ctx := context.Background()
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, NoPreallocate: true, CompactInterval: -1}
	}
	resume := func(label string, db *engine.DB, model map[string]uint64, cur store.Cursor, counts map[string]uint64) {
		t.Helper()
		m := maps.Clone(model)
		for c, err := range db.Changes(ctx, cur) {
			if errors.Is(err, store.ErrCursorExpired) {
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			applyChange(t, m, c)
		}
		if fmt.Sprint(m) != fmt.Sprint(counts) {
			t.Fatalf("%s: the feed made %v, the store holds %v", label, m, counts)
		}
	}
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db, err := engine.OpenStore(t, "/db", opts(ff))
		if err != nil {
			t.Fatal(err)
		}
		var seen []store.Change
		counts := purgeStore(t, db)
		model := map[string]uint64{}
		for c, err := range db.Changes(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, c)
			if c.Kind == store.ChangeCreate && c.Session == "k" {
				break
			}
		}
		for _, c := range seen {
			applyChange(t, model, c)
		}
		if _, ok := model["s"]; !ok {
			t.Fatalf("the consumer holds %v, want s", model)
		}
		cur := seen[len(seen)-1].Cursor
		ff.Add(vfs.Rule{Op: vfs.OpAny, Nth: k, Sticky: true})
		rep, cerr := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1})
		db.Close()
		crashed := mem.CrashClone(vfs.CrashConfig{})
		label := fmt.Sprintf("cut %d", k)
		db2, err := engine.OpenStore(t, "/db", opts(crashed))
		if err != nil {
			t.Fatalf("%s: reopen: %v", label, err)
		}
		resume(label+": reopened", db2, model, cur, counts)
		if _, err := db2.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
			t.Fatalf("%s: compact: %v", label, err)
		}
		resume(label+": compacted", db2, model, cur, counts)
		db2.Close()
		if cerr == nil {
			if len(rep.Rewritten)+len(rep.Dropped) < 2 {
				t.Fatalf("the compaction rewrote %v and dropped %v", rep.Rewritten, rep.Dropped)
			}
			t.Logf("checked %d cut points", k)
			break
		}
	}
}

// TestChangesDamagedPurgeLog: a damaged purge log fails a resumed feed
// with a CorruptionError naming it; the next compaction replaces it, and
// the cursors issued before then expire (what it said is lost), while
// the feed from the start reads on.
func TestChangesDamagedPurgeLog(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counts := purgeStore(t, db)
	var cur store.Cursor
	for c, err := range db.Changes(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		cur = c.Cursor
	}
	path := filepath.Join(dir, engine.PurgeLogFile)
	if err := os.WriteFile(path, []byte("seglog-purged 1 3 0 0\nend 0000000000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	firstErr := func() error {
		for _, err := range db.Changes(ctx, cur) {
			return err
		}
		return nil
	}
	var ce *store.CorruptionError
	if err := firstErr(); !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("from a cursor, the purge log damaged: %v, want a CorruptionError naming it", err)
	}
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
		t.Fatal(err)
	}
	if err := firstErr(); !errors.Is(err, store.ErrCursorExpired) {
		t.Fatalf("from a cursor issued before the damage: %v, want ErrCursorExpired", err)
	}
	model := map[string]uint64{}
	for c, err := range db.Changes(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		applyChange(t, model, c)
	}
	if fmt.Sprint(model) != fmt.Sprint(counts) {
		t.Fatalf("the feed made %v, the store holds %v", model, counts)
	}
}

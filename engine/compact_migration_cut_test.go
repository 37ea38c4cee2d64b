package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCompactionCutAfterDroppingAReplacedHeader: a migrated v2 session's
// old header is in segment 1 and its old events in segment 2; compaction
// purges the old incarnation whole (rewrites 1, removes 2) and a crash
// stops it after the first step. The old events are then orphans before
// the migration header, which accounts for them as a tombstone would: the
// store replays (with and without its index) and the session is the
// migrated one. (Found by an outside review: such a store never opened
// again.)
func TestCompactionCutAfterDroppingAReplacedHeader(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	live, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	liveEvs := testgen.Events(0, 20, 300)
	live.Append(ctx, liveEvs...)
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	src := testgen.V2Turns("", 2)
	s, err := db.Create(ctx, store.Header{Version: 2, ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil { // the header alone, in segment 1
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, src...); err != nil { // its events, in segment 2
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} { // the rest of segment 2 dies
		h, _ := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		h.Append(ctx, testgen.Events(0, 30, 300)...)
		h.Close()
	}
	if _, err := db.Compact(ctx, CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if err := db.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	errCut := errors.New("cut")
	var crashed string
	db.knobs.rewrite = func(seg uint64) error {
		if seg == 1 {
			crashed = crashCopy(t, dir) // segment 1 rewritten, segment 2 still there
		}
		return errCut
	}
	defer func() { db.knobs.rewrite = nil }()
	if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1}); !errors.Is(err, errCut) {
		t.Fatalf("compaction: %v", err)
	}
	db.knobs.rewrite = nil
	if crashed == "" {
		t.Fatal("the compaction did not rewrite segment 1 first")
	}
	wantS, err := recovery.MigrateV2("s", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, noIndex := range []bool{true, false} {
		dst := crashCopy(t, crashed)
		db2, err := openStore(t, dst, &Options{NoIndex: noIndex, CompactInterval: -1})
		if err != nil {
			t.Fatalf("open (no index %v) after a compaction cut short: %v", noIndex, err)
		}
		for id, want := range map[string]int{"live": len(liveEvs), "s": len(wantS)} {
			h, err := db2.Open(ctx, id, store.Read)
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.Read(ctx, 0, -1)
			if err != nil || len(got) != want {
				t.Fatalf("%s: %d events, %v; want %d", id, len(got), err, want)
			}
			if id == "s" {
				if diff := cmp.Diff(wantS, got); diff != "" {
					t.Fatalf("s (-want +got):\n%s", diff)
				}
			}
		}
		if _, err := db2.Compact(ctx, CompactOptions{LiveRatio: 1}); err != nil {
			t.Fatalf("compaction after the cut: %v", err)
		}
		db2.Close()
		if rep, err := Check(dst, nil); err != nil || len(rep.Problems) != 0 {
			t.Fatalf("check: %v %v", rep.Problems, err)
		}
	}
}

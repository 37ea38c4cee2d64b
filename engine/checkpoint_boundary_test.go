package engine

// The index checkpoint at the exact boundary of a group (a migration: a
// header and the frame it counts, taken by the index whole or not at all)
// that ends where a roll begins. The segment size is set from a probe run
// of the same store, so that the group either ends exactly at the end of
// the segment (the next frame rolls) or has its header as the last frame
// of the segment (its last frame is the first of the next one). A
// checkpoint is taken at each boundary, the store is "crashed" (its files
// copied as a SIGKILL or power cut leaves them: the active segment cut at
// the durable position), and the copy must pass Check (index and
// segments agree), reopen without setting its index aside, and read back
// every acknowledged event.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// segFrames lists the frames of segment seg in dir (their keys dropped).
func segFrames(t *testing.T, dir string, seg uint64) []segment.FrameInfo {
	t.Helper()
	r, err := segment.OpenReader(vfs.Default, filepath.Join(dir, segment.Name(seg)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []segment.FrameInfo
	if _, err := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		c := *fi
		c.Key = nil
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// indexCheckpoint reads the checkpoint of the index of the store in dir.
func indexCheckpoint(t *testing.T, dir string) index.Checkpoint {
	t.Helper()
	x, err := index.Open(filepath.Join(dir, "index.db"), &index.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	cp, err := x.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// checkCrashed checks a crashed copy of a store: Check finds no problem,
// a write open keeps its index (nothing quarantined) and each session of
// acked holds exactly those events (a session missing from acked may be
// absent: it was never acknowledged). It returns the sessions' event
// counts as read.
func checkCrashed(t *testing.T, label, dir string, acked map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	rep, err := Check(dir, nil)
	if err != nil {
		t.Fatalf("%s: check: %v", label, err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("%s: check found problems (index and segments disagree): %v (notes %v)", label, rep.Problems, rep.Notes)
	}
	db, err := openStore(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer db.Close()
	if q, _ := os.ReadDir(filepath.Join(dir, QuarantineDir)); len(q) > 0 {
		t.Fatalf("%s: the reopen set files aside: %v", label, q)
	}
	for id, want := range acked {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("%s: acknowledged session %s: %v", label, id, err)
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatalf("%s: read %s: %v", label, id, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: session %s (-acknowledged +read):\n%s", label, id, diff)
		}
	}
}

func TestCheckpointAtGroupEndingAtRoll(t *testing.T) {
	ctx := context.Background()
	opts := func(size int64) *Options {
		return &Options{SegmentSize: size, Uncompressed: true, NoDict: true, NoPreallocate: true,
			IndexInterval: time.Hour, CompactInterval: -1}
	}
	// The store before the group: a v2 session of ~5 KB (the migration
	// rewrites it as one frame: FrameBytes is 32 KiB), indexed.
	old := testgen.V2Filler(0, 12, 400)
	base := t.TempDir()
	db, err := openStore(t, base, opts(0))
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "m", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, old...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, testgen.Event(0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Before the group, a frame of a that the index does not hold yet,
	// so that a checkpoint before the group has something to store.
	aevs := []event.Event{testgen.Event(0, 100), testgen.Event(1, 100)}
	before := func(db *DB) {
		a, err := db.Open(ctx, "a", store.Write)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Append(ctx, aevs[1]); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The probe: where the migration's header and frame go. The header
	// record holds the new incarnation id in decimal: 20 digits in 46% of
	// draws, 19 in 49%, fewer in 5%. A case matches the probe's layout
	// only when its own draw has the probe's length, so the probe takes
	// the longest of three draws (one of 18 digits or fewer left each case
	// a 5% chance per try: both failed their 10 tries in a CI run).
	var hdr, last segment.FrameInfo
	for range 3 {
		probe := crashCopy(t, base)
		db, err = openStore(t, probe, opts(0))
		if err != nil {
			t.Fatal(err)
		}
		before(db)
		if _, err := db.Migrate(ctx, "m"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		fs := segFrames(t, probe, 1)
		if len(fs) < 2 || fs[len(fs)-2].Kind != segment.KindHeader || fs[len(fs)-1].Kind != segment.KindEvents {
			t.Fatalf("probe: the migration is not a header and one frame at the end of segment 1: %+v", fs)
		}
		if h := fs[len(fs)-2]; h.RawLen > hdr.RawLen {
			hdr, last = h, fs[len(fs)-1]
		}
	}
	if hdr.End() < 4096 {
		t.Fatalf("probe: the group starts at %d: too small a segment", hdr.End())
	}

	// run runs one case on a fresh copy of base whose segment size is
	// size; it reports false if the layout was not the probe's (the
	// header records random incarnation ids, whose length varies): then
	// the case runs again.
	run := func(t *testing.T, size int64, body func(dir string, db *DB) bool) {
		for try := 0; try < 10; try++ {
			dir := crashCopy(t, base)
			db, err := openStore(t, dir, opts(size))
			if err != nil {
				t.Fatal(err)
			}
			before(db)
			ok := body(dir, db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if ok {
				return
			}
		}
		t.Fatal("the group never had the probe's layout in 10 tries")
	}

	// The group ends exactly at the end of segment 1: the next frame (b's
	// header) rolls. Checkpoints at the end of the group, then at the
	// start of segment 2 with b's header placed there and not durable,
	// then once b is flushed.
	t.Run("group ends at the segment's end", func(t *testing.T) {
		run(t, last.End(), func(dir string, db *DB) bool {
			if _, err := db.Migrate(ctx, "m"); err != nil {
				t.Fatal(err)
			}
			if got := db.shared.Word(coord.Tail).Load(); got != coord.Position(1, last.End()) {
				return false
			}
			if err := db.checkpoint(); err != nil {
				t.Fatal(err)
			}
			if cp := indexCheckpoint(t, dir); cp.Segment != 1 || cp.Offset != last.End() {
				t.Fatalf("checkpoint after the group at %d/%d, want 1/%d", cp.Segment, cp.Offset, last.End())
			}
			atEnd := crashCopy(t, dir)

			var atRoll string
			db.knobs.appended = func() {
				if seg, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); seg != 2 || atRoll != "" {
					return
				}
				if err := db.checkpoint(); err != nil {
					t.Error(err)
				}
				atRoll = crashCopy(t, dir)
			}
			defer func() { db.knobs.appended = nil }()
			b, err := db.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			bevs := testgen.Events(0, 3, 200)
			if err := b.Append(ctx, bevs...); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			db.knobs.appended = nil
			if atRoll == "" {
				t.Fatal("no placement in segment 2")
			}
			if fs := segFrames(t, atRoll, 2); len(fs) != 0 {
				t.Fatalf("the crash at the roll kept frames of segment 2 that were not durable: %+v", fs)
			}
			if cp := indexCheckpoint(t, atRoll); coord.Position(cp.Segment, cp.Offset) > coord.Position(2, segment.HeaderSize) {
				t.Fatalf("checkpoint at the roll at %d/%d, past the durable 2/%d", cp.Segment, cp.Offset, segment.HeaderSize)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := db.checkpoint(); err != nil {
				t.Fatal(err)
			}
			flushed := crashCopy(t, dir)

			checkCrashed(t, "checkpoint at the group's end", atEnd, map[string][]event.Event{"m": old, "a": aevs})
			checkCrashed(t, "checkpoint at the roll, b placed", atRoll, map[string][]event.Event{"m": old, "a": aevs})
			checkCrashed(t, "checkpoint after b's flush", flushed, map[string][]event.Event{"m": old, "a": aevs, "b": bevs})
			return true
		})
	})

	// The group's header is the last frame of segment 1, its frame the
	// first of segment 2: the roll makes the header durable (it syncs the
	// seal) before the frame is. A checkpoint then stops before the
	// header; a crash abandons the migration and keeps the old session.
	t.Run("group split by the roll", func(t *testing.T) {
		run(t, hdr.End(), func(dir string, db *DB) bool {
			var split string
			layout := true
			db.knobs.migrated = func() {
				if got := db.shared.Word(coord.Tail).Load(); got != coord.Position(2, segment.HeaderSize+last.Size) {
					layout = false
					return
				}
				if fs := segFrames(t, dir, 1); fs[len(fs)-2].End() != hdr.End() {
					layout = false
					return
				}
				if err := db.checkpoint(); err != nil {
					t.Error(err)
				}
				split = crashCopy(t, dir)
			}
			defer func() { db.knobs.migrated = nil }()
			if _, err := db.Migrate(ctx, "m"); err != nil {
				t.Fatal(err)
			}
			if !layout {
				return false
			}
			if split == "" {
				t.Fatal("hook did not run")
			}
			if cp := indexCheckpoint(t, split); cp.Segment != 1 || cp.Offset != hdr.Offset {
				t.Fatalf("checkpoint with the group split by the roll: at %d/%d, want at the group's header 1/%d", cp.Segment, cp.Offset, hdr.Offset)
			}
			if err := db.checkpoint(); err != nil {
				t.Fatal(err)
			}
			whole := crashCopy(t, dir)
			if cp := indexCheckpoint(t, whole); cp.Segment != 2 {
				t.Fatalf("checkpoint after the group at %d/%d, want segment 2", cp.Segment, cp.Offset)
			}
			checkCrashed(t, "checkpoint with the group split by the roll", split, map[string][]event.Event{"m": old, "a": aevs})
			checkCrashed(t, "checkpoint after the split group", whole, map[string][]event.Event{"m": old, "a": aevs})
			return true
		})
	})
}

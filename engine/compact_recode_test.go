package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// turnStore writes sessions the way a host's turns do (an append and a
// flush each: S2 frames), round-robin over small segments, nothing
// deleted; it returns their events.
func turnStore(t *testing.T, fsys vfs.FS) (*engine.DB, map[string][]event.Event) {
	t.Helper()
	return turnStoreAt(t, "/db", &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 4 << 10, NoPreallocate: true, CompactInterval: -1})
}

func turnStoreAt(t *testing.T, dir string, opts *engine.Options) (*engine.DB, map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]event.Event{}
	hs := map[string]*engine.Handle{}
	for i := range 4 {
		id := fmt.Sprintf("t%d", i)
		if hs[id], err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 6 {
		for i := range 4 {
			id := fmt.Sprintf("t%d", i)
			evs := testgen.Events(uint64(round*6), 6, 300)
			if err := hs[id].Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			if err := hs[id].Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], evs...)
		}
	}
	for _, h := range hs {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return db, want
}

// codecs counts the events frames of each codec in the store's segments.
func codecs(t *testing.T, fsys vfs.FS, dir string) map[segment.Codec]int {
	t.Helper()
	ids, err := segment.List(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	n := map[segment.Codec]int{}
	for _, id := range ids {
		rd, err := segment.OpenReader(fsys, dir+"/"+segment.Name(id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindEvents {
				n[fi.Codec]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		rd.Close()
	}
	return n
}

func feed(t *testing.T, db *engine.DB, from store.Cursor) []store.Change {
	t.Helper()
	var out []store.Change
	for c, err := range db.Changes(context.Background(), from) {
		if err != nil {
			t.Fatalf("changes from %q: %v", from, err)
		}
		out = append(out, c)
	}
	return out
}

func sameChanges(a, b []store.Change) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Kind != b[i].Kind || a[i].Session != b[i].Session || a[i].Seq != b[i].Seq || len(a[i].Events) != len(b[i].Events) {
			return false
		}
		for j := range a[i].Events {
			if string(a[i].Events[j].Data) != string(b[i].Events[j].Data) || a[i].Events[j].Seq != b[i].Events[j].Seq {
				return false
			}
		}
	}
	return true
}

// TestCompactRecodes: a compaction rewrites the sealed segments of a
// store written by turns (S2 frames, nothing deleted) with their frames
// compressed again with zstd: the segments get smaller, every session
// reads the same events (before and after a reopen, the index moved with
// the frames), and the change feed resumes from every cursor taken
// before with the same changes (a frame keeps its identity). A second
// compaction recodes nothing; RecodeShare -1 recodes nothing.
func TestCompactRecodes(t *testing.T) {
	ctx := context.Background()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			mem := vfs.NewMem()
			db, want := turnStore(t, mem)
			defer func() { db.Close() }()
			all := feed(t, db, "")
			before, nsegs := segBytes(t, mem, "/db")
			c0 := codecs(t, mem, "/db")
			if c0[segment.CodecS2]+c0[segment.CodecS2Dict] == 0 {
				t.Fatalf("the turns wrote no S2 frame: %v", c0)
			}
			opts := engine.CompactOptions{Roll: true}
			if off {
				opts.RecodeShare = -1
			}
			rep, err := db.Compact(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			after, _ := segBytes(t, mem, "/db")
			c1 := codecs(t, mem, "/db")
			t.Logf("%d segments, %d -> %d bytes; codecs %v -> %v; report: %d rewritten, %d recoded, %d frames %d -> %d bytes",
				nsegs, before, after, c0, c1, len(rep.Rewritten), len(rep.Recoded), rep.RecodedFrames, rep.RecodedFrom, rep.RecodedTo)
			if off {
				if len(rep.Rewritten) != 0 || c1[segment.CodecS2]+c1[segment.CodecS2Dict] != c0[segment.CodecS2]+c0[segment.CodecS2Dict] {
					t.Fatalf("with RecodeShare -1: rewrote %v, codecs %v -> %v", rep.Rewritten, c0, c1)
				}
				return
			}
			if len(rep.Recoded) < nsegs-1 || len(rep.Recoded) != len(rep.Rewritten) || rep.RecodedFrames == 0 || after >= before {
				t.Fatalf("recoded %d of %d segments (%d rewritten), %d frames, %d -> %d bytes", len(rep.Recoded), nsegs, len(rep.Rewritten), rep.RecodedFrames, before, after)
			}
			if c1[segment.CodecS2]+c1[segment.CodecS2Dict] >= c0[segment.CodecS2]+c0[segment.CodecS2Dict] {
				t.Fatalf("codecs %v -> %v: S2 frames left", c0, c1)
			}
			expectSessions(t, "after the recode", db, want)
			for i, c := range all {
				if got := feed(t, db, c.Cursor); !sameChanges(got, all[i+1:]) {
					t.Fatalf("the feed from the cursor after change %d gives %d changes, want the %d after it", i, len(got), len(all)-i-1)
				}
			}
			rep2, err := db.Compact(ctx, engine.CompactOptions{})
			if err != nil || len(rep2.Rewritten)+len(rep2.Dropped) != 0 {
				t.Fatalf("a second compaction: %+v, %v", rep2, err)
			}
			db.Close()
			db, err = engine.OpenStore(t, "/db", &engine.Options{FS: mem, NoPreallocate: true, CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			expectSessions(t, "reopened after the recode", db, want)
		})
	}
}

// TestCompactRecodeCrashAtEveryOp cuts the power at every file-system
// operation of a compaction that only recodes (nothing deleted): the
// synced state, and the one with every unsynced change kept, each
// reopen to the same sessions and events, and a compaction after the
// reopen finishes the recode.
func TestCompactRecodeCrashAtEveryOp(t *testing.T) {
	ctx := context.Background()
	points, recoded := 0, 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db, want := turnStore(t, ff)
		ff.Add(vfs.Rule{Op: vfs.OpAny, Nth: k, Sticky: true})
		rep, cerr := db.Compact(ctx, engine.CompactOptions{Roll: true})
		for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}} {
			label := fmt.Sprintf("cut %d variant %d", k, variant)
			crashed := mem.CrashClone(cfg)
			db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: true, CompactInterval: -1})
			if err != nil {
				t.Fatalf("%s: reopen: %v", label, err)
			}
			expectSessions(t, label, db2, want)
			if _, err := db2.Compact(ctx, engine.CompactOptions{Roll: true}); err != nil {
				t.Fatalf("%s: compact after reopen: %v", label, err)
			}
			expectSessions(t, label+" recompacted", db2, want)
			if c := codecs(t, crashed, "/db"); c[segment.CodecS2]+c[segment.CodecS2Dict] > 2 {
				t.Fatalf("%s: S2 frames left after the compaction that follows the reopen: %v", label, c)
			}
			db2.Close()
			points++
		}
		db.Close()
		if cerr == nil {
			recoded = len(rep.Recoded)
			if recoded == 0 {
				t.Fatal("the compaction recoded no segment")
			}
			break
		}
	}
	t.Logf("checked %d crash points of a compaction recoding %d segments", points, recoded)
}

// TestCompactRecodeCheck: after a recode, with the index on the OS, the
// index and the sessions' sizes follow the frames' new sizes: check finds
// nothing wrong, and each session's SizeBytes is the bytes of its frames
// in the segments, before and after a reopen.
func TestCompactRecodeCheck(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	opts := &engine.Options{SegmentSize: 16 << 10, FrameBytes: 4 << 10, NoPreallocate: true, CompactInterval: -1}
	db, want := turnStoreAt(t, dir, opts)
	sizes := func(db *engine.DB) map[string]int64 {
		snaps, err := db.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, s := range snaps {
			m[s.Header.ID] = s.SizeBytes
		}
		return m
	}
	onDisk := func() map[string]int64 {
		ids, err := segment.List(nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, id := range ids {
			rd, err := segment.OpenReader(nil, dir+"/"+segment.Name(id))
			if err != nil {
				t.Fatal(err)
			}
			rd.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
				if fi.Kind == segment.KindEvents || fi.Kind == segment.KindHeader {
					m[string(fi.Key)] += fi.Size
				}
				return nil
			})
			rd.Close()
		}
		return m
	}
	if got, disk := sizes(db), onDisk(); fmt.Sprint(got) != fmt.Sprint(disk) {
		t.Fatalf("before: sizes %v, the segments hold %v", got, disk)
	}
	// Reopened: the sessions' frames are in the index, not in memory;
	// one session read (its frames loaded), the others not.
	db.Close()
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	engine.SameEvents(t, "t1", engine.ReadAll(t, db, "t1"), want["t1"])
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil || rep.RecodedFrames == 0 {
		t.Fatalf("compact: %+v, %v", rep, err)
	}
	if got, disk := sizes(db), onDisk(); fmt.Sprint(got) != fmt.Sprint(disk) {
		t.Fatalf("after the recode: sizes %v, the segments hold %v", got, disk)
	}
	db.Close()
	if rep, err := engine.Check(dir, opts); err != nil || len(rep.Problems) != 0 || rep.Sessions != len(want) {
		t.Fatalf("check after the recode: %+v, %v", rep, err)
	}
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expectSessions(t, "reopened", db, want)
	if got, disk := sizes(db), onDisk(); fmt.Sprint(got) != fmt.Sprint(disk) {
		t.Fatalf("reopened: sizes %v, the segments hold %v", got, disk)
	}
}

// TestBackgroundRecode: with CompactInterval set and nothing deleted, the
// background compactor recodes segments once they are sealed (a seal
// after its last plan wakes it), while the turns go on.
func TestBackgroundRecode(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem, SegmentSize: 16 << 10, NoPreallocate: true, CompactInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "turns", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var seq uint64
	var c map[segment.Codec]int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		evs := testgen.Events(seq, 6, 300)
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		seq += 6
		if c = codecs(t, mem, "/db"); c[segment.CodecZstd]+c[segment.CodecZstdDict] >= 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d events appended; events frames by codec: %v", seq, c)
	if c[segment.CodecZstd]+c[segment.CodecZstdDict] < 10 {
		t.Fatalf("the background compactor recoded %v frames", c)
	}
	if got := engine.ReadAll(t, db, "turns"); uint64(len(got)) != seq {
		t.Fatalf("%d events read back, want %d", len(got), seq)
	}
}

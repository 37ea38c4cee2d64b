package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// dirBytes is the bytes of every file under dir (what du counts of a
// store whose files have no holes).
func dirBytes(t *testing.T, dir string) (int64, map[string]int64) {
	t.Helper()
	var n int64
	sizes := map[string]int64{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
			sizes[filepath.Base(p)] = fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, sizes
}

// trimAppend creates (or opens) session id in db and appends n events
// of size bytes after its first, a flush after every 10.
func trimAppend(t *testing.T, db *DB, id string, first uint64, n, size int) []event.Event {
	t.Helper()
	ctx := context.Background()
	var h store.Handle
	var err error
	if first == 0 {
		h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	} else {
		h, err = db.Open(ctx, id, store.Write)
	}
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(first, n, size)
	for i := 0; i < n; i += 10 {
		if err := h.Append(ctx, evs[i:min(i+10, n)]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// trimReadAll reads every event of session id.
func trimReadAll(t *testing.T, db *DB, id string) []event.Event {
	t.Helper()
	ctx := context.Background()
	r, err := db.Open(ctx, id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLastCloseTrims: a small store with the default options takes the
// preallocated room of its active segment (1 MiB) while it is open; once
// its last process closed it, its directory holds its frames, its index
// (compacted: at most 48 KiB) and the coordination files: under 128 KiB. It reopens with
// every event, takes more, and is as small again after the next close.
func TestLastCloseTrims(t *testing.T) {
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := trimAppend(t, db, "s", 0, 200, 300)
	open, sizes := dirBytes(t, dir)
	if sizes[segment.Name(1)] < 1<<20 {
		t.Fatalf("the open store's segment is %d bytes: not the preallocated file this test needs (%v)", sizes[segment.Name(1)], sizes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closed, sizes := dirBytes(t, dir)
	t.Logf("open: %d bytes, closed: %d bytes %v", open, closed, sizes)
	if closed > 128<<10 {
		t.Errorf("a closed store of 200 events of 300 bytes takes %d bytes, want at most 128 KiB: %v", closed, sizes)
	}
	// Its index, compacted: the checkpoints' commits left it at 92 KiB.
	if sizes["index.db"] > 48<<10 {
		t.Errorf("the closed store's index takes %d bytes, want at most 48 KiB", sizes["index.db"])
	}
	for round := range 2 {
		db, err = openStore(t, dir, &Options{CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if got := trimReadAll(t, db, "s"); len(got) != len(want) {
			t.Fatalf("round %d: %d events after the reopen, want %d", round, len(got), len(want))
		}
		want = append(want, trimAppend(t, db, "s", uint64(len(want)), 50, 300)...)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if n, sizes := dirBytes(t, dir); n > 128<<10 {
			t.Errorf("round %d: closed again, the store takes %d bytes: %v", round, n, sizes)
		}
	}
	db, err = openStore(t, dir, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := trimReadAll(t, db, "s"); len(got) != len(want) {
		t.Fatalf("%d events at the end, want %d", len(got), len(want))
	}
}

// TestTrimOnlyByTheLast: a close trims nothing while another process has
// the store open: a writer (a second DB on the store: locks of its own),
// or a reader (which holds LOCK and the directory shared, and maps the
// segment). The last writer's close trims.
func TestTrimOnlyByTheLast(t *testing.T) {
	segSize := func(dir string) int64 {
		fi, err := os.Stat(filepath.Join(dir, segment.Name(1)))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for _, other := range []string{"writer", "reader"} {
		t.Run(other, func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{CompactInterval: -1}
			a, err := openStore(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			trimAppend(t, a, "a", 0, 100, 300)
			b, err := openStore(t, dir, &Options{CompactInterval: -1, ReadOnly: other == "reader"})
			if err != nil {
				t.Fatal(err)
			}
			if other == "reader" {
				if got := trimReadAll(t, b, "a"); len(got) != 100 {
					t.Fatalf("the reader reads %d events", len(got))
				}
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if n := segSize(dir); n < 1<<20 {
				t.Fatalf("a close beside a %s cut the segment to %d bytes", other, n)
			}
			if other == "reader" {
				// It still reads the segment it maps.
				if got := trimReadAll(t, b, "a"); len(got) != 100 {
					t.Fatalf("the reader reads %d events after the writer's close", len(got))
				}
				b.Close()
				// A reader's close trims nothing; the next writer's does.
				if b, err = openStore(t, dir, opts); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if n := segSize(dir); n >= 1<<20 {
				t.Fatalf("the last writer's close left the segment at %d bytes", n)
			}
		})
	}
}

// TestTrimPowerCut cuts the power in a last close's trim: once it holds
// the openers off (nothing cut yet), once it cut the active segment's
// file (not synced), once it cut the prepared next segment, and after the
// close; each time keeping nothing unsynced, everything, or a random part
// with the last write garbled. Every copy opens with every acknowledged
// event, takes more, and closes (trimming again).
func TestTrimPowerCut(t *testing.T) {
	for seed := range uint64(3) {
		fsys := vfs.NewMem()
		opts := func(fs vfs.FS) *Options {
			return &Options{FS: fs, SegmentSize: 1 << 20, CompactInterval: -1, NoDict: true, Dense: true} // (the sizes it needs: zstd)
		}
		db, err := openStore(t, "/db", opts(fsys))
		if err != nil {
			t.Fatal(err)
		}
		// Past half of the 1 MiB segment, so that the next is prepared;
		// the active one grown in place.
		n := 5000 + int(seed)*400
		want := trimAppend(t, db, "s", 0, n, 400)
		// (What the preparer does once the tail is past half: the test
		// does not wait for its kick.)
		if err := db.log.PrepareNext(); err != nil {
			t.Fatal(err)
		}
		if names, _ := fsys.List("/db"); !slices.Contains(names, segment.Name(2)) || slices.Contains(names, segment.Name(3)) {
			f, _ := fsys.Open("/db/" + segment.Name(1))
			sz, _ := f.Size()
			t.Fatalf("seed %d: the store holds %v (%d): not the one segment and the prepared next this test needs", seed, names, sz)
		}
		var cuts []*vfs.MemFS
		var labels []string
		cut := func(label string) {
			for k, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(seed, uint64(len(cuts)))), Garble: true}} {
				cuts = append(cuts, fsys.CrashClone(cfg))
				labels = append(labels, fmt.Sprintf("seed %d, %s, variant %d", seed, label, k))
			}
		}
		var trimmed []uint64
		db.knobs.trimPlanned = func() { cut("planned") }
		db.knobs.trimmed = func(seg uint64) {
			trimmed = append(trimmed, seg)
			cut(fmt.Sprintf("segment %d cut", seg))
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		cut("closed")
		if len(trimmed) != 2 {
			t.Fatalf("seed %d: the close trimmed segments %v, want the active one and the prepared one", seed, trimmed)
		}
		for i, crashed := range cuts {
			db, err := openUnchecked("a power cut's copy of the store, read and written by the test", "/db", opts(crashed))
			if err != nil {
				t.Fatalf("%s: reopen: %v", labels[i], err)
			}
			got := trimReadAll(t, db, "s")
			if len(got) != len(want) {
				t.Fatalf("%s: %d events, %d acknowledged", labels[i], len(got), len(want))
			}
			for j := range got {
				if got[j].Seq != want[j].Seq || string(got[j].Data) != string(want[j].Data) {
					t.Fatalf("%s: event %d differs", labels[i], j)
				}
			}
			more := trimAppend(t, db, "s", uint64(len(want)), 20, 400)
			if err := db.Close(); err != nil {
				t.Fatalf("%s: close: %v", labels[i], err)
			}
			db, err = openUnchecked("a power cut's copy of the store, read by the test", "/db", opts(crashed))
			if err != nil {
				t.Fatalf("%s: reopen after the second close: %v", labels[i], err)
			}
			if got := trimReadAll(t, db, "s"); len(got) != len(want)+len(more) {
				t.Fatalf("%s: %d events after the second close, want %d", labels[i], len(got), len(want)+len(more))
			}
			db.Close()
		}
	}
}

// TestTrimAfterAWriterLeaves: another writer places frames and closes
// while a close plans its trim (after it kept openers out, before it
// looks for writers): the trim cuts after that writer's frames, never
// through them, and every event of both reopens.
func TestTrimAfterAWriterLeaves(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{CompactInterval: -1}
	a, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantA := trimAppend(t, a, "a", 0, 100, 300)
	b, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var wantB []event.Event
	a.knobs.trimPlanned = func() {
		wantB = trimAppend(t, b, "b", 0, 100, 300)
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if wantB == nil {
		t.Fatal("the close planned no trim")
	}
	if _, sizes := dirBytes(t, dir); sizes[segment.Name(1)] >= 1<<20 {
		t.Errorf("the segment was not trimmed: %v", sizes)
	}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, want := range map[string][]event.Event{"a": wantA, "b": wantB} {
		got := trimReadAll(t, db, id)
		if len(got) != len(want) {
			t.Fatalf("session %s: %d events, want %d", id, len(got), len(want))
		}
		for i := range got {
			if string(got[i].Data) != string(want[i].Data) {
				t.Fatalf("session %s: event %d differs", id, i)
			}
		}
	}
}

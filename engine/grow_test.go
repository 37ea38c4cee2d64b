package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// segFileSize is the size of segment id's file in dir.
func segFileSize(t *testing.T, dir string, id uint64) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, segment.Name(id)))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestActiveSegmentGrowsInPlace: with the default options a new store's
// segment is 1 MiB of zeros, and no spare is made; once the tail passes
// half of it, the preparer doubles it in place (the zeros past the tail,
// synced), and the data written before reads back across a reopen.
func TestActiveSegmentGrowsInPlace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{Uncompressed: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := segFileSize(t, dir, 1); got != 1<<20 {
		t.Fatalf("a new store's segment: %d bytes, want 1 MiB", got)
	}
	// About 600 KiB: past half of the first MiB.
	evs := testgen.Events(0, 1200, 500)
	for i := 0; i < len(evs); i += 100 {
		if err := h.Append(ctx, evs[i:i+100]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, off := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); off <= 1<<19 || off > 1<<20 {
		t.Fatalf("the tail is at %d, want it past half of the first MiB", off)
	}
	// The preparer may have grown it already; then this finds it done.
	if err := db.log.Grow(); err != nil {
		t.Fatal(err)
	}
	if got := segFileSize(t, dir, 1); got != 2<<20 {
		t.Fatalf("after the growth, the segment is %d bytes, want 2 MiB", got)
	}
	if _, err := os.Stat(filepath.Join(dir, segment.Name(2))); !os.IsNotExist(err) {
		t.Fatalf("a spare segment exists with the active one at 600 KiB of 64 MiB: %v", err)
	}
	// Appends go on into the grown part.
	more := testgen.Events(1200, 1200, 500)
	if err := h.Append(ctx, more...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := reopenRead(t, dir, &Options{Uncompressed: true, CompactInterval: -1}, "s")
	if err != nil || len(got) != 2400 {
		t.Fatalf("after the reopen: %d events, %v; want 2400", len(got), err)
	}
	for i := range got {
		if string(got[i].Data) != string(testgen.Event(uint64(i), 500).Data) {
			t.Fatalf("event %d differs after the reopen", i)
		}
	}
}

// TestGrowBesidePlacements: writers flush small batches while the
// preparer grows the active segment in steps from 4 KiB and the segments
// roll at 256 KiB; one goroutine also grows as fast as it can. No zero of
// a growth may land on a placed frame: every event reads back, from this
// DB and after a reopen (a scan of every segment).
func TestGrowBesidePlacements(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{SegmentSize: 256 << 10, PreallocateStart: 4096, Uncompressed: true, CompactInterval: -1, NoIndex: true}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const writers, batches, per = 4, 60, 8
	stop := make(chan struct{})
	var grown sync.WaitGroup
	grown.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.log.Grow(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("w%d", w)
			h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			if err != nil {
				t.Error(err)
				return
			}
			defer h.Close()
			for b := range batches {
				if err := h.Append(ctx, testgen.Events(uint64(b*per), per, 300+w*50)...); err != nil {
					t.Error(err)
					return
				}
				if err := h.Flush(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	grown.Wait()
	check := func(db *DB, label string) {
		for w := range writers {
			r, err := db.Open(ctx, fmt.Sprintf("w%d", w), store.Read)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			got, err := r.Read(ctx, 0, -1)
			if err != nil || len(got) != batches*per {
				t.Fatalf("%s: writer %d: %d events, %v; want %d", label, w, len(got), err, batches*per)
			}
			for i := range got {
				if string(got[i].Data) != string(testgen.Event(uint64(i), 300+w*50).Data) {
					t.Fatalf("%s: writer %d: event %d differs", label, w, i)
				}
			}
			r.Close()
		}
	}
	check(db, "before the reopen")
	if seg, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); seg < 3 {
		t.Fatalf("the log is in segment %d: the workload should roll a few times", seg)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check(db, "after the reopen")
}

// TestGrowAfterAPlacementPastTheFile: a placement that goes past the end
// of the file between the preparer's look at it and its fill (a placer
// outran the growth) ends the growth: the fill never zeroes it.
func TestGrowAfterAPlacementPastTheFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{Uncompressed: true, CompactInterval: -1, NoIndex: true}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	o, err := db.Create(ctx, store.Header{ID: "outrun", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	hooked := make(chan error, 1)
	var once sync.Once
	db.log.TestHookGrow = func() {
		once.Do(func() {
			// 700 KiB more, while the preparer has yet to fill: past the
			// file's first MiB.
			err := o.Append(ctx, testgen.Events(0, 1400, 500)...)
			if err == nil {
				err = o.Flush(ctx)
			}
			hooked <- err
		})
	}
	evs := testgen.Events(0, 1200, 500)
	for i := 0; i < len(evs); i += 100 {
		if err := h.Append(ctx, evs[i:i+100]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.log.Grow(); err != nil {
		t.Fatal(err)
	}
	// (The preparer may be running the hook: this waits for it.)
	select {
	case err := <-hooked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no growth reached the hook")
	}
	if got := segFileSize(t, dir, 1); got <= 1<<20 {
		t.Fatalf("the segment is %d bytes: the outrunning placement should have gone past its first MiB", got)
	}
	h.Close()
	o.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, n := range map[string]int{"s": 1200, "outrun": 1400} {
		r, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(ctx, 0, -1)
		if err != nil || len(got) != n {
			t.Fatalf("%s after the reopen: %d events, %v; want %d", id, len(got), err, n)
		}
		for i := range got {
			if string(got[i].Data) != string(testgen.Event(uint64(i), 500).Data) {
				t.Fatalf("%s: event %d differs after the reopen", id, i)
			}
		}
	}
}

// TestGrowAfterTrimFollowsTheWrites: a store whose last close trimmed its
// active segment to its 3 MiB of frames is opened again and takes a few
// events: the growth makes 1.5 x PreallocateStart of room past the tail
// (the writes so far), not the doubling of the file (6 MiB, 3 MiB of
// zeros for a few KiB of events); as the writes go on, the room follows
// them.
func TestGrowAfterTrimFollowsTheWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &Options{Uncompressed: true, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 6000, 500) // about 3 MiB
	for i := 0; i < len(evs); i += 200 {
		if err := h.Append(ctx, evs[i:i+200]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	trimmed := segFileSize(t, dir, 1)
	if trimmed < 3<<20-(1<<18) || trimmed > 4<<20 {
		t.Fatalf("the closed store's segment is %d bytes: not the trimmed 3 MiB this test needs", trimmed)
	}
	if db, err = openStore(t, dir, opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if h, err = db.Open(ctx, "s", store.Write); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	seq := uint64(len(evs))
	appendSome := func(n int) {
		t.Helper()
		if err := h.Append(ctx, testgen.Events(seq, n, 500)...); err != nil {
			t.Fatal(err)
		}
		seq += uint64(n)
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.log.Grow(); err != nil { // (the preparer may have run it already)
			t.Fatal(err)
		}
	}
	appendSome(10)
	ps := db.opts.PreallocateStart
	_, off := coord.SplitPosition(db.shared.Word(coord.Tail).Load())
	if got := segFileSize(t, dir, 1); got <= off || got > off+ps*3/2+(256<<10) {
		t.Fatalf("after a few events, the segment (tail at %d) is %d bytes: want at most %d of room", off, got, ps*3/2+(256<<10))
	}
	// 2 MiB more: the room follows the 2 MiB written, up to three times it.
	for range 20 {
		appendSome(200)
	}
	_, off = coord.SplitPosition(db.shared.Word(coord.Tail).Load())
	written := off - trimmed
	if got := segFileSize(t, dir, 1); got-off < 1<<20 || got-off > 3*written {
		t.Fatalf("after %d bytes more, the segment (tail at %d) is %d bytes: want room between 1 MiB and %d", written, off, got, 3*written)
	}
}

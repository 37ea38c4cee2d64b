package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// storeBytes is the disk the files of dir take (allocated blocks, as du
// counts them, and at least their sizes' sum for preallocated files).
func storeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSmallStoreFootprint: a store with one small session takes under 2
// MiB, with the default options and with InitialSegmentSize 1 MiB; with
// the latter, its segments grow as it fills (each sealed at twice the
// size of the one before, up to SegmentSize), and it reopens (with the
// same options: every process computes the sizes).
func TestSmallStoreFootprint(t *testing.T) {
	ctx := context.Background()
	{
		dir := engine.CheckedDir(t)
		db, err := engine.OpenStore(t, dir, nil)
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
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := storeBytes(t, dir); n > 2<<20 {
			t.Errorf("default options: a store with one small session takes %d bytes, want at most 2 MiB", n)
		}
		h.Close()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if n := storeBytes(t, dir); n > 2<<20 {
			t.Errorf("default options, closed: a store with one small session takes %d bytes, want at most 2 MiB", n)
		}
	}
	dir := engine.CheckedDir(t)
	opts := &engine.Options{InitialSegmentSize: 1 << 20}
	db, err := engine.OpenStore(t, dir, opts)
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
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := storeBytes(t, dir); n > 2<<20 {
		t.Errorf("a store with one small session takes %d bytes, want at most 2 MiB", n)
	}
	// Fill it: the sealed segments are 1 and 2 MiB (less their trimmed
	// zeros), the third one 4.
	evs := forkEvents(uint64(len(enginetest.OneTurn())), 100_000, "s")
	for i := 0; i < len(evs); i += 1000 {
		if err := h.Append(ctx, evs[i:i+1000]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sizes := map[string]int64{}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		sizes[filepath.Base(m)] = fi.Size()
	}
	for i, limit := range []int64{1 << 20, 2 << 20} {
		name := fmt.Sprintf("%016x.seg", i+1)
		if got, ok := sizes[name]; !ok || got > limit || got < limit*3/4 {
			t.Errorf("segment %s: %d bytes, want a sealed segment of at most %d (sizes %v)", name, got, limit, sizes)
		}
	}
	if got := sizes[fmt.Sprintf("%016x.seg", 3)]; got == 0 || got > 4<<20 {
		t.Errorf("the third segment: %d bytes, want at most its 4 MiB (grown in place as it fills) (sizes %v)", got, sizes)
	}
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Read(ctx, 0, -1); err != nil || len(got) != len(evs)+len(enginetest.OneTurn()) {
		t.Fatalf("after the reopen: %d events, %v", len(got), err)
	}
}

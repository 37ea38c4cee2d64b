package engine

import (
	"context"
	"os"
	"testing"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCompactAfterACompactionCutShort: a compaction killed after it removed
// the segment holding a deleted session's header (it removes segments in
// order, each removal a file removal and a directory sync) leaves the
// session's later frames as orphans, which its tombstone accounts for. The
// next compaction reclaims them and then the tombstone: before, an orphan
// was kept for good, and with it every later tombstone of its key (a store
// whose hosts reuse session IDs grew a segment per delete).
func TestCompactAfterACompactionCutShort(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 4096, NoPreallocate: true, Uncompressed: true, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for inc := range 2 {
		h, err := db.Create(ctx, store.Header{ID: "x", CreatedAt: int64(1 + inc)})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			appendFlushed(t, h, testgen.Event(uint64(i), 900))
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Delete(ctx, "x"); err != nil {
			t.Fatal(err)
		}
	}
	keep, err := db.Create(ctx, store.Header{ID: "keep", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 2, 100)
	appendFlushed(t, keep, want...)
	keep.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// What the killed compaction left: the first segment (x's first
	// header and first events) removed, the rest not yet.
	first := db.segPath(1)
	r, err := segment.OpenReader(nil, first)
	if err != nil {
		t.Fatal(err)
	}
	headers := 0
	r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		if fi.Kind == segment.KindHeader {
			headers++
		}
		return nil
	})
	r.Close()
	if headers != 1 {
		t.Fatalf("segment 1 holds %d headers, want x's first", headers)
	}
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}

	db, err = openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Compact(ctx, CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	// A second run may take the tombstones the first left before frames.
	if _, err := db.Compact(ctx, CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	us, err := db.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var files, live int64
	for _, u := range us {
		files += u.Bytes
		live += u.LiveBytes
	}
	if files > live+2*4096 {
		for _, u := range us {
			t.Logf("segment %d: %d bytes, %d live", u.ID, u.Bytes, u.LiveBytes)
		}
		t.Fatalf("after compaction the segments hold %d bytes for %d live: the deleted session's frames stayed", files, live)
	}
	h, err := db.Open(ctx, "keep", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "the live session", h, want)
	if _, err := db.Stat(ctx, "x"); err == nil {
		t.Fatal("the deleted session is back")
	}
}

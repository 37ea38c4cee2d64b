package engine

// Dictionary frames and segment format versions: a frame compressed with
// a dictionary (CodecZstdDict) may go only into a segment of version
// segment.DictVersion or later; older builds read the codec of such a
// frame in their segments as damage. The engine places it without its
// dictionary in an older segment (fit), and with it once a roll made the
// active segment a new one; compaction keeps a rewritten segment's
// version (a version 3 segment stays 3). Either way every event reads
// back, before and after a reopen, and Check finds nothing.

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// dictFramesByVersion returns, per segment of the store in dir, its
// format version and how many of its events frames name a dictionary. It
// fails on an S2 frame in a segment of a version before S2Version.
func dictFramesByVersion(t *testing.T, dir string) (map[uint64]int, map[uint64]int) {
	t.Helper()
	ids, err := segment.List(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	vers, dicts := map[uint64]int{}, map[uint64]int{}
	for _, id := range ids {
		r, err := segment.OpenReader(nil, filepath.Join(dir, segment.Name(id)))
		if err != nil {
			t.Fatal(err)
		}
		vers[id] = r.Header().Version
		_, err = r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind != segment.KindEvents {
				return nil
			}
			if (fi.Codec == segment.CodecS2 || fi.Codec == segment.CodecS2Dict) && vers[id] < segment.S2Version {
				t.Fatalf("segment %d of format version %d holds an %v frame (at %d)", id, vers[id], fi.Codec, fi.Offset)
			}
			if fi.Dict != 0 {
				dicts[id]++
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return vers, dicts
}

// wantDictsOnlyInDictVersion fails if a segment of a version before
// DictVersion holds a frame that names a dictionary; it returns how many
// frames name one in all.
func wantDictsOnlyInDictVersion(t *testing.T, label, dir string) int {
	t.Helper()
	vers, dicts := dictFramesByVersion(t, dir)
	total := 0
	for id, n := range dicts {
		if vers[id] < segment.DictVersion {
			t.Fatalf("%s: segment %d of format version %d holds %d frames compressed with a dictionary (versions: %v)", label, id, vers[id], n, vers)
		}
		total += n
	}
	return total
}

// wantReadsBack reads every session of want from a fresh open of dir (with
// its index, then with the index set aside) and checks the store.
func wantReadsBack(t *testing.T, label, dir string, want map[string][]event.Event) {
	t.Helper()
	for _, noIndex := range []bool{false, true} {
		if noIndex {
			if err := os.Remove(filepath.Join(dir, "index.db")); err != nil {
				t.Fatal(err)
			}
		}
		db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
		if err != nil {
			t.Fatalf("%s: reopen (index removed: %v): %v", label, noIndex, err)
		}
		for id, evs := range want {
			sameEvents(t, label+": "+id, readAll(t, db, id), evs)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("%s: check: %v %v", label, rep.Problems, err)
	}
}

// TestDictFramesIntoAnOlderSegment: the golden store of an older build,
// whose active segment is of format version 1 (and the same store with
// that segment made each later version before DictVersion: version 2, a
// rewritten one, so that fit's bound is tried at DictVersion-1 too),
// gets a dictionary; its writers' frames are encoded with it (here forced
// before every batch, as an encoder that still thought the tail a new
// segment would), small flushes and batches of several frames, one of
// them across the roll to the next segment. None of them lands in the
// older segment with its dictionary; after the roll they do in the new
// one.
func TestDictFramesIntoAnOlderSegment(t *testing.T) {
	for v := segment.OldestVersion; v < segment.DictVersion; v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) { dictFramesIntoAnOlderSegment(t, v) })
	}
}

// dictFramesIntoAnOlderSegment is TestDictFramesIntoAnOlderSegment with the
// golden store's active segment (2, of version 1) made version ver.
func dictFramesIntoAnOlderSegment(t *testing.T, ver int) {
	ctx := context.Background()
	dir := t.TempDir()
	expectProblem(t, dir, goldenLegacyRefusal) // the golden store's v2 session predates issue 38
	for _, n := range []string{segment.Name(1), segment.Name(2), "index.db"} {
		b, err := os.ReadFile(filepath.Join("testdata/golden", n))
		if err != nil {
			t.Fatal(err)
		}
		if n == segment.Name(2) {
			b = withSegmentVersion(t, b, ver)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err := openStore(t, dir, dictOpts(&Options{SegmentSize: 64 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v := db.log.Version(2); v != ver {
		t.Fatalf("the golden store's active segment is of version %d, want %d", v, ver)
	}
	h, err := db.Create(ctx, store.Header{ID: "new", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeFlushed(t, h, 0, 100)
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	if db.dict.Cur() == nil {
		t.Fatal("no dictionary")
	}
	// Batches of 1 to 12 events (one frame or two), each flushed, the
	// encoder told the tail takes dictionaries, and once the segment is
	// nearly full a batch of several frames that crosses the roll.
	crossed := false
	for i := 0; !crossed; i++ {
		n := 1 + (i*5)%12
		if _, off := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); off > db.opts.segmentSize(2)-(6<<10) {
			n = 1
			if off > db.opts.segmentSize(2)-(5<<10) {
				n = 40 // some 6 frames: the first fits, the others roll
			}
		}
		evs := testgen.Events(uint64(len(want)), n, 300)
		// (Every other batch as a flush of this build encodes it for a
		// segment of its own version: S2 with the dictionary's S2 form.)
		db.log.SetTailVersion([]int{segment.DictVersion, segment.S2Version}[i%2])
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, evs...)
		segs := map[uint64]bool{}
		db.mu.Lock()
		for _, f := range db.mu.sessions["new"].frames {
			if f.first >= evs[0].Seq {
				segs[f.seg] = true
			}
		}
		db.mu.Unlock()
		wantDictsOnlyInDictVersion(t, fmt.Sprintf("a batch in the version %d segment", ver), dir)
		switch {
		case segs[2] && segs[3]:
			crossed = true
		case !segs[2]:
			t.Fatalf("batch %d of %d events went to segments %v: the roll came between two batches", i, n, segs)
		}
	}
	if vers, _ := dictFramesByVersion(t, dir); vers[2] != ver || vers[3] != segment.Version {
		t.Fatalf("segment versions %v: want 2 of version %d (the older build's), 3 of %d", vers, ver, segment.Version)
	}
	wantDictsOnlyInDictVersion(t, "a batch across the roll", dir)
	// After the roll, the new segment takes them (the encoder as it is).
	want = append(want, writeFlushed(t, h, len(want), 40)...)
	if n := wantDictsOnlyInDictVersion(t, "after the roll", dir); n < 10 {
		t.Fatalf("%d frames compressed with the dictionary in the new segment, want most of 20", n)
	}
	sameEvents(t, "new", readAll(t, db, "new"), want)
	// What the session (and so the index) records of each frame is what
	// the segment holds there: a frame placed without its dictionary is
	// recorded at its size as placed.
	db.mu.Lock()
	refs := slices.Clone(db.mu.sessions["new"].frames)
	db.mu.Unlock()
	onDisk := map[[2]int64]int64{}
	for _, seg := range []uint64{2, 3} {
		for _, fi := range segFrames(t, dir, seg) {
			onDisk[[2]int64{int64(seg), fi.Offset}] = fi.Size
		}
	}
	for _, r := range refs {
		if size, ok := onDisk[[2]int64{int64(r.seg), r.off}]; ok && size != int64(r.size) {
			t.Fatalf("frame of events %d+%d in segment %d at %d: recorded as %d bytes, %d in the segment", r.first, r.count, r.seg, r.off, r.size, size)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantReadsBack(t, "older store", dir, map[string][]event.Event{"new": want})
}

// withSegmentVersion returns the segment file b (of version 1, generation
// 0) with its header made version ver: from RewriteVersion on, with
// generation 1 (a segment rewritten by compaction), the header's checksum
// sealed again. Its frames are as they were: versions 1 to DictVersion
// lay them out alike.
func withSegmentVersion(t *testing.T, b []byte, ver int) []byte {
	t.Helper()
	b = slices.Clone(b)
	if v := binary.LittleEndian.Uint16(b[8:]); v != 1 {
		t.Fatalf("the golden segment is of version %d, want 1", v)
	}
	binary.LittleEndian.PutUint16(b[8:], uint16(ver))
	if ver >= segment.RewriteVersion {
		binary.LittleEndian.PutUint64(b[32:], 1)
	}
	binary.LittleEndian.PutUint64(b[56:], xxhash.Sum64(b[:56]))
	if h, err := segment.DecodeHeader("golden", b[:segment.HeaderSize]); err != nil || h.Version != ver {
		t.Fatalf("the golden segment made version %d: %+v, %v", ver, h, err)
	}
	return b
}

// TestDictSegmentRewriteKeepsItsVersion: compaction rewrites a sealed
// segment whose live frames name a dictionary; the copy keeps format
// version 3, so that no segment of an older version holds them.
func TestDictSegmentRewriteKeepsItsVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	dead, err := db.Create(ctx, store.Header{ID: "dead", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	writeFlushed(t, dead, 0, 100)
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	live, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeFlushed(t, live, 0, 20)
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if n := wantDictsOnlyInDictVersion(t, "before compaction", dir); n < 5 {
		t.Fatalf("%d frames with a dictionary, want most of 10", n)
	}
	if err := db.Delete(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	if err := db.log.RollNow(); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Compact(ctx, CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rewritten) != 1 || rep.Rewritten[0] != 1 {
		t.Fatalf("compaction: %+v, want segment 1 rewritten", rep)
	}
	vers, _ := dictFramesByVersion(t, dir)
	if vers[1] != segment.Version {
		t.Fatalf("the rewritten segment is of version %d, want %d", vers[1], segment.Version)
	}
	if n := wantDictsOnlyInDictVersion(t, "after compaction", dir); n < 5 {
		t.Fatalf("%d frames with a dictionary after compaction", n)
	}
	sameEvents(t, "live", readAll(t, db, "live"), want)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantReadsBack(t, "rewritten", dir, map[string][]event.Event{"live": want})
}

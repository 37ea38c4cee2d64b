package engine_test

// Recovery from hostile and damaged files: the index is a cache (set aside
// and rebuilt, never trusted over intact segments, never a reason to
// refuse them), files the engine cannot identify are moved aside rather
// than deleted, and what the index proves was durable is never given up.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// logBuffer collects what the engine logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// writeSessions writes n events to each session (one flush each) and
// returns what was written.
func writeSessions(t *testing.T, db *engine.DB, n int, ids ...string) map[string][]event.Event {
	t.Helper()
	ctx := context.Background()
	out := map[string][]event.Event{}
	for _, id := range ids {
		h, err := db.Open(ctx, id, store.Write)
		if errors.Is(err, store.ErrSessionNotFound) {
			h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		}
		if err != nil {
			t.Fatal(err)
		}
		snap, err := db.Stat(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		evs := testgen.Events(snap.EventCount, n, 300)
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		out[id] = evs
	}
	return out
}

func checkLogs(t *testing.T, db *engine.DB, want map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	for id, evs := range want {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
		if diff := cmp.Diff(evs, got); diff != "" {
			t.Fatalf("session %s (-want +got):\n%s", id, diff)
		}
	}
}

func quarantined(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, engine.QuarantineDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	ids, err := segment.List(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		out = append(out, filepath.Join(dir, segment.Name(id)))
	}
	return out
}

// TestUnreadableIndexIsRebuilt: an index.db that is garbage, empty or cut
// short never stops an open (nor crashes it): it is moved to quarantine/
// with a warning and rebuilt from the segments.
func TestUnreadableIndexIsRebuilt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		aside  bool // the file is set aside (an empty file is just a new index)
	}{
		{"garbage", func(b []byte) []byte {
			r := rand.New(rand.NewPCG(1, 2))
			for i := range b {
				b[i] = byte(r.UintN(256))
			}
			return b
		}, true},
		{"zero-length", func([]byte) []byte { return nil }, false},
		{"zeroed", func(b []byte) []byte { return make([]byte, len(b)) }, true},
		{"text", func([]byte) []byte { return []byte("not an index\n") }, true},
		// was SIGBUS: half of the pages in use (the file goes on past
		// them: bbolt grows it ahead of its content)
		{"half", func(b []byte) []byte { return b[:usedBytes(b)/2] }, true},
		{"page-flips", func(b []byte) []byte { // was a bbolt panic
			for off := 4096 * 2; off < len(b); off += 4096 {
				b[off+17] ^= 0x5a
			}
			return b
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := engine.OpenStore(t, dir, &engine.Options{SegmentSize: 64 << 10, CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			want := writeSessions(t, db, 50, "a", "b", "c")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			ipath := filepath.Join(dir, "index.db")
			b, err := os.ReadFile(ipath)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ipath, tc.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			var log logBuffer
			db, err = engine.OpenStore(t, dir, &engine.Options{Logger: log.logger(), CompactInterval: -1})
			if err != nil {
				t.Fatalf("open with a damaged index: %v", err)
			}
			checkLogs(t, db, want)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if q := quarantined(t, dir); tc.aside && (len(q) != 1 || !strings.HasPrefix(q[0], "index.db.")) {
				t.Fatalf("quarantine holds %v, want the old index.db", q)
			}
			if tc.aside && !strings.Contains(log.String(), "set aside") {
				t.Fatalf("no warning logged:\n%s", log.String())
			}
			// The rebuilt index serves the next open.
			db, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			checkLogs(t, db, want)
			db.Close()
		})
	}
}

// forgeCheckpoint moves the index checkpoint to the end of the newest
// segment without indexing what is there: the state a checkpoint that
// raced an append used to leave.
func forgeCheckpoint(t *testing.T, dir string) {
	t.Helper()
	segs := segFiles(t, dir)
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := segment.ParseName(filepath.Base(last))
	idx, err := index.Open(filepath.Join(dir, "index.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.Apply(&index.Update{Checkpoint: index.Checkpoint{Segment: id, Offset: fi.Size()}}); err != nil {
		t.Fatal(err)
	}
	if err := idx.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDisagreeingIndexIsRebuilt: an index whose checkpoint passed frames
// it never indexed (session b's header) makes the replay after it fail;
// the segments are intact, so the open replays them all, sets the index
// aside and serves every session.
func TestDisagreeingIndexIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	opts := &engine.Options{NoPreallocate: true, CompactInterval: -1}
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 20, "a")
	db.Close()
	// b is written behind the index's back, and the checkpoint forged past it.
	db, err = engine.OpenStore(t, dir, &engine.Options{NoPreallocate: true, NoIndex: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want["b"] = writeSessions(t, db, 10, "b")["b"]
	db.Close()
	forgeCheckpoint(t, dir)
	db, err = engine.OpenStore(t, dir, &engine.Options{NoPreallocate: true, NoIndex: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want["b"] = append(want["b"], writeSessions(t, db, 10, "b")["b"]...)
	db.Close()

	var log logBuffer
	db, err = engine.OpenStore(t, dir, &engine.Options{Logger: log.logger(), CompactInterval: -1})
	if err != nil {
		t.Fatalf("open with an index that disagrees with intact segments: %v", err)
	}
	checkLogs(t, db, want)
	db.Close()
	if q := quarantined(t, dir); len(q) != 1 {
		t.Fatalf("quarantine holds %v, want the old index", q)
	}
	if !strings.Contains(log.String(), "disagrees") {
		t.Fatalf("no warning logged:\n%s", log.String())
	}
}

// TestIndexProvesLoss: when the index disagrees with the segments and the
// segments lack a session the index holds (its segment was deleted), the
// open fails naming it, rather than rebuilding an index without it.
func TestIndexProvesLoss(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &engine.Options{NoPreallocate: true, CompactInterval: -1}
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	writeSessions(t, db, 20, "c")
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true}); err != nil { // c alone in the first segment
		t.Fatal(err)
	}
	writeSessions(t, db, 20, "a")
	db.Close()
	db, err = engine.OpenStore(t, dir, &engine.Options{NoPreallocate: true, NoIndex: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeSessions(t, db, 10, "b")
	db.Close()
	forgeCheckpoint(t, dir)
	db, err = engine.OpenStore(t, dir, &engine.Options{NoPreallocate: true, NoIndex: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeSessions(t, db, 10, "b")
	db.Close()
	engine.ExpectProblem(t, dir, "segments lost acknowledged data")
	if err := os.Remove(segFiles(t, dir)[0]); err != nil {
		t.Fatal(err)
	}
	_, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `session "c"`) {
		t.Fatalf("open of a store that lost an indexed session: %v, want a corruption naming session c", err)
	}
	if q := quarantined(t, dir); len(q) != 0 {
		t.Fatalf("quarantine holds %v after a refused open", q)
	}
}

// TestCheckCountsEveryFrame: Check reads every segment that holds frames
// (one prepared ahead and never written to is one the open removes) and
// counts every frame (a seal is none), as a scan of the segments does.
func TestCheckCountsEveryFrame(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeSessions(t, db, 300, "a", "b")
	db.Close()
	withFrames, frames := 0, 0
	for _, p := range segFiles(t, dir) {
		r, err := segment.OpenReader(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if _, err := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind != segment.KindSeal {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if n > 0 {
			withFrames++
		}
		frames += n
	}
	rep, err := engine.Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if frames == 0 || rep.Segments != withFrames || rep.Frames != frames || len(rep.Problems) != 0 {
		t.Fatalf("check read %d segments, %d frames (problems %v); the store holds %d, %d", rep.Segments, rep.Frames, rep.Problems, withFrames, frames)
	}
}

// TestUnidentifiableSegmentIsQuarantined: a file under the next segment's
// name that holds no segment (random bytes, a header never finished by an
// older build) is moved to quarantine/, never deleted; the store goes on.
func TestUnidentifiableSegmentIsQuarantined(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 20, "a")
	db.Close()
	segs := segFiles(t, dir)
	id, _ := segment.ParseName(filepath.Base(segs[len(segs)-1]))
	fake := filepath.Join(dir, segment.Name(id+4))
	junk := []byte(strings.Repeat("user data, not a segment\n", 40))
	if err := os.WriteFile(fake, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	ro, err := engine.Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(ro.Notes, "\n"), "quarantine") {
		t.Fatalf("check does not say the open quarantines the file: %v %v", ro.Notes, ro.Problems)
	}
	if len(ro.Problems) != 0 {
		t.Fatalf("check reports the file the open quarantines as a problem too (it is a note): %v", ro.Problems)
	}
	var log logBuffer
	db, err = engine.OpenStore(t, dir, &engine.Options{Logger: log.logger(), CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkLogs(t, db, want)
	more := writeSessions(t, db, 5, "a")
	want["a"] = append(want["a"], more["a"]...)
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	q := quarantined(t, dir)
	if len(q) != 1 || !strings.HasPrefix(q[0], segment.Name(id+4)) {
		t.Fatalf("quarantine holds %v", q)
	}
	got, err := os.ReadFile(filepath.Join(dir, engine.QuarantineDir, q[0]))
	if err != nil || !bytes.Equal(got, junk) {
		t.Fatalf("the quarantined file is not the user's bytes: %v", err)
	}
	if !strings.Contains(log.String(), "quarantine") {
		t.Fatalf("no warning logged:\n%s", log.String())
	}
	db, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkLogs(t, db, want)
	db.Close()
}

// TestTruncatedSealedSegmentKeepsTheNext: a sealed segment cut short is
// damage to acknowledged data, reported where it is; the (empty) newest
// segment that the index checkpoint names is not removed for it.
func TestTruncatedSealedSegmentKeepsTheNext(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeSessions(t, db, 50, "a", "b")
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	segs := segFiles(t, dir)
	if len(segs) != 2 {
		t.Fatalf("segments %v", segs)
	}
	fi, _ := os.Stat(segs[0])
	engine.ExpectProblem(t, dir, "segment before the newest is not sealed")
	if err := os.Truncate(segs[0], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	_, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || ce.Path != segs[0] {
		t.Fatalf("open after a sealed segment was truncated: %v, want a corruption in %s", err, segs[0])
	}
	if _, err := os.Stat(segs[1]); err != nil {
		t.Fatalf("the newest segment was removed: %v", err)
	}
	rep, err := engine.Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) == 0 {
		t.Fatalf("check finds no problem in a store Open refuses; notes %v", rep.Notes)
	}
}

// TestTemporariesAreRemoved: what a crash leaves of a segment creation or
// rewrite (named as such) is removed by the next write open.
func TestTemporariesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 10, "a")
	db.Close()
	for _, n := range []string{segment.TempName(9), segment.RewriteName(1)} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("half a file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkLogs(t, db, want)
	db.Close()
	for _, n := range []string{segment.TempName(9), segment.RewriteName(1)} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still there: %v", n, err)
		}
	}
}

// TestDamagedActiveFrameBeforePreparedSegment: a damaged frame in the
// middle of the active segment, with an empty segment prepared after it,
// is reported at the damaged frame (the open and check agree), not at the
// end of the data, and nothing is removed.
func TestDamagedActiveFrameBeforePreparedSegment(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{SegmentSize: 64 << 10, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Past half the segment, the next one is prepared (in the background).
	prepared := func() bool {
		segs := segFiles(t, dir)
		if len(segs) < 2 {
			return false
		}
		r, err := segment.OpenReader(nil, segs[len(segs)-1])
		if err != nil {
			return false
		}
		defer r.Close()
		res, err := r.Scan(segment.ScanOptions{}, nil)
		return err == nil && res.Frames == 0 && !res.Sealed
	}
	for i := 0; !prepared(); i++ {
		if i == 1000 {
			t.Fatal("no segment was prepared")
		}
		writeSessions(t, db, 5, "a")
		time.Sleep(time.Millisecond)
	}
	db.Close()
	segs := segFiles(t, dir)
	active := segs[len(segs)-2]
	r, err := segment.OpenReader(nil, active)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		offs = append(offs, fi.Offset)
		return nil
	})
	r.Close()
	bad := offs[len(offs)/2]
	f, err := os.OpenFile(active, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xee}, bad+50)
	engine.ExpectProblem(t, dir, "frame checksum mismatch")
	f.Close()
	// Without the index, the open replays the damaged frame.
	_, err = engine.OpenStore(t, dir, &engine.Options{NoIndex: true, CompactInterval: -1})
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || ce.Path != active || ce.Offset != bad {
		t.Fatalf("open: %v; want a corruption in %s at %d", err, active, bad)
	}
	// With it, the frame is before the checkpoint: the open does not read
	// it, a read of the session does, and says where.
	ro, err := engine.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ro.Open(context.Background(), "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Read(context.Background(), 0, -1); !errors.As(err, &ce) || ce.Path != active || ce.Offset != bad {
		t.Fatalf("read: %v; want a corruption in %s at %d", err, active, bad)
	}
	ro.Close()
	rep, err := engine.Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		found = found || (p.Path == active && p.Offset == bad)
	}
	if !found {
		t.Fatalf("check does not report %s @%d: %v", active, bad, rep.Problems)
	}
	if got := segFiles(t, dir); len(got) != len(segs) {
		t.Fatalf("segments %v after the refused open, were %v", got, segs)
	}
}

// TestCheckAgreesWithOpen: states a healthy store passes through are no
// problem for check (it used to report them), and check's notes say what
// the next write open does.
func TestCheckAgreesWithOpen(t *testing.T) {
	ctx := context.Background()
	noProblems := func(t *testing.T, dir, wantNote string) {
		t.Helper()
		rep, err := engine.Check(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) != 0 {
			t.Fatalf("check of a store Open accepts: %v", rep.Problems)
		}
		if wantNote != "" && !strings.Contains(strings.Join(rep.Notes, "\n"), wantNote) {
			t.Fatalf("check notes %q, want one about %q", rep.Notes, wantNote)
		}
		db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		db.Close()
	}
	t.Run("deleted-after-checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		db, err := engine.OpenStore(t, dir, &engine.Options{IndexInterval: time.Hour, CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		writeSessions(t, db, 5, "a", "b")
		db.Close()
		db, err = engine.OpenStore(t, dir, &engine.Options{IndexInterval: time.Hour, CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		crashed := engine.CrashCopy(t, dir) // the tombstone is durable, the index does not know it
		db.Close()
		noProblems(t, crashed, "")
	})
	t.Run("prepared-segment", func(t *testing.T) {
		dir := t.TempDir()
		db, err := engine.OpenStore(t, dir, &engine.Options{SegmentSize: 64 << 10, CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; len(segFiles(t, dir)) < 2; i++ {
			if i == 1000 {
				t.Fatal("no segment prepared")
			}
			writeSessions(t, db, 5, "a")
			time.Sleep(time.Millisecond)
		}
		crashed := engine.CrashCopy(t, dir)
		db.Close()
		noProblems(t, dir, "")
		noProblems(t, crashed, "")
	})
	t.Run("index-passed-frames", func(t *testing.T) {
		// The state the checkpoint race left (see TestDisagreeingIndexIsRebuilt).
		dir := t.TempDir()
		db, err := engine.OpenStore(t, dir, &engine.Options{NoPreallocate: true, CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		writeSessions(t, db, 5, "a")
		db.Close()
		noIdx := &engine.Options{NoPreallocate: true, NoIndex: true, CompactInterval: -1}
		db, _ = engine.OpenStore(t, dir, noIdx)
		writeSessions(t, db, 5, "b")
		db.Close()
		forgeCheckpoint(t, dir)
		// Open serves a store without b (the index passed its frames):
		// check must say so, and --repair must bring it back.
		rep, err := engine.Check(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0].String(), `"b"`) {
			t.Fatalf("check of a store whose index lost session b: %v", rep.Problems)
		}
		if err := engine.RebuildIndex(dir, nil); err != nil {
			t.Fatal(err)
		}
		noProblems(t, dir, "")
		db, _ = engine.OpenStore(t, dir, nil)
		if _, err := db.Stat(ctx, "b"); err != nil {
			t.Fatalf("b after repair: %v", err)
		}
		db.Close()
	})
}

// TestRepairOfALiveStore: check --repair of a store another DB has open
// rebuilds the index beside it (engine's TestRebuildIndexBesideWriters
// has more), a copy of the old one in quarantine/; a repair of a store
// whose segments do not replay leaves the old index in place.
func TestRepairOfALiveStore(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 5, "a")
	ipath := filepath.Join(dir, "index.db")
	if err := engine.RebuildIndex(dir, nil); err != nil {
		t.Fatalf("repair of a live store: %v", err)
	}
	if _, err := os.Stat(ipath); err != nil {
		t.Fatalf("the live store's index is gone: %v", err)
	}
	if q, _ := os.ReadDir(filepath.Join(dir, engine.QuarantineDir)); len(q) != 1 {
		t.Fatalf("quarantine holds %d files, want the old index", len(q))
	}
	checkLogs(t, db, want)
	db.Close()

	// Segments that do not replay (a middle frame damaged): the repair
	// fails and the index stays.
	segs := segFiles(t, dir)
	before, _ := os.ReadFile(ipath)
	f, _ := os.OpenFile(segs[0], os.O_RDWR, 0)
	f.WriteAt([]byte("XXXX"), segment.HeaderSize+8)
	engine.ExpectProblem(t, dir, "incomplete frame")
	f.Close()
	if err := engine.RebuildIndex(dir, nil); err == nil {
		t.Fatal("repair of damaged segments succeeded")
	}
	after, err := os.ReadFile(ipath)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("a failed repair changed the index: %v", err)
	}
}

// TestUnreadableIndexBesideAnotherFS: with the segments on another file
// system than the OS (the crashable MemFS of the tests) and the index in a
// real file, a damaged index is set aside next to itself.
func TestUnreadableIndexBesideAnotherFS(t *testing.T) {
	mem := vfs.NewMem()
	ipath := filepath.Join(t.TempDir(), "index.db")
	opts := &engine.Options{FS: mem, IndexPath: ipath, CompactInterval: -1}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 10, "a")
	db.Close()
	if err := os.WriteFile(ipath, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkLogs(t, db, want)
	db.Close()
	aside, _ := filepath.Glob(ipath + ".quarantined-*")
	if len(aside) != 1 {
		t.Fatalf("the damaged index was not set aside next to itself: %v", aside)
	}
}

// TestRepairOverrulesAStaleIndex: an index.db restored from an older copy
// of the store claims a session deleted and compacted away since; the
// open refuses (the index proves data the segments lack), and check
// --repair, asked for, rebuilds the index from the segments.
func TestRepairOverrulesAStaleIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := &engine.Options{CompactInterval: -1}
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := writeSessions(t, db, 20, "a", "b")
	db.Close()
	ipath := filepath.Join(dir, "index.db")
	old, err := os.ReadFile(ipath)
	if err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	delete(want, "b")
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.WriteFile(ipath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.OpenStore(t, dir, opts); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("open with a stale index: %v, want a corruption naming session b", err)
	}
	if err := engine.RebuildIndex(dir, nil); err != nil {
		t.Fatalf("repair: %v", err)
	}
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkLogs(t, db, want)
	if _, err := db.Stat(ctx, "b"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("deleted session after repair: %v", err)
	}
}

// TestCheckSeesABadIndexHeader: a session's header record in the index
// that no longer decodes, or differs from the segments', makes reads of
// that session fail (naming the index): check reports it, --repair
// fixes it.
func TestCheckSeesABadIndexHeader(t *testing.T) {
	ctx := context.Background()
	for _, header := range []string{`{"header":{"id":"a","createdAt":`, `{"header":{"id":"a","createdAt":99},"uid":1}`} {
		dir := t.TempDir()
		db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		want := writeSessions(t, db, 5, "a", "b")
		db.Close()
		idx, err := index.Open(filepath.Join(dir, "index.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var rec index.Session
		idx.Sessions(func(s index.Session) error {
			if s.ID == "a" {
				rec = s
			}
			return nil
		})
		rec.Header = []byte(header)
		cp, _ := idx.Checkpoint()
		if err := idx.Apply(&index.Update{Sessions: []index.Session{rec}, Checkpoint: cp}); err != nil {
			t.Fatal(err)
		}
		idx.Close()
		rep, err := engine.Check(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) == 0 || rep.Problems[0].Session != "a" {
			t.Fatalf("check with a bad header record of a (%s): %v", header, rep.Problems)
		}
		if err := engine.RebuildIndex(dir, nil); err != nil {
			t.Fatal(err)
		}
		db, err = engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		checkLogs(t, db, want)
		if snap, err := db.Stat(ctx, "a"); err != nil || snap.Header.CreatedAt != 1 {
			t.Fatalf("a after repair: %+v %v", snap.Header, err)
		}
		db.Close()
	}
}

// TestRebuildIndexNeedsAStore: check --repair of a directory without a
// store creates nothing.
func TestRebuildIndexNeedsAStore(t *testing.T) {
	dir := t.TempDir()
	if err := engine.RebuildIndex(dir, nil); !errors.Is(err, store.ErrNoStore) {
		t.Fatalf("rebuild in an empty directory: %v, want ErrNoStore", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("it created %d files", len(ents))
	}
}

// usedBytes is how much of bbolt file b its newer meta page says is in use
// (its high-water page id times its page size).
func usedBytes(b []byte) int {
	const pageHeader = 16
	meta := func(at int) (txid, used uint64) {
		m := b[at+pageHeader:]
		pageSize := uint64(binary.LittleEndian.Uint32(m[8:]))
		// magic, version, page size, flags, root bucket (16), freelist
		pgid := binary.LittleEndian.Uint64(m[40:])
		return binary.LittleEndian.Uint64(m[48:]), pgid * pageSize
	}
	pageSize := int(binary.LittleEndian.Uint32(b[pageHeader+8:]))
	t0, u0 := meta(0)
	t1, u1 := meta(pageSize)
	if t1 > t0 {
		return int(u1)
	}
	return int(u0)
}

package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// Compaction beside other writing processes (docs/MULTIPROCESS.md, Many
// processes, Maintenance). Two DBs in one process hold their locks as two
// processes do.

// besideOpts makes small segments, so that a few flushes roll, and leaves
// checkpoints and compactions to the tests.
// (Dense: zstd frames, the sizes mixedSessions's layout was made for: the
// tombstones in a segment wholly behind the horizon.)
func besideOpts() *Options {
	return &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1, IndexInterval: time.Hour, Dense: true}
}

// mixedSessions writes sessions p0..p3 through w1 and q0..q3 through w2,
// round-robin (so that every segment holds both writers' frames), and
// deletes the even ones. It returns the handles of the live ones (still
// open for writing) and their events.
func mixedSessions(t *testing.T, w1, w2 *DB) (map[string]*Handle, map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	hs := map[string]*Handle{}
	want := map[string][]event.Event{}
	for i := range 4 {
		for _, c := range []struct {
			db     *DB
			prefix string
		}{{w1, "p"}, {w2, "q"}} {
			id := fmt.Sprintf("%s%d", c.prefix, i)
			h, err := c.db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			hs[id] = h
		}
	}
	for round := range 6 {
		for _, p := range []string{"p", "q"} {
			for i := range 4 {
				id := fmt.Sprintf("%s%d", p, i)
				evs := testgen.Events(uint64(round*8), 8, 300)
				appendFlushed(t, hs[id], evs...)
				want[id] = append(want[id], evs...)
			}
		}
	}
	for _, c := range []struct {
		db     *DB
		prefix string
	}{{w1, "p"}, {w2, "q"}} {
		for i := 0; i < 4; i += 2 {
			id := fmt.Sprintf("%s%d", c.prefix, i)
			hs[id].Close()
			delete(hs, id)
			delete(want, id)
			if err := c.db.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hs, want
}

// mixedIndexed writes mixedSessions through w1 and w2, closes their
// handles, and checkpoints the index (through w1); it returns the events
// of the live sessions.
func mixedIndexed(t *testing.T, w1, w2 *DB) map[string][]event.Event {
	t.Helper()
	hs, want := mixedSessions(t, w1, w2)
	for _, h := range hs {
		h.Close()
	}
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	return want
}

// checkBoth reads every session in want through both DBs.
func checkBoth(t *testing.T, label string, dbs []*DB, want map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	for n, db := range dbs {
		for id, evs := range want {
			h, err := db.Open(ctx, id, store.Read)
			if err != nil {
				t.Fatalf("%s: writer %d: open %s: %v", label, n+1, id, err)
			}
			readsAll(t, fmt.Sprintf("%s: writer %d reads %s", label, n+1, id), h, evs)
			h.Close()
		}
		list, err := db.List(ctx)
		if err != nil || len(list) != len(want) {
			t.Fatalf("%s: writer %d lists %d sessions (%v), want %d", label, n+1, len(list), err, len(want))
		}
	}
}

// writeMore appends and flushes three events through each handle in hs,
// adds them to want, and, with close, closes the handle.
func writeMore(t *testing.T, hs map[string]*Handle, want map[string][]event.Event, close bool) {
	t.Helper()
	for id, h := range hs {
		evs := testgen.Events(uint64(len(want[id])), 3, 200)
		appendFlushed(t, h, evs...)
		want[id] = append(want[id], evs...)
		if close {
			h.Close()
		}
	}
}

// reopenAndCheck, once every other DB of the store in dir is closed,
// reopens it, reads every session in want, and runs Check.
func reopenAndCheck(t *testing.T, dir string, opts *Options, want map[string][]event.Event) {
	t.Helper()
	db := liveOpen(t, dir, opts)
	checkBoth(t, "after a reopen", []*DB{db}, want)
	db.Close()
	checkClean(t, dir, opts)
}

// checkClean runs Check on the store in dir and fails on any problem.
func checkClean(t *testing.T, dir string, opts *Options) {
	t.Helper()
	if rep, err := Check(dir, opts); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %+v, %v", rep, err)
	}
}

// TestCompactBesideWriters: a compaction by one writing process rewrites
// and removes segments that hold the other's sessions, whose frame
// offsets that process keeps in memory; the other then reads every
// session (its own, written through handles it still holds, and the
// compactor's), both go on writing to their open handles, and a reopen
// and Check find everything.
func TestCompactBesideWriters(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts()) // the checkpointer
	w2 := liveOpen(t, dir, besideOpts())
	hs, want := mixedSessions(t, w1, w2)
	checkBoth(t, "before", []*DB{w1, w2}, want) // (both have followed everything)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := w2.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
	if err != nil || len(rep.Rewritten) == 0 {
		t.Fatalf("compaction beside another writer: %+v, %v; want segments rewritten", rep, err)
	}
	checkBoth(t, "after the compaction", []*DB{w1, w2}, want)
	writeMore(t, hs, want, false)
	checkBoth(t, "after more writes", []*DB{w1, w2}, want)
	// And the other way round: the first writer compacts what the second
	// wrote since.
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); err != nil {
		t.Fatal(err)
	}
	checkBoth(t, "after the second compaction", []*DB{w1, w2}, want)
	for _, h := range hs {
		h.Close()
	}
	w1.Close()
	w2.Close()
	reopenAndCheck(t, dir, besideOpts(), want)
}

// TestCompactBesideALaggingWriter: a writing process that has not
// followed the others (it only writes its own sessions) holds back what a
// compaction may touch: segments it has not fed its fold stay as they
// are, and it then follows them and reads everything. Once it has caught
// up, the next compaction reclaims them.
func TestCompactBesideALaggingWriter(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts()) // the checkpointer, and the compactor
	w2 := liveOpen(t, dir, besideOpts()) // follows nothing until it reads
	lagging := w2.shared.Word(coord.SlotWord(w2.shared.Slot())).Load()
	if lagging == 0 {
		t.Fatal("the second writer published no follow position")
	}
	hs, want := mixedSessions(t, w1, w1)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	lseg, _ := coord.SplitPosition(lagging)
	for _, id := range append(rep.Dropped, rep.Rewritten...) {
		if id >= lseg {
			t.Fatalf("compaction touched segment %d, at or past where the lagging writer stands (segment %d): %+v", id, lseg, rep)
		}
	}
	checkBoth(t, "after a compaction beside a lagging writer", []*DB{w2, w1}, want)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err = w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
	if err != nil || len(rep.Dropped)+len(rep.Rewritten) == 0 {
		t.Fatalf("compaction once the other writer followed: %+v, %v; want segments reclaimed", rep, err)
	}
	checkBoth(t, "after the second compaction", []*DB{w2, w1}, want)
	for _, h := range hs {
		h.Close()
	}
}

// TestCompactorDiesAfterTheRename: a compaction that stops (as its
// process would die) after a rewritten segment is renamed into place and
// before the index learns the new offsets leaves its intent, with the
// moves, in the index and the layout counter odd; the other writing
// process, on its next read, finishes the intent and reads every session
// right, and so does the compactor's process.
func TestCompactorDiesAfterTheRename(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	hs, want := mixedSessions(t, w1, w2)
	checkBoth(t, "before", []*DB{w1, w2}, want)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	w2.knobs.rewrite = func(uint64) error { return errHook }
	defer func() { w2.knobs.rewrite = nil }()
	if _, err := w2.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); !errors.Is(err, errHook) {
		t.Fatalf("compaction: %v, want the hook's error", err)
	}
	w2.knobs.rewrite = nil
	if rw, ok, _ := w1.idxRewrite(); !ok || !rw.HasMoves || len(rw.Moves) == 0 {
		t.Fatalf("rewrite intent = %+v, %v; want one with its moves", rw, ok)
	}
	if w1.shared.Layout()%2 != 1 {
		t.Fatal("the layout counter is even after a rewrite cut short")
	}
	checkBoth(t, "after the compactor stopped", []*DB{w1, w2}, want)
	if _, ok, _ := w1.idxRewrite(); ok {
		t.Fatal("the rewrite intent is still there")
	}
	writeMore(t, hs, want, true)
	checkBoth(t, "after more writes", []*DB{w2, w1}, want)
	w1.Close()
	w2.Close()
	checkClean(t, dir, besideOpts())
}

// TestReadWhileItsProcessStartsACompaction: another process compacted,
// moving frames this process holds references to (loaded from the index
// by a read of a session's last event, which opened no reader of the
// segments before); a read in this process, while its own compaction has
// just taken its locks and not yet caught up with that, must still
// relayout first. (It once skipped relayouts while its process held the
// compaction lock, taking every change for its own, and read stale
// offsets in the new file: "bad frame magic".)
func TestReadWhileItsProcessStartsACompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	want := mixedIndexed(t, w1, w2)
	w3 := liveOpen(t, dir, besideOpts()) // replays nothing: every frame is indexed
	for id, evs := range want {
		h, err := w3.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		last, err := h.Read(ctx, len(evs)-1, 1)
		h.Close()
		if err != nil || len(last) != 1 {
			t.Fatalf("read the last event of %s: %v, %v", id, last, err)
		}
	}
	if rep, err := w2.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); err != nil || len(rep.Rewritten) == 0 {
		t.Fatalf("compaction: %+v, %v; want segments rewritten", rep, err)
	}
	fired := false
	w3.knobs.compactLocked = func() {
		if fired {
			return
		}
		fired = true
		for id, evs := range want {
			h, err := w3.Open(ctx, id, store.Read)
			if err != nil {
				t.Errorf("open %s: %v", id, err)
				continue
			}
			got, err := h.Read(ctx, 0, -1)
			h.Close()
			if err != nil || len(got) != len(evs) {
				t.Errorf("read %s as its process starts a compaction: %d events, %v; want %d", id, len(got), err, len(evs))
			}
		}
	}
	defer func() { w3.knobs.compactLocked = nil }()
	if _, err := w3.Compact(ctx, CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	if !fired {
		t.Fatal("the hook never ran")
	}
	checkBoth(t, "after", []*DB{w3, w1, w2}, want)
}

// TestOwnBumpIsNoLayoutChange: a catch-up that looks at the layout
// counter while this process's own compaction moves it (between the
// counter's move and its follower's) must not take it for another
// process's change: the relayout it would set off closes the readers of
// segments before the checkpoint, the one the compaction is rewriting
// among them (a SIGKILL campaign child died of a fault in
// segment.Rewrite's scan). The hook gives such a look up to a second to
// finish inside that window; it may only finish after it, with the two
// in agreement.
func TestOwnBumpIsNoLayoutChange(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, besideOpts())
	hs, _ := mixedSessions(t, w, w)
	for _, h := range hs {
		h.Close()
	}
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	moved := make(chan bool, 16)
	w.shared.Knobs.Bump = func() {
		go func() { moved <- w.shared.LayoutMoved(&w.follow.layout) }()
		select {
		case m := <-moved:
			moved <- m
		case <-time.After(time.Second):
		}
	}
	defer func() { w.shared.Knobs.Bump = nil }()
	rep, err := w.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
	w.shared.Knobs.Bump = nil
	if err != nil || len(rep.Rewritten)+len(rep.Dropped) == 0 {
		t.Fatalf("compaction: %+v, %v; want segments reclaimed", rep, err)
	}
	for n := 2 * (len(rep.Rewritten) + len(rep.Dropped)); n > 0; n-- {
		if <-moved {
			t.Fatal("a look during the compaction's own bump saw a layout change")
		}
	}
}

// TestJoinWhileAnotherSettlesADeadCompaction: a compaction died after its
// rewritten segment was renamed into place (its intent, with the moves,
// in the index; the layout counter odd). A writer that joins finds
// coord.LockCompact free, but before it can take it to settle, another process
// takes it (its compaction starting, which settles first). The joiner must
// wait for that settle, not read the index meanwhile: the index's offsets
// into the rewritten segment are stale until then, and an open that finds
// them so runs without the index for its whole life. (One did, and then,
// left alone, compacted the store without updating the index: the next
// compaction beside it planned past the end of a rewritten segment, "limit
// 57648 past the 46864 mapped bytes", in the SIGKILL campaign.)
func TestJoinWhileAnotherSettlesADeadCompaction(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	want := mixedIndexed(t, w1, w2)
	w2.knobs.rewrite = func(uint64) error { return errHook }
	defer func() { w2.knobs.rewrite = nil }()
	if _, err := w2.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); !errors.Is(err, errHook) {
		t.Fatalf("compaction: %v, want the hook's error", err)
	}
	w2.knobs.rewrite = nil
	if w1.shared.Layout()%2 != 1 {
		t.Fatal("the layout counter is even after a rewrite cut short")
	}

	// The joiner's first try to settle: w1 starts a compaction first, and
	// holds it (coord.LockCompact taken, nothing settled) until the joiner's open
	// returned, or for a second.
	locked, release := make(chan struct{}), make(chan struct{})
	compacted := make(chan error, 1)
	var once sync.Once
	w1.knobs.compactLocked = func() {
		close(locked)
		<-release
	}
	joinOpts := besideOpts()
	joinOpts.testing.joinSettle = func() {
		once.Do(func() {
			go func() {
				_, err := w1.Compact(ctx, CompactOptions{LiveRatio: -1})
				compacted <- err
			}()
			<-locked
		})
	}
	defer func() { w1.knobs.compactLocked = nil }()
	type opened struct {
		db  *DB
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		db, err := openStore(t, dir, joinOpts)
		ch <- opened{db, err}
	}()
	var o opened
	select {
	case o = <-ch:
		close(release)
	case <-time.After(time.Second):
		close(release) // (the joiner waits for the settle)
		o = <-ch
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	w3 := o.db
	defer w3.Close()
	if err := <-compacted; err != nil {
		t.Fatalf("w1's compaction: %v", err)
	}
	w1.knobs.compactLocked = nil
	if !w3.joined {
		t.Fatal("the third writer did not join the others")
	}
	if w3.index == nil {
		t.Fatalf("the joining writer runs without the index: %q", w3.rec.notes)
	}
	checkBoth(t, "after the joiner opened", []*DB{w3, w1, w2}, want)
	// Left alone, it compacts (through the index), and the store reopens
	// with that index.
	w1.Close()
	w2.Close()
	if _, err := w3.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
		t.Fatal(err)
	}
	w3.Close()
	var logs bytes.Buffer
	ro := besideOpts()
	ro.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	reopenAndCheck(t, dir, ro, want)
	if strings.Contains(logs.String(), "index") {
		t.Fatalf("the reopen did not use the index as it was: %s", logs.String())
	}
}

// TestCompactWithoutTheIndex: a process that keeps no index of a store
// that has one (opened with NoIndex) compacts it, alone, and stays open;
// a writer that joins it then must not read sessions through the index
// file, whose offsets into the rewritten segments are stale: the
// compaction set it aside (to quarantine/) first. The joiner reads every
// segment instead, and the next open of the store by a process alone
// builds a new index.
func TestCompactWithoutTheIndex(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	want := mixedIndexed(t, w1, w2)
	w2.Close()
	w1.Close()
	no := besideOpts()
	no.NoIndex = true
	n := liveOpen(t, dir, no)
	defer n.Close()
	rep, err := n.Compact(ctx, CompactOptions{LiveRatio: 1})
	if err != nil || len(rep.Rewritten) == 0 {
		t.Fatalf("compaction without the index: %+v, %v; want segments rewritten", rep, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the index file is still in place after a compaction without it: %v", err)
	}
	if q, _ := filepath.Glob(filepath.Join(dir, QuarantineDir, "index.db.*")); len(q) != 1 {
		t.Fatalf("quarantine holds %q, want the index set aside", q)
	}
	j := liveOpen(t, dir, besideOpts())
	if !j.joined {
		t.Fatal("the second writer did not join the first")
	}
	checkBoth(t, "a writer joining after a compaction without the index", []*DB{j, n}, want)
	j.Close()
	n.Close()
	reopenAndCheck(t, dir, besideOpts(), want)
	if _, err := os.Stat(filepath.Join(dir, "index.db")); err != nil {
		t.Fatalf("no index after a reopen alone: %v", err)
	}
}

// TestJoinerWithoutTheIndexHoldsCompactionsBack: a writer that joins
// others and finds no usable index (here: none at the path it was given)
// reads every segment and keeps its frames' offsets in memory only, so it
// cannot follow a compaction (which tells only the index where the frames
// it moves went): no compaction runs while it is open, and it reads every
// session right. Once it is closed, the others compact.
func TestJoinerWithoutTheIndexHoldsCompactionsBack(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	want := mixedIndexed(t, w1, w2)
	w2.Close()
	o := besideOpts()
	o.IndexPath = filepath.Join(t.TempDir(), "elsewhere.db")
	j := liveOpen(t, dir, o)
	defer j.Close()
	if !j.joined || j.index != nil {
		t.Fatalf("joined %v, index %v: want a joiner without an index", j.joined, j.index != nil)
	}
	if _, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("compaction beside a writer without the index: %v, want ErrLocked", err)
	}
	checkBoth(t, "after the refused compaction", []*DB{j, w1}, want)
	j.Close()
	rep, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1})
	if err != nil || len(rep.Rewritten)+len(rep.Dropped) == 0 {
		t.Fatalf("compaction once the writer without the index closed: %+v, %v", rep, err)
	}
	checkBoth(t, "after the compaction", []*DB{w1}, want)
	w1.Close()
	reopenAndCheck(t, dir, besideOpts(), want)
}

// TestCompactWithAStaleSlot: the follow slot of a process that died (or
// closed) still holds where it stood, in a segment a compaction has since
// rewritten shorter; a new process takes the slot and, until it stores 0
// right after, a compaction reads the old position as a held slot's. The
// plan must not read that segment past its end ("limit past the mapped
// bytes", met once in the SIGKILL campaign): no live process stands in a
// segment rewritten since, so it reads it whole, and changes nothing at
// or after it.
func TestCompactWithAStaleSlot(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	w2 := liveOpen(t, dir, besideOpts())
	hs, want := mixedSessions(t, w1, w2)
	checkBoth(t, "before", []*DB{w1, w2}, want)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	first, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1})
	if err != nil || len(first.Rewritten) == 0 {
		t.Fatalf("compaction: %+v, %v; want segments rewritten", first, err)
	}
	seg := first.Rewritten[0]
	rd, err := w1.reader(seg)
	if err != nil {
		t.Fatal(err)
	}
	size := rd.Size()
	// Where a process stood in that segment before the rewrite: past the
	// rewritten file's end, in w2's slot (held: as if w2 had just taken it).
	slot := w2.shared.Word(coord.SlotWord(w2.shared.Slot()))
	real := slot.Load()
	slot.Store(coord.Position(seg, size+1000))
	writeMore(t, hs, want, false)
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1})
	if err != nil {
		t.Fatalf("compaction beside a stale slot: %v", err)
	}
	for _, id := range append(rep.Dropped, rep.Rewritten...) {
		if id >= seg {
			t.Fatalf("the compaction changed segment %d, at or past the stale slot's segment %d: %+v", id, seg, rep)
		}
	}
	slot.Store(real)
	checkBoth(t, "after", []*DB{w1, w2}, want)
	for _, h := range hs {
		h.Close()
	}
	w1.Close()
	w2.Close()
	reopenAndCheck(t, dir, besideOpts(), want)
}

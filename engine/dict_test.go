package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/dict"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// dictKnobs is a dictionary tuning that makes dictionaries small and
// trains them only when a test says (renew).
func dictKnobs() *dict.Tuning {
	dt := dict.DefaultTuning()
	dt.TrainAfter, dt.History = math.MaxInt, 16<<10
	return &dt
}

// withDict returns o with the dictionary tuning dt (its DB's knob).
func withDict(o *Options, dt *dict.Tuning) *Options {
	o.testing.dict = dt
	return o
}

// dictOpts returns o with the tuning of dictKnobs.
func dictOpts(o *Options) *Options { return withDict(o, dictKnobs()) }

// writeFlushed appends events first..first+n-1 of session h in batches of
// two, each flushed: small frames, as an agent host's turns make.
func writeFlushed(t *testing.T, h *Handle, first, n int) []event.Event {
	t.Helper()
	ctx := context.Background()
	evs := testgen.Events(uint64(first), n, 300)
	for i := 0; i < n; i += 2 {
		if err := h.Append(ctx, evs[i:min(i+2, n)]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return evs
}

// frameCodecs counts the events frames of the store by codec, and those
// compressed with a dictionary that are under segment.DefaultMinCompress.
func frameCodecs(t *testing.T, fsys vfs.FS, dir string) (map[segment.Codec]int, int) {
	t.Helper()
	ids, err := segment.List(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	n, small := map[segment.Codec]int{}, 0
	for _, id := range ids {
		r, err := segment.OpenReader(fsys, filepath.Join(dir, segment.Name(id)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindEvents {
				n[fi.Codec]++
				if fi.Dict != 0 && fi.RawLen < segment.DefaultMinCompress {
					small++
				}
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return n, small
}

// dictFrames returns how many frames of codecs (frameCodecs's) name a
// dictionary: zstd frames made with it, and S2 frames made with its S2
// form (a flush's).
func dictFrames(codecs map[segment.Codec]int) int {
	return codecs[segment.CodecZstdDict] + codecs[segment.CodecS2Dict]
}

// dictStore writes session "s": 100 events, a dictionary, 200 more. It
// returns the events and the dictionary's file.
func dictStore(t *testing.T, dir string) ([]event.Event, string) {
	t.Helper()
	db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(context.Background(), store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := writeFlushed(t, h, 0, 100)
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	d := db.dict.Cur()
	if d == nil || d.ID < 32768 {
		t.Fatalf("no dictionary after renew: %v", d)
	}
	evs = append(evs, writeFlushed(t, h, 100, 200)...)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	return evs, filepath.Join(dir, segment.DictName(d.ID))
}

// TestDictRoundTrip: once a dictionary is made, small frames are
// compressed with it, and the store reads back the same, reopened with
// and without the index, read-only too; check finds nothing.
func TestDictRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want, dpath := dictStore(t, dir)
	if _, err := os.Stat(dpath); err != nil {
		t.Fatal(err)
	}
	codecs, small := frameCodecs(t, nil, dir)
	if dictFrames(codecs) < 90 || small < 90 {
		t.Fatalf("frames by codec %v, %d small ones with the dictionary: want the 100 after it compressed with it", codecs, small)
	}
	for _, o := range []Options{{CompactInterval: -1}, {NoIndex: true, CompactInterval: -1}, {ReadOnly: true}} {
		db, err := openStore(t, dir, dictOpts(&o))
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, fmt.Sprintf("%+v", o), readAll(t, db, "s"), want)
		db.Close()
	}
	rep, err := Check(dir, nil)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v %v", rep.Problems, err)
	}
}

// TestDictOtherProcess: a process reads the frames another compressed
// with a dictionary made after it opened the store, and takes that
// dictionary when it needs one instead of training its own.
func TestDictOtherProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	a, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ha, err := a.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantA := writeFlushed(t, ha, 0, 100)
	if err := a.renewDict(); err != nil {
		t.Fatal(err)
	}
	wantA = append(wantA, writeFlushed(t, ha, 100, 100)...)
	sameEvents(t, "a read by b", readAll(t, b, "a"), wantA)

	hb, err := b.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantB := writeFlushed(t, hb, 0, 100)
	if err := b.renewDict(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := segment.ListDicts(nil, dir); len(ids) != 1 || b.dict.Cur().ID != a.dict.Cur().ID {
		t.Fatalf("dictionaries %v; b uses %d, a %d: want b to take a's", ids, b.dict.Cur().ID, a.dict.Cur().ID)
	}
	wantB = append(wantB, writeFlushed(t, hb, 100, 100)...)
	sameEvents(t, "b read by a", readAll(t, a, "b"), wantB)
	if codecs, _ := frameCodecs(t, nil, dir); dictFrames(codecs) < 90 {
		t.Fatalf("frames by codec %v", codecs)
	}
}

// TestDictDamaged: a damaged or missing dictionary is reported (check:
// one problem at its file; reads of the frames that name it: corruption
// naming both files); a write open refuses a damaged newest one.
func TestDictDamaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		what   string
	}{
		{"flipped", func(p string) error {
			b, err := os.ReadFile(p)
			if err == nil {
				b[len(b)/2] ^= 1
				err = os.WriteFile(p, b, 0o644)
			}
			return err
		}, "checksum mismatch"},
		{"truncated", func(p string) error { return os.Truncate(p, 100) }, "dictionary bytes"},
		{"missing", os.Remove, "is missing; 100 frames name it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, dpath := dictStore(t, dir)
			expectProblem(t, dir, tc.what)
			if err := tc.damage(dpath); err != nil {
				t.Fatal(err)
			}
			rep, err := Check(dir, nil)
			if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Path != dpath || !strings.Contains(rep.Problems[0].What, tc.what) {
				t.Fatalf("check: %v %v; want one problem at %s: %s", rep.Problems, err, dpath, tc.what)
			}
			db, err := openStore(t, dir, dictOpts(&Options{ReadOnly: true}))
			if err != nil {
				t.Fatal(err)
			}
			h, err := db.Open(context.Background(), "s", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Read(context.Background(), 0, -1)
			var ce *store.CorruptionError
			if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &ce) || !strings.HasSuffix(ce.Path, ".seg") || !strings.Contains(err.Error(), dpath) {
				t.Fatalf("read: %v; want corruption at a frame naming %s", err, dpath)
			}
			db.Close()
			db, err = openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
			if tc.name == "missing" {
				// No dictionary left to take: the open goes on, and its
				// reads of those frames fail as above.
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				return
			}
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), dpath) {
				t.Fatalf("write open: %v; want corruption at %s", err, dpath)
			}
		})
	}
}

// TestDictOlderSegment: a store of an older build (the golden store, whose
// active segment is of format version 1) gets no frame compressed with a
// dictionary in that segment, but does in the next one.
func TestDictOlderSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	expectProblem(t, dir, goldenLegacyRefusal) // the golden store's v2 session predates issue 38
	for _, n := range []string{segment.Name(1), segment.Name(2), "index.db"} {
		b, err := os.ReadFile(filepath.Join("testdata/golden", n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(context.Background(), store.Header{ID: "new", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeFlushed(t, h, 0, 100)
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	// A frame encoded with it (as if the active segment took it) is
	// placed without it.
	db.log.SetTailVersion(segment.DictVersion)
	want = append(want, writeFlushed(t, h, 100, 20)...)
	if codecs, _ := frameCodecs(t, nil, dir); dictFrames(codecs) != 0 {
		t.Fatalf("frames by codec %v: a dictionary in a version 1 segment", codecs)
	}
	if err := db.log.RollNow(); err != nil {
		t.Fatal(err)
	}
	want = append(want, writeFlushed(t, h, 120, 40)...)
	if codecs, _ := frameCodecs(t, nil, dir); dictFrames(codecs) < 19 {
		t.Fatalf("frames by codec %v after the roll", codecs)
	}
	sameEvents(t, "new", readAll(t, db, "new"), want)
	db.Close()
	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v %v", rep.Problems, err)
	}
}

// dictCrashWorkload writes two sessions, makes a dictionary at step 30 and
// writes on, until an operation fails (the injected cut). It returns the
// events appended and how many of them a flush acknowledged.
func dictCrashWorkload(fsys vfs.FS) (map[string][]event.Event, map[string]int, error) {
	ctx := context.Background()
	appended, acked := map[string][]event.Event{}, map[string]int{}
	db, err := openUnchecked("the workload runs until a cut; its test checks the crashed copies", "/db", withDict(&Options{FS: fsys, SegmentSize: 64 << 10, CompactInterval: -1}, dictCrashTuning()))
	if err != nil {
		return appended, acked, err
	}
	defer db.Close()
	hs := map[string]*Handle{}
	r := rand.New(rand.NewPCG(5, 5))
	for step := range 90 {
		if step == 30 {
			if err := db.renewDict(); err != nil {
				return appended, acked, err
			}
		}
		id := []string{"x", "y"}[r.IntN(2)]
		h := hs[id]
		if h == nil {
			if h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
				return appended, acked, err
			}
			hs[id] = h
		}
		evs := testgen.Events(uint64(len(appended[id])), 2, 300)
		appended[id] = append(appended[id], evs...)
		if err := h.Append(ctx, evs...); err != nil {
			return appended, acked, err
		}
		if err := h.Flush(ctx); err != nil {
			return appended, acked, err
		}
		acked[id] = len(appended[id])
	}
	return appended, acked, nil
}

// dictCrashTuning is the dictionary tuning of TestDictPowerCut's stores:
// dictKnobs', with smaller dictionaries.
func dictCrashTuning() *dict.Tuning {
	dt := dictKnobs()
	dt.History = 8 << 10
	return dt
}

// TestDictPowerCut cuts the power at every operation of a workload that
// makes a dictionary between its flushes (the cut operation and every
// later one fail), keeps none, all or a random part of what was not
// synced, and reopens: no frame names a dictionary that is not there,
// check finds nothing, every acknowledged event reads back.
func TestDictPowerCut(t *testing.T) {
	probe := vfs.NewFault(vfs.NewMem())
	if _, _, err := dictCrashWorkload(probe); err != nil {
		t.Fatalf("workload without faults: %v", err)
	}
	ops := probe.Count(vfs.OpAny)
	step := 1
	if testing.Short() {
		step = max(ops/40, 1)
	}
	var dicted int
	for k := 1; k <= ops; k += step {
		mem := vfs.NewMem()
		appended, acked, _ := dictCrashWorkload(vfs.NewFault(mem, vfs.Rule{Op: vfs.OpAny, Nth: k, Sticky: true}))
		for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(k), 1)), Garble: true}} {
			label := fmt.Sprintf("cut at operation %d of %d, variant %d", k, ops, variant)
			crashed := mem.CrashClone(cfg)
			if _, err := crashed.List("/db"); err != nil {
				if len(acked) > 0 {
					t.Fatalf("%s: the store is gone: %v", label, err)
				}
				continue // cut before the store was made
			}
			rep, err := Check("/db", &Options{FS: crashed})
			if err != nil {
				t.Fatalf("%s: check: %v", label, err)
			}
			for _, p := range rep.Problems {
				t.Fatalf("%s: check: %v", label, p)
			}
			if codecs, _ := frameCodecs(t, crashed, "/db"); dictFrames(codecs) > 0 {
				dicted++
			}
			db, err := openStore(t, "/db", withDict(&Options{FS: crashed, CompactInterval: -1}, dictCrashTuning()))
			if err != nil {
				t.Fatalf("%s: reopen: %v", label, err)
			}
			for id, want := range appended {
				if acked[id] == 0 {
					continue
				}
				got := readAll(t, db, id)
				if len(got) < acked[id] {
					t.Fatalf("%s: %s has %d events, %d acknowledged", label, id, len(got), acked[id])
				}
				sameEvents(t, label, got, want[:len(got)])
			}
			db.Close()
		}
	}
	if dicted == 0 {
		t.Fatal("no cut left a frame compressed with the dictionary")
	}
	if names, _ := probe.List("/db"); !slices.ContainsFunc(names, func(n string) bool { _, ok := segment.ParseDictName(n); return ok }) {
		t.Fatalf("no dictionary in %v", names)
	}
	_ = fs.ErrNotExist
}

// TestDictTraining: a store written in large frames only keeps no
// training pool and trains no dictionary; small frames make the first
// once TrainAfter bytes of them are written, after which the pool is let
// go; its content is already History (the cap: MinHistory), so no larger
// one follows however much is written. The pool
// never holds much more than Pool. Without spare CPU (no budget) it
// trains none.
func TestDictTraining(t *testing.T) {
	for _, spare := range []bool{true, false} {
		t.Run(fmt.Sprintf("spare=%v", spare), func(t *testing.T) {
			dt := dict.DefaultTuning()
			dt.TrainAfter, dt.Pool, dt.Small, dt.History = 16<<10, 64<<10, 4<<10, 8<<10
			dt.SmallShare, dt.SmallBurst = 1e6, time.Second
			if !spare {
				dt.SmallShare, dt.SmallBurst = 0, 0
			}
			testDictTraining(t, &dt, spare)
		})
	}
}

func testDictTraining(t *testing.T, dt *dict.Tuning, spare bool) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := openStore(t, dir, withDict(&Options{CompactInterval: -1}, dt))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	state := func() (collecting bool, n, bytes int) {
		st := db.dict.State()
		return st.Collecting, st.Samples, st.Bytes
	}
	evs := testgen.Events(0, 2000, 300)
	for i := 0; i < 1000; i += 20 { // ~6 KiB frames: 300 KiB
		if err := h.Append(ctx, evs[i:i+20]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, n, _ := state(); n != 0 {
		t.Fatalf("the pool holds %d payloads of large frames", n)
	}
	if ids, _ := segment.ListDicts(nil, dir); len(ids) != 0 || db.dict.Cur() != nil {
		t.Fatalf("dictionaries %v after large frames only", ids)
	}
	for i := 1000; i < 2000; i++ { // one event a frame: ~300 KiB
		if err := h.Append(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, n := state(); n > dt.Pool+1024 {
			t.Fatalf("the pool holds %d bytes", n)
		}
	}
	if !spare {
		time.Sleep(50 * time.Millisecond) // (training runs on its own goroutine)
		if ids, _ := segment.ListDicts(nil, dir); len(ids) != 0 {
			t.Fatalf("dictionaries %v trained without spare CPU", ids)
		}
		return
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ids, err := segment.ListDicts(nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		collecting, n, _ := state()
		if len(ids) == 1 && !collecting && n == 0 {
			break
		}
		if len(ids) > 1 || time.Now().After(deadline) {
			t.Fatalf("dictionaries %v, collecting %v, %d payloads in the pool: want 1 and the pool let go", ids, collecting, n)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read back", readAll(t, db, "s"), evs)
}

// TestDictSmallBudget: with zstd (Dense), small frames are compressed
// with the dictionary only within their CPU budget; beyond it they are
// stored as they are.
func TestDictSmallBudget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1, Dense: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeFlushed(t, h, 0, 100)
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	_, before := frameCodecs(t, nil, dir)
	budget(db, 0, 0) // no budget
	want = append(want, writeFlushed(t, h, 100, 100)...)
	if _, n := frameCodecs(t, nil, dir); n != before {
		t.Fatalf("%d small frames compressed with the dictionary without a budget", n-before)
	}
	budget(db, 1e6, time.Second) // all the budget needed
	want = append(want, writeFlushed(t, h, 200, 100)...)
	if _, n := frameCodecs(t, nil, dir); n-before < 45 {
		t.Fatalf("%d of the 50 small frames compressed with the dictionary within the budget", n-before)
	}
	sameEvents(t, "read back", readAll(t, db, "s"), want)
}

// TestDictSmallS2: a flush's small frame is S2 with the dictionary's S2
// form (a microsecond or two), whatever the zstd budget: none left, every
// one of them is.
func TestDictSmallS2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	db, err := openStore(t, dir, dictOpts(&Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := writeFlushed(t, h, 0, 100)
	if err := db.renewDict(); err != nil {
		t.Fatal(err)
	}
	before, _ := frameCodecs(t, nil, dir)
	budget(db, 0, 0) // no budget
	want = append(want, writeFlushed(t, h, 100, 100)...)
	after, _ := frameCodecs(t, nil, dir)
	if n := after[segment.CodecS2Dict] - before[segment.CodecS2Dict]; n != 50 {
		t.Fatalf("%d of the 50 small frames S2 with the dictionary (frames by codec %v)", n, after)
	}
	sameEvents(t, "read back", readAll(t, db, "s"), want)
}

// budget sets the CPU budget of db's small frames (its share of a core
// and its burst) and empties it.
func budget(db *DB, share float64, burst time.Duration) {
	db.dict.SetBudget(share, burst)
}

// TestDictLargeEvent: a session flushed an event at a time with one tool
// result of 350 KB among 400 events of ~500 B (the limit is 16 MiB) trains
// its dictionary and reads back whole, wherever the large event falls.
// The trainer's zstd.BuildDict panicked on that payload as a sample (when
// the spread of the pool took it), on the engine's own goroutine, and
// took the host's process down: 2 runs of 2 on the old code panicked.
func TestDictLargeEvent(t *testing.T) {
	for at := 0; at < 220; at += 14 {
		t.Run(fmt.Sprint("at=", at), func(t *testing.T) { testDictLargeEvent(t, at) })
	}
}

func testDictLargeEvent(t *testing.T, at int) {
	dir := t.TempDir()
	ctx := context.Background()
	dt := dict.DefaultTuning()
	dt.SmallShare, dt.SmallBurst = 1e6, time.Second // spare CPU: train as soon as due
	db, err := openStore(t, dir, withDict(&Options{CompactInterval: -1}, &dt))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 400, 500)
	evs[at].Data = []byte(`{"output":"` + strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz ", 350_000/37) + `"}`)
	for i := range evs {
		if err := h.Append(ctx, evs[i]); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); db.dict.Cur() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no dictionary trained")
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read back", readAll(t, db, "s"), evs)
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// storeFootprint is what the files of a store take, by what holds the
// bytes: the measure of BenchmarkRealLogsStore.
type storeFootprint struct {
	// total: every file in the directory; the rest add up to it
	total int64
	// segments: the segment files up to the end of their last frame;
	// room: past it (preallocated zeros)
	segments, room int64
	dicts          int64
	dictFiles      int
	index, other   int64

	// The segments' bytes (they add up to segments): segment headers;
	// of their frames, the 40-byte frame headers, the session keys and
	// the padding; the stored payloads of header frames, of events
	// frames by codec (and their raw bytes), of the rest (seals,
	// tombstones).
	segHdrs                      int64
	frames, frameHdrs, keys, pad int64
	hdrFrames, hdrPayload        int64
	evFrames, evStored, evRaw    [5]int64
	otherPayload                 int64
}

// measureStore measures the store in dir, which no process has open.
func measureStore(tb testing.TB, dir string) storeFootprint {
	tb.Helper()
	var f storeFootprint
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			tb.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		f.total += fi.Size()
		path := filepath.Join(dir, e.Name())
		_, isDict := segment.ParseDictName(e.Name())
		_, isSeg := segment.ParseName(e.Name())
		switch {
		case isDict:
			f.dicts += fi.Size()
			f.dictFiles++
		case e.Name() == "index.db":
			f.index += fi.Size()
		case isSeg:
			data, err := os.ReadFile(path)
			if err != nil {
				tb.Fatal(err)
			}
			res, err := segment.Scan(path, data, segment.ScanOptions{}, func(fr *segment.FrameInfo) error {
				f.frames++
				f.frameHdrs += segment.SealSize // (a seal is a bare frame header)
				f.keys += int64(len(fr.Key))
				f.pad += fr.Size - segment.SealSize - int64(len(fr.Key)) - int64(fr.StoredLen)
				switch fr.Kind {
				case segment.KindHeader:
					f.hdrFrames++
					f.hdrPayload += int64(fr.StoredLen)
				case segment.KindEvents:
					c := min(int(fr.Codec), len(f.evFrames)-1)
					f.evFrames[c]++
					f.evStored[c] += int64(fr.StoredLen)
					f.evRaw[c] += int64(fr.RawLen)
				default:
					f.otherPayload += int64(fr.StoredLen)
				}
				return nil
			})
			if err != nil {
				tb.Fatal(err)
			}
			f.segHdrs += segment.HeaderSize
			f.segments += res.End
			f.room += int64(len(data)) - res.End
		default:
			f.other += fi.Size()
		}
	}
	return f
}

// framed is the sum of the parts of the segments measureStore tells
// apart: segments when it measured right.
func (f storeFootprint) framed() int64 {
	n := f.segHdrs + f.frameHdrs + f.keys + f.pad + f.hdrPayload + f.otherPayload
	for c := range f.evStored {
		n += f.evStored[c]
	}
	return n
}

// report says what f holds per byte of raw JSON.
func (f storeFootprint) report(raw int64) string {
	r := func(n int64) string { return fmt.Sprintf("%.4f", float64(n)/float64(raw)) }
	var b strings.Builder
	fmt.Fprintf(&b, "raw %d B: segments+dictionaries %s (segments %s, dictionaries %s in %d files); room %s, index %s, other %s; all files %s\n",
		raw, r(f.segments+f.dicts), r(f.segments), r(f.dicts), f.dictFiles, r(f.room), r(f.index), r(f.other), r(f.total))
	fmt.Fprintf(&b, "  %d frames: frame headers %s, keys %s, padding %s; %d header frames' payloads %s\n",
		f.frames, r(f.frameHdrs), r(f.keys), r(f.pad), f.hdrFrames, r(f.hdrPayload))
	for c := range f.evFrames {
		if f.evFrames[c] > 0 {
			fmt.Fprintf(&b, "  events frames of codec %d: %d, raw %s, stored %s (%.3f)\n",
				c, f.evFrames[c], r(f.evRaw[c]), r(f.evStored[c]), float64(f.evStored[c])/float64(f.evRaw[c]))
		}
	}
	return b.String()
}

// TestStoreFootprintAddsUp: measureStore's parts add up, to the bytes
// of the segments (to their last frame) and to every file of the store,
// on a store with compressed, dictionary-compressed and uncompressed
// frames, a preallocated active segment and a dictionary.
func TestStoreFootprintAddsUp(t *testing.T) {
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const sessions = 8
	var hs []store.Handle
	for i := range sessions {
		h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("footprint-%d", i), CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// Small frames, a flush of a few events each, until a dictionary is
	// made; then one large frame each.
	seq := make([]uint64, sessions)
	for round := 0; ; round++ {
		for i, h := range hs {
			if err := h.Append(ctx, testgen.V3Events(seq[i], 3, 300)...); err != nil {
				t.Fatal(err)
			}
			seq[i] += 3
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if ids, _ := segment.ListDicts(nil, dir); len(ids) > 0 && round > 4 {
			break
		}
		if round > 2000 {
			t.Fatal("no dictionary made")
		}
	}
	for i, h := range hs {
		if err := h.Append(ctx, testgen.V3Events(seq[i], 40, 2000)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A reader keeps the writer's close from trimming the preallocated
	// room (only the last process to close does; a reader's close trims
	// nothing), which the measure must tell apart.
	reader, err := enginetest.OpenUnchecked("a reader held beside the writer: the store is the one the test opened with OpenStore, which checks it", dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	f := measureStore(t, dir)
	t.Log("\n" + f.report(f.segments))
	if f.dictFiles == 0 || f.room == 0 || f.evFrames[0] == 0 || f.evFrames[1]+f.evFrames[2]+f.evFrames[3]+f.evFrames[4] == 0 || f.hdrFrames != sessions {
		t.Fatalf("the store is not what the test needs: %+v", f)
	}
	if got := f.framed(); got != f.segments {
		t.Errorf("segment parts add up to %d bytes, the segments take %d: %+v", got, f.segments, f)
	}
	if got := f.segments + f.room + f.dicts + f.index + f.other; got != f.total {
		t.Errorf("files add up to %d bytes, the directory holds %d: %+v", got, f.total, f)
	}
	var want int64
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			want += fi.Size()
		}
		return err
	})
	if err != nil || f.total != want {
		t.Errorf("total %d, the directory's files take %d (%v)", f.total, want, err)
	}
}

// BenchmarkRealLogsStore replays the real session logs (see realLogsEnv;
// skipped without them) into one store, all 136 in path order, a flush
// per batch, reps times (each time under other IDs), and reports what
// the store takes per byte of raw JSON once closed: store/raw its
// segments (to the end of their last frame) and dictionary files,
// disk/raw every file (the preallocated room of the active segment and
// the index too). The breakdown (where the segments' bytes go) is
// logged.
func BenchmarkRealLogsStore(b *testing.B) {
	root := os.Getenv(realLogsEnv)
	if root == "" {
		b.Skipf("set %s to a checkout of deepseek-ai/deepseek-harness to replay its recorded session logs", realLogsEnv)
	}
	history, measured := loadRealLogs(b, root)
	var logs []*realLog // in path order again
	for i := range len(history) + len(measured) {
		if i%2 == 0 {
			logs = append(logs, history[i/2])
		} else {
			logs = append(logs, measured[i/2])
		}
	}
	for _, reps := range []int{1, 9} {
		b.Run(fmt.Sprintf("reps=%d", reps), func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				db, err := enginetest.OpenStore(b, dir, &engine.Options{Catalog: event.AnyCatalog(), CompactInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				var raw int64
				for rep := range reps {
					again := make([]*realLog, len(logs))
					for i, l := range logs {
						c := *l
						c.header.ID = fmt.Sprintf("%s%d", l.header.ID[:len(l.header.ID)-1], rep)
						again[i] = &c
						raw += l.raw
					}
					replayRealLogs(b, db, again)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				f := measureStore(b, dir)
				b.Log("\n" + f.report(raw))
				b.ReportMetric(float64(f.segments+f.dicts)/float64(raw), "store/raw")
				b.ReportMetric(float64(f.total)/float64(raw), "disk/raw")
				b.ReportMetric(float64(raw), "raw-B")
				// Then once compaction has recoded it (docs/FORMAT.md, Codecs):
				// reopened, the active segment sealed and every sealed
				// segment of S2 frames compressed again with zstd, closed.
				db, err = enginetest.OpenStore(b, dir, &engine.Options{Catalog: event.AnyCatalog(), CompactInterval: -1})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := db.Compact(context.Background(), engine.CompactOptions{Roll: true}); err != nil {
					b.Fatal(err)
				}
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				f = measureStore(b, dir)
				b.Log("recoded:\n" + f.report(raw))
				b.ReportMetric(float64(f.segments+f.dicts)/float64(raw), "recoded-store/raw")
				b.ReportMetric(float64(f.total)/float64(raw), "recoded-disk/raw")
			}
		})
	}
}

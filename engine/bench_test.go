package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

func benchDB(b *testing.B, opts *engine.Options) *engine.DB {
	b.Helper()
	db, err := engine.OpenStore(b, b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkFlush: one 300-byte event appended and flushed per operation,
// by 1..256 sessions at once (each its own goroutine and session), beside
// the physical limit measured in the same run: a raw write + fdatasync of
// a frame's worth of bytes into a preallocated file.
func BenchmarkFlush(b *testing.B) {
	ctx := context.Background()
	b.Run("mode=raw-fdatasync", func(b *testing.B) {
		f, err := vfs.Default.Create(filepath.Join(b.TempDir(), "raw"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		const size = 64 << 20
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			b.Fatal(err)
		}
		f.Sync()
		buf := make([]byte, 360)
		var lat []time.Duration
		off := int64(0)
		for b.Loop() {
			t := time.Now()
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
			off = (off + 360) % (size - 360)
		}
		reportLatency(b, lat)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	type variant struct {
		name string
		n    int
		opts *engine.Options
	}
	var variants []variant
	for _, n := range []int{1, 8, 64, 256} {
		variants = append(variants, variant{fmt.Sprintf("mode=engine/sessions=%d", n), n, nil})
	}
	variants = append(variants, variant{"mode=engine-noindex/sessions=1", 1, &engine.Options{NoIndex: true}})
	for _, v := range variants {
		n := v.n
		b.Run(v.name, func(b *testing.B) {
			db := benchDB(b, v.opts)
			hs := make([]*engine.Handle, n)
			for i := range hs {
				h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s-%d", i), CreatedAt: 1})
				if err != nil {
					b.Fatal(err)
				}
				hs[i] = h
			}
			evs := testgen.Events(0, 1, 300)
			b.SetBytes(int64(testgen.Size(evs)))
			b.ReportAllocs()
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			b.ResetTimer()
			per := (b.N + n - 1) / n
			pool := testgen.Events(0, 512, 300) // generated outside the timed loop
			b.ResetTimer()
			for i := range hs {
				wg.Go(func() {
					h := hs[i]
					my := make([]time.Duration, 0, per)
					for seq := range uint64(per) {
						e := pool[(int(seq)+i)%len(pool)]
						e.Seq = seq
						t := time.Now()
						if err := h.Append(ctx, e); err != nil {
							b.Error(err)
							return
						}
						if err := h.Flush(ctx); err != nil {
							b.Error(err)
							return
						}
						my = append(my, time.Since(t))
					}
					mu.Lock()
					lat = append(lat, my...)
					mu.Unlock()
				})
			}
			wg.Wait()
			b.StopTimer()
			reportLatency(b, lat)
			b.ReportMetric(float64(per*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAppend: best-effort appends (no flush) of 300-byte events.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	for _, batch := range []int{1, 1000} {
		for _, codec := range []string{"zstd", "none"} {
			b.Run(fmt.Sprintf("batch=%d/codec=%s", batch, codec), func(b *testing.B) {
				db := benchDB(b, &engine.Options{Uncompressed: codec == "none"})
				h, err := db.Create(ctx, store.Header{ID: "bulk", CreatedAt: 1})
				if err != nil {
					b.Fatal(err)
				}
				pool := testgen.Events(0, 4096, 300)
				b.SetBytes(int64(testgen.Size(pool[:batch])))
				b.ReportAllocs()
				seq := uint64(0)
				evs := make([]event.Event, batch)
				for b.Loop() {
					for i := range evs {
						evs[i] = pool[(int(seq)+i)%len(pool)]
						evs[i].Seq = seq + uint64(i)
					}
					if err := h.Append(ctx, evs...); err != nil {
						b.Fatal(err)
					}
					seq += uint64(batch)
				}
				b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
				b.StopTimer()
				if err := h.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				snap, _ := db.Stat(ctx, "bulk")
				b.ReportMetric(float64(snap.SizeBytes)/float64(seq), "disk-B/event")
			})
		}
	}
}

// loadSession writes n 300-byte events to one session and flushes.
func loadSession(b *testing.B, db *engine.DB, id string, n int) {
	b.Helper()
	ctx := context.Background()
	h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		if err := h.Append(ctx, testgen.Events(uint64(i), min(1000, n-i), 300)...); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReplay reads a 100k-event session from start to end.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	const n = 100_000
	dir := b.TempDir()
	db, err := engine.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	loadSession(b, db, "s", n)
	db.Close()
	db, err = engine.OpenStore(b, dir, nil) // cold in-memory state, warm page cache
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	h, err := db.Open(ctx, "s", store.Read)
	if err != nil {
		b.Fatal(err)
	}
	first, _ := h.Read(ctx, 0, -1)
	b.SetBytes(int64(testgen.Size(first)))
	b.ReportAllocs()
	for b.Loop() {
		evs, err := h.Read(ctx, 0, -1)
		if err != nil || len(evs) != n {
			b.Fatalf("read %d events, %v", len(evs), err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRandomRead: Read(off, 100) at random offsets of a 100k-event
// session (index seek plus one or two frame decodes).
func BenchmarkRandomRead(b *testing.B) {
	for _, codec := range []string{"zstd", "none"} {
		b.Run("codec="+codec, func(b *testing.B) {
			ctx := context.Background()
			db := benchDB(b, &engine.Options{Uncompressed: codec == "none"})
			loadSession(b, db, "s", 100_000)
			h, err := db.Open(ctx, "s", store.Read)
			if err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			off := 0
			for b.Loop() {
				off = (off*7919 + 104729) % (100_000 - 100)
				t := time.Now()
				evs, err := h.Read(ctx, off, 100)
				if err != nil || len(evs) != 100 {
					b.Fatalf("read %d, %v", len(evs), err)
				}
				lat = append(lat, time.Since(t))
			}
			reportLatency(b, lat)
		})
	}
}

var openPerSession = flag.Int("open-per-session", 100, "events per session in BenchmarkOpen's store (1000 gives about 1 GB of segments)")

// BenchmarkOpen measures Open of a store after a clean close and after a
// crash that left the tail unindexed (no index checkpoint since).
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	const sessions = 10_000
	perSession := *openPerSession
	dir := b.TempDir()
	db, err := engine.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range sessions {
		h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s-%05d", i), CreatedAt: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Append(ctx, testgen.Events(0, perSession, 300)...); err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
	db.Close()
	var segBytes int64
	ids, _ := segment.List(nil, dir)
	for _, id := range ids {
		if b, err := vfs.ReadFile(vfs.Default, filepath.Join(dir, segment.Name(id))); err == nil {
			segBytes += int64(len(b))
		}
	}
	b.Logf("store: %d sessions, %d events, %d segments, %.0f MB of segments", sessions, sessions*perSession, len(ids), float64(segBytes)/1e6)
	b.Run(fmt.Sprintf("state=clean/sessions=%d", sessions), func(b *testing.B) {
		for b.Loop() {
			db, err := engine.OpenStore(b, dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
	// A stale index: the checkpoint of before the last 64 MiB of appends,
	// as a crash before the next checkpoint would leave it.
	staleDir := b.TempDir()
	var staleIndex []byte
	func() {
		db, err := engine.OpenStore(b, staleDir, nil)
		if err != nil {
			b.Fatal(err)
		}
		loadSession(b, db, "warm", 1000)
		db.Close()
		old, err := vfs.ReadFile(vfs.Default, filepath.Join(staleDir, "index.db"))
		if err != nil {
			b.Fatal(err)
		}
		db, err = engine.OpenStore(b, staleDir, nil)
		if err != nil {
			b.Fatal(err)
		}
		loadSession(b, db, "tail", 220_000) // about 64 MiB of raw events
		db.Close()
		staleIndex = old
		if err := os.WriteFile(filepath.Join(staleDir, "index.db"), old, 0o644); err != nil {
			b.Fatal(err)
		}
	}()
	b.Run("state=stale-index/unindexed=64MiB", func(b *testing.B) {
		for b.Loop() {
			db, err := engine.OpenStore(b, staleDir, &engine.Options{IndexInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
			// Close checkpointed the tail; put the stale index back.
			b.StopTimer()
			if err := os.WriteFile(filepath.Join(staleDir, "index.db"), staleIndex, 0o644); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run(fmt.Sprintf("state=no-index/sessions=%d", sessions), func(b *testing.B) {
		for b.Loop() {
			db, err := engine.OpenStore(b, dir, &engine.Options{NoIndex: true})
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
}

// BenchmarkIdleHandle reports the heap an open, idle read handle costs.
func BenchmarkIdleHandle(b *testing.B) {
	ctx := context.Background()
	db := benchDB(b, nil)
	loadSession(b, db, "s", 10)
	const n = 10_000
	hs := make([]*engine.Handle, 0, n)
	var before, after runtime.MemStats
	for b.Loop() {
		clear(hs[:cap(hs)]) // drop the last round's handles, or they count in before
		hs = hs[:0]
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			h, err := db.Open(ctx, "s", store.Read)
			if err != nil {
				b.Fatal(err)
			}
			hs = append(hs, h)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		for _, h := range hs {
			h.Close()
		}
	}
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/n, "heap-B/handle")
	runtime.KeepAlive(hs)
}

// BenchmarkIdleSession: the heap a session written and closed keeps in a
// DB (heap-B/session): 2,000 sessions of 10 events of 300 bytes, each
// flushed and its handle closed.
func BenchmarkIdleSession(b *testing.B) {
	ctx := context.Background()
	const n = 2000
	evs := testgen.Events(0, 10, 300)
	var before, after runtime.MemStats
	for i := 0; b.Loop(); i++ {
		db, err := engine.OpenStore(b, b.TempDir(), &engine.Options{CompactInterval: -1}) // (not benchDB: its cleanup would keep every round's DB)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&before)
		for j := range n {
			h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s-%d-%d", i, j), CreatedAt: 1})
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Append(ctx, evs...); err != nil {
				b.Fatal(err)
			}
			if err := h.Close(); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		db.Close()
	}
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/n, "heap-B/session")
}

// BenchmarkFollow: the time from a writer's Flush returning to a read
// handle of another DB on the same store (a reader, as another process
// would be: it learns of the flush from the shared memory the writer
// publishes in) returning from Wait. One 300-byte event per operation.
func BenchmarkFollow(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	w, err := engine.OpenStore(b, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	h, _ := w.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	defer h.Close()
	h.Append(ctx, testgen.Event(0, 300))
	h.Flush(ctx)
	r, err := engine.OpenStore(b, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	flushed := make(chan time.Time, 1)
	done := make(chan error, 1)
	var woken atomic.Int64
	go func() {
		for i := range b.N {
			if _, err := rh.Wait(ctx, uint64(i+1)); err != nil {
				done <- err
				return
			}
			lat = append(lat, time.Since(<-flushed))
			woken.Add(1)
		}
		done <- nil
	}()
	b.ResetTimer()
	for i := range b.N {
		h.Append(ctx, testgen.Event(uint64(i+1), 300))
		if err := h.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		flushed <- time.Now()
		for woken.Load() < int64(i+1) && len(done) == 0 { // one flush at a time: measure each wake-up alone
			runtime.Gosched()
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkFirstRead: the first read of a session a reopened DB has not
// read yet (its frame list comes from the index: since many processes
// share the store, the index file is opened for that read and closed).
// One operation reads the last event of a session of 50 events.
func BenchmarkFirstRead(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	db, err := engine.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	const sessions = 2000
	for i := range sessions {
		h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s-%05d", i), CreatedAt: 1})
		if err != nil {
			b.Fatal(err)
		}
		h.Append(ctx, testgen.Events(0, 50, 300)...)
		h.Close()
	}
	db.Close()
	var lat []time.Duration
	i := sessions
	for b.Loop() {
		if i == sessions {
			b.StopTimer()
			db.Close()
			if db, err = engine.OpenStore(b, dir, nil); err != nil {
				b.Fatal(err)
			}
			i = 0
			b.StartTimer()
		}
		t := time.Now()
		h, err := db.Open(ctx, fmt.Sprintf("s-%05d", i), store.Read)
		if err != nil {
			b.Fatal(err)
		}
		evs, err := h.Read(ctx, 49, 1)
		if err != nil || len(evs) != 1 {
			b.Fatalf("read %d, %v", len(evs), err)
		}
		lat = append(lat, time.Since(t))
		i++
	}
	db.Close()
	reportLatency(b, lat)
}

// BenchmarkWriteOpen: Open(Write) of a session of 10 or 100,000 small
// (100-byte) events; the handle's Close is not timed. restart=true opens
// a fresh DB over the store before each open (not timed): what the DB
// knows of the session is its index record, the worst case; restart=false
// opens it again in one DB. open-ns is the median open.
func BenchmarkWriteOpen(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{10, 100_000} {
		for _, restart := range []bool{true, false} {
			b.Run(fmt.Sprintf("events=%d/restart=%v", n, restart), func(b *testing.B) {
				dir := b.TempDir()
				db, err := engine.OpenStore(b, dir, nil)
				if err != nil {
					b.Fatal(err)
				}
				h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < n; i += 1000 {
					if err := h.Append(ctx, testgen.Events(uint64(i), min(1000, n-i), 100)...); err != nil {
						b.Fatal(err)
					}
				}
				if err := h.Close(); err != nil {
					b.Fatal(err)
				}
				db.Close()
				if db, err = engine.OpenStore(b, dir, nil); err != nil {
					b.Fatal(err)
				}
				var lat []time.Duration
				for b.Loop() {
					if restart {
						b.StopTimer()
						db.Close()
						if db, err = engine.OpenStore(b, dir, nil); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					t := time.Now()
					h, err := db.Open(ctx, "s", store.Write)
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t))
					b.StopTimer()
					if err := h.Close(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				db.Close()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "open-ns")
			})
		}
	}
}

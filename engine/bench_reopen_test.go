package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// BenchmarkFlushAfterReopen: a store holding 3 MiB of frames in its active
// segment is closed and opened again, and one session appends and flushes
// one 300-byte event per operation: what the room a write open finds (or,
// once the last close trimmed it, the growth it kicks) costs the flushes
// that follow. Reports the p50 and p99 of every flush, and first20-ns: the
// mean of the first 20 (before the growth is in place, they extend the
// file). Each iteration is one reopen and 200 flushes.
func BenchmarkFlushAfterReopen(b *testing.B) {
	ctx := context.Background()
	opts := &engine.Options{Uncompressed: true, CompactInterval: -1}
	dir := b.TempDir()
	db, err := engine.OpenStore(b, dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		b.Fatal(err)
	}
	evs := testgen.Events(0, 6000, 500)
	for i := 0; i < len(evs); i += 200 {
		if err := h.Append(ctx, evs[i:i+200]...); err != nil {
			b.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	h.Close()
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	seq := uint64(len(evs))
	var lat []time.Duration
	var first time.Duration
	for b.Loop() {
		db, err := engine.OpenStore(b, dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		h, err := db.Open(ctx, "s", store.Write)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 200 {
			t := time.Now()
			if err := h.Append(ctx, testgen.Events(seq, 1, 300)...); err != nil {
				b.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t)
			lat = append(lat, d)
			if i < 20 {
				first += d
			}
			seq++
		}
		h.Close()
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(first.Nanoseconds())/float64(20*b.N), "first20-ns")
	reportLatency(b, lat)
}

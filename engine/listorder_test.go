package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// TestListPageKeepsOrder pages through a store in ID order while
// sessions are made (here and in another DB, as another process),
// deleted and made again between the pages, and checks each full listing
// against the sessions there are (the order ListPage keeps between calls
// must follow all of it).
func TestListPageKeepsOrder(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	want := map[string]bool{}
	mk := func(d *engine.DB, id string) {
		h, err := d.Create(ctx, enginetest.Meta(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, enginetest.OneTurn()[0]); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	check := func(label string, prefix string, limit int) {
		t.Helper()
		var got []string
		after := ""
		for {
			page, next, err := db.ListPage(ctx, store.ListOptions{Prefix: prefix, After: after, Limit: limit})
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			for _, s := range page {
				got = append(got, s.Header.ID)
			}
			if next == "" {
				break
			}
			after = next
		}
		var exp []string
		for id := range want {
			if len(id) >= len(prefix) && id[:len(prefix)] == prefix {
				exp = append(exp, id)
			}
		}
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Fatalf("%s: listed %d sessions %v…, want %d %v…", label, len(got), got[:min(5, len(got))], len(exp), exp[:min(5, len(exp))])
		}
	}
	for i := range 300 {
		mk(db, fmt.Sprintf("s%03d", i*2))
	}
	check("first listing", "", 7)
	for i := range 10 { // few: kept apart from the sorted IDs
		mk(db, fmt.Sprintf("s%03d", i*2+1))
	}
	check("after a few more", "", 7)
	check("a prefix", "s01", 3)
	for i := range 40 {
		if err := db.Delete(ctx, fmt.Sprintf("s%03d", i*2)); err != nil {
			t.Fatal(err)
		}
		delete(want, fmt.Sprintf("s%03d", i*2))
	}
	check("after deletes", "", 11)
	for i := range 100 { // many, some made again: merged in
		if id := fmt.Sprintf("s%03d", i*3); !want[id] {
			mk(db, id)
		}
	}
	check("after many more", "", 13)
	for i := range 25 { // made by another process: this DB's fold meets them
		mk(other, fmt.Sprintf("o%03d", i))
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Open(ctx, "o000", store.Read); err != nil { // (a read follows the other process)
		t.Fatal(err)
	}
	check("after another process made some", "", 17)
	check("its prefix", "o", 4)
	// Reopened: the order starts from the index's (in ID order), and the
	// replay past its checkpoint adds what followed.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = engine.OpenStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("reopened", "", 19)
	for i := range 5 {
		mk(db, fmt.Sprintf("r%03d", i))
	}
	check("reopened, after a few more", "", 23)
}

// BenchmarkListPage lists a page of 100 sessions from a store of many
// (SEGLOG_LIST_SESSIONS, default 100,000; 1,000,000 for the scale goal),
// in ID order and in OrderUpdated: ns/op is one page after the first
// (which orders every session once). In OrderUpdated, 10 sessions are
// updated (an event appended and flushed, not timed) before each page,
// which places them again.
func BenchmarkListPage(b *testing.B) {
	ctx := context.Background()
	n := envInt("SEGLOG_LIST_SESSIONS", 100_000)
	db, err := engine.OpenStore(b, b.TempDir(), &engine.Options{NoIndex: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	hs := make([]*engine.Handle, 0, 1000)
	for i := range n {
		h, err := db.Create(ctx, enginetest.Meta(fmt.Sprintf("agent-%07d", i)))
		if err != nil {
			b.Fatal(err)
		}
		ev := enginetest.OneTurn()[0]
		ev.Time += int64(i * 7919 % n)
		if err := h.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
		if len(hs) == cap(hs) || i == n-1 {
			if err := db.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			for _, h := range hs {
				h.Close()
			}
			hs = hs[:0]
		}
	}
	b.Run("order=id", func(b *testing.B) {
		if _, _, err := db.ListPage(ctx, store.ListOptions{Limit: 100}); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			after := fmt.Sprintf("agent-%07d", (i*7919)%n)
			page, _, err := db.ListPage(ctx, store.ListOptions{After: after, Limit: 100})
			if err != nil || (len(page) == 0 && (i*7919)%n < n-1) {
				b.Fatalf("page after %s: %d, %v", after, len(page), err)
			}
		}
	})
	b.Run("order=updated", func(b *testing.B) {
		opts := store.ListOptions{OrderBy: store.OrderUpdated, Limit: 100}
		if _, _, err := db.ListPage(ctx, opts); err != nil {
			b.Fatal(err)
		}
		at := int64(2 * n)
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			for j := range 10 {
				h, err := db.Open(ctx, fmt.Sprintf("agent-%07d", (i*10+j)*7919%n), store.Write)
				if err != nil {
					b.Fatal(err)
				}
				ev := enginetest.OneTurn()[5]
				ev.Seq, ev.Time, at = h.Len(), at, at+1
				if err := h.Append(ctx, ev); err != nil {
					b.Fatal(err)
				}
				if err := h.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			page, next, err := db.ListPage(ctx, opts)
			if err != nil || len(page) != 100 {
				b.Fatalf("page %d: %d, %v", i, len(page), err)
			}
			if opts.After = next; i%50 == 49 {
				opts.After = "" // (from the start again: the updated ones first)
			}
		}
	})
}

// envInt is the integer in environment variable name, or def.
func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// BenchmarkOpenSessions opens a store of many sessions
// (SEGLOG_OPEN_SESSIONS, default 100,000; 1,000,000 for the scale goal)
// whose index holds them all, each updated at another time (so that the
// two orders differ): ns/op is one open, heap-B/session what the open DB
// holds per session, first-page-ns and first-updated-page-ns the first
// page of 100 after the open in ID order and then in OrderUpdated,
// page-ns and updated-page-ns a later page of each (following the
// cursors), slowest-page-ns the slowest page of all. SEGLOG_OPEN_DIR names a directory to build the store in once
// and reuse (building a million sessions takes minutes): the store is
// built there if it is not yet, and left for the next run (delete it).
func BenchmarkOpenSessions(b *testing.B) {
	ctx := context.Background()
	n := envInt("SEGLOG_OPEN_SESSIONS", 100_000)
	dir := os.Getenv("SEGLOG_OPEN_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	built := filepath.Join(dir, fmt.Sprintf("built-%d", n))
	if _, err := os.Stat(built); err != nil {
		buildSessions(b, dir, n)
		if err := os.WriteFile(built, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var first, firstUpd, later, laterUpd, slowest time.Duration
	var pages, pagesUpd int
	var heapB float64
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		b.StopTimer() // (the collection of the DB before is no part of an open)
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		db, err := engine.OpenStore(b, dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heapB += float64(after.HeapAlloc) - float64(before.HeapAlloc)
		for _, order := range []store.ListOrder{store.OrderID, store.OrderUpdated} {
			opts := store.ListOptions{OrderBy: order, Limit: 100}
			for i := range 21 {
				start := time.Now()
				p, next, err := db.ListPage(ctx, opts)
				took := time.Since(start)
				slowest = max(slowest, took)
				if err != nil || len(p) != 100 || next == "" {
					b.Fatalf("page %d in %v order: %d, %v", i, order, len(p), err)
				}
				if order == store.OrderUpdated && p[0].UpdatedAt <= p[99].UpdatedAt {
					b.Fatalf("page %d in %v order: updated at %d .. %d", i, order, p[0].UpdatedAt, p[99].UpdatedAt)
				}
				switch {
				case i == 0 && order == store.OrderID:
					first += took
				case i == 0:
					firstUpd += took
				case order == store.OrderID:
					later, pages = later+took, pages+1
				default:
					laterUpd, pagesUpd = laterUpd+took, pagesUpd+1
				}
				opts.After = next
			}
		}
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(heapB/float64(b.N)/float64(n), "heap-B/session")
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-page-ns")
	b.ReportMetric(float64(firstUpd.Nanoseconds())/float64(b.N), "first-updated-page-ns")
	b.ReportMetric(float64(later.Nanoseconds())/float64(pages), "page-ns")
	b.ReportMetric(float64(laterUpd.Nanoseconds())/float64(pagesUpd), "updated-page-ns")
	b.ReportMetric(float64(slowest.Nanoseconds()), "slowest-page-ns")
}

// buildSessions makes a store of n sessions of one turn each in dir,
// session i updated at a time a permutation of i gives, and closes it (its
// index then holds them all).
func buildSessions(b *testing.B, dir string, n int) {
	ctx := context.Background()
	db, err := engine.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	hs := make([]*engine.Handle, 0, 1000)
	for i := range n {
		h, err := db.Create(ctx, enginetest.Meta(fmt.Sprintf("agent-%07d", i)))
		if err != nil {
			b.Fatal(err)
		}
		evs := enginetest.OneTurn()
		at := int64(i*7919%n) * 10 // (7919 is prime: a permutation)
		for j := range evs {
			evs[j].Time += at
		}
		if err := h.Append(ctx, evs...); err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
		if len(hs) == cap(hs) || i == n-1 {
			if err := db.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			for _, h := range hs {
				h.Close()
			}
			hs = hs[:0]
		}
	}
	if err := db.Close(); err != nil { // (checkpoints the index)
		b.Fatal(err)
	}
}

package search_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// BenchmarkBuild builds the index of an agent-workload store
// (bench.AgentTurn; BUILD_SESSIONS sessions of 2 turns, 200 by
// default) from its change feed, the store read included: events/s and
// the index's bytes over the raw JSON of the indexed events, without
// and with the trigram table.
func BenchmarkBuild(b *testing.B) {
	ctx := context.Background()
	sessions := 200
	if n, err := strconv.Atoi(os.Getenv("BUILD_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	st, events, raw := agentStore(b, sessions)
	b.ResetTimer()
	var bytes, triBytes int64
	for i := range b.N {
		ixDir := filepath.Join(b.TempDir(), strconv.Itoa(i))
		ix, err := search.Open(st, ixDir, search.Options{Fresh: -1})
		if err != nil {
			b.Fatal(err)
		}
		if err := ix.CatchUp(ctx, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ix.Close() // (its last connection: the WAL is checkpointed and removed)
		if bytes, err = search.DirBytes(ixDir); err != nil {
			b.Fatal(err)
		}
		if ix, err = search.Open(st, ixDir, search.Options{Fresh: -1, Trigrams: true}); err != nil {
			b.Fatal(err)
		}
		ix.Close()
		if triBytes, err = search.DirBytes(ixDir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(raw), "bytes/raw")
	b.ReportMetric(float64(triBytes)/float64(raw), "bytes/raw-with-trigrams")
}

// agentStore writes sessions of 2 agent turns (bench.AgentTurn) into a
// new store: the store, its events, and the raw JSON bytes of those the
// index takes.
func agentStore(b *testing.B, sessions int) (st store.Store, events, raw int64) {
	ctx := context.Background()
	dir := b.TempDir()
	db, err := enginetest.OpenStore(b, dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	st = store.Wrap[*engine.Handle](db)
	c, err := bench.LoadCorpus("")
	if err != nil {
		b.Fatal(err)
	}
	for i := range sessions {
		h, err := st.Create(ctx, store.Header{ID: bench.AgentSessionID(i), CreatedAt: 1})
		if err != nil {
			b.Fatal(err)
		}
		var seq uint64
		for turn := range 2 {
			evs := bench.AgentTurn(c, i, turn, seq)
			seq += uint64(len(evs))
			events += int64(len(evs))
			for _, e := range evs {
				if _, ok := search.DocOf(e, 0); ok {
					raw += int64(len(e.Data))
				}
			}
			if err := h.Append(ctx, evs...); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return st, events, raw
}

// BenchmarkQuery times two-word queries (BUILD_SESSIONS sessions, as
// BenchmarkBuild), words of the corpus the sessions were written from,
// as a host makes them (every role, a page of up to 50 sessions): the
// p50 and p99 latency.
func BenchmarkQuery(b *testing.B) {
	ctx := context.Background()
	sessions := 200
	if n, err := strconv.Atoi(os.Getenv("BUILD_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	st, _, _ := agentStore(b, sessions)
	ix, err := search.Open(st, b.TempDir(), search.Options{Fresh: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	if err := ix.CatchUp(ctx, nil); err != nil {
		b.Fatal(err)
	}
	c, err := bench.LoadCorpus("")
	if err != nil {
		b.Fatal(err)
	}
	var words []string
	for _, f := range c.Files {
		if strings.HasSuffix(f.Path, ".md") {
			for _, w := range strings.Fields(f.Text) {
				w = strings.Trim(strings.ToLower(w), ".,;:()`*\"'[]|")
				if len(w) >= 5 && strings.IndexFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) < 0 {
					words = append(words, w)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	var lat []float64
	hits := 0
	b.ResetTimer()
	for range b.N {
		q := search.Query{Text: words[r.IntN(len(words))] + " " + words[r.IntN(len(words))], Roles: []string{"*"}, Limit: 50, PerSess: 50}
		t0 := time.Now()
		res, err := ix.Search(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		for _, s := range res.Sessions {
			hits += len(s.Hits)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(lat[min(len(lat)*99/100, len(lat)-1)], "p99-ms")
	b.ReportMetric(float64(hits)/float64(b.N), "hits/query")
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// SearchWorkload is the workload of bench's search row (--json's
// "workload"): S6 of issue 46 as the search package alone measures it.
const SearchWorkload bench.Workload = "search"

// searchTurns is the agent turns of each session of the search row's
// store (S6's shape: about 61 events a turn).
const searchTurns = 2

// searchFigures is the search row's own figures (--json's "search").
type searchFigures struct {
	Indexed    int           `json:"indexed_events"` // events of the store with text the index takes (search.DocOf)
	IndexBytes int64         `json:"index_bytes"`    // the index's files after the build (words table; no trigrams)
	Queries    int           `json:"queries"`        // queries of each kind
	TwoWords   int           `json:"two_word_hits"`  // hits of the two-word queries together (first pages of 50)
	PhraseP50  time.Duration `json:"phrase_p50_ns"`
	PhraseP99  time.Duration `json:"phrase_p99_ns"`
}

// IndexPerRaw is the index's bytes over the raw JSON of the indexed
// events.
func (f *searchFigures) IndexPerRaw(raw int64) float64 {
	return float64(f.IndexBytes) / float64(max(raw, 1))
}

// runSearchRow runs the search row, S6 of issue 46 with the search
// package alone (the anchors, SQLite FTS5 in the hosts' schema and a
// JSONL scan, are bench/peers' BenchmarkS6, a module cmd/seglog does not
// import): a.searchSessions sessions of searchTurns agent turns
// (bench.AgentTurn) written to an engine store, the index built from its
// change feed (CatchUp, the store's read included: the row's events/s),
// its bytes over the raw JSON of the events it indexed, then
// a.searchQueries two-word queries (the row's p50 and p99) and as many
// phrases, words of the corpus the events were made of, as a host makes
// them (every role, a page of 50 sessions).
func runSearchRow(ctx context.Context, w io.Writer, prog *progress, a benchArgs) (benchRow, error) {
	name := fmt.Sprintf("search: index build from the change feed, %d sessions x %d turns", a.searchSessions, searchTurns)
	r := benchRow{Name: name, Result: bench.Result{Workload: SearchWorkload, Sessions: a.searchSessions, Turns: searchTurns},
		Search: &searchFigures{}}
	dir := filepath.Join(a.dir, "search")
	corpus, err := bench.LoadCorpus("")
	if err != nil {
		return r, err
	}
	r.Corpus = corpus.Source
	st, err := bench.Local(nil)(filepath.Join(dir, "store"))
	if err != nil {
		return r, err
	}
	defer st.Close()

	// The store, written before the clock starts.
	task := prog.start("search: writing the store", a.searchSessions, "sessions", true)
	for i := range a.searchSessions {
		h, err := st.Create(ctx, store.Header{ID: bench.AgentSessionID(i), CreatedAt: 1_750_000_000_000 + int64(i), Cwd: fmt.Sprintf("/w/%d", i%10)})
		if err != nil {
			task.end(true)
			return r, err
		}
		var seq uint64
		for t := range searchTurns {
			evs := bench.AgentTurn(corpus, i, t, seq)
			seq += uint64(len(evs))
			r.Events += len(evs)
			r.InputBytes += int64(testgen.Size(evs))
			for _, e := range evs {
				if _, ok := search.DocOf(e, 0); ok {
					b, err := json.Marshal(e)
					if err != nil {
						task.end(true)
						return r, err
					}
					r.Search.Indexed++
					r.RawJSONBytes += int64(len(b))
				}
			}
			if err := h.Append(ctx, evs...); err != nil {
				h.Close()
				task.end(true)
				return r, err
			}
		}
		if err := h.Close(); err != nil {
			task.end(true)
			return r, err
		}
		task.set(i + 1)
	}
	err = st.Flush(ctx)
	task.end(err != nil)
	if err != nil {
		return r, err
	}

	// The build: from the feed's start, as a first search or a rebuild
	// makes it.
	ixDir := filepath.Join(dir, "index")
	task = prog.start(name, r.Events, "events", true)
	ix, err := search.Open(st, ixDir, search.Options{Fresh: -1})
	if err != nil {
		task.end(true)
		return r, err
	}
	start := time.Now()
	err = ix.CatchUp(ctx, func(done, _ uint64) { task.set(int(done)) })
	r.Elapsed = time.Since(start)
	err = joinErr(err, ix.Close()) // its last connection: the WAL is checkpointed and removed
	task.end(err != nil)
	if err != nil {
		return r, err
	}
	if r.Search.IndexBytes, err = search.DirBytes(ixDir); err != nil {
		return r, err
	}

	// The queries, as a host makes them (Options.Fresh's default: a
	// catch-up when the last is older than a second).
	if ix, err = search.Open(st, ixDir, search.Options{}); err != nil {
		return r, err
	}
	defer ix.Close()
	two, phrase := searchQueries(corpus, a.searchQueries)
	r.Search.Queries = a.searchQueries
	task = prog.start("search: queries", 2*a.searchQueries, "queries", true)
	timeAll := func(texts []string, done int) ([]time.Duration, int, error) {
		var lat []time.Duration
		hits := 0
		for k, text := range texts {
			t0 := time.Now()
			res, err := ix.Search(ctx, search.Query{Text: text, Roles: []string{"*"}, Limit: 50, PerSess: 50})
			if err != nil {
				return nil, 0, fmt.Errorf("query %q: %w", text, err)
			}
			lat = append(lat, time.Since(t0))
			for _, s := range res.Sessions {
				hits += len(s.Hits)
			}
			task.set(done + k + 1)
		}
		slices.Sort(lat)
		return lat, hits, nil
	}
	lat, hits, err := timeAll(two, 0)
	if err != nil {
		task.end(true)
		return r, err
	}
	r.Search.TwoWords = hits
	r.Latency = bench.Distribution(lat)
	r.P50, r.P99 = pct(lat, 50), pct(lat, 99)
	plat, _, err := timeAll(phrase, len(two))
	task.end(err != nil)
	if err != nil {
		return r, err
	}
	r.Search.PhraseP50, r.Search.PhraseP99 = pct(plat, 50), pct(plat, 99)
	return r, printSearchRow(w, r)
}

// printSearchRow prints the search row's section: each figure beside
// its goal (issue 46), and by how much a missed goal is missed.
func printSearchRow(w io.Writer, r benchRow) error {
	f := r.Search
	fmt.Fprintf(w, "\nsearch (issue 46's S6, the search package alone): %d sessions x %d agent turns, %d events, %d indexed (%.1f MiB raw JSON); anchors and the issue's size: bench/peers BenchmarkS6\n",
		r.Sessions, r.Turns, r.Events, f.Indexed, float64(r.RawJSONBytes)/(1<<20))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tsearch package\tgoal\t\tverdict")
	rate := r.EventsPerSec()
	fmt.Fprintf(tw, "build from the change feed, events/s\t%.0f\t>= 30000\t\t%s\n", rate, atLeast(rate, 30000))
	per := f.IndexPerRaw(r.RawJSONBytes)
	fmt.Fprintf(tw, "index bytes / raw JSON of the indexed events\t%.2f\t<= 0.5\t\t%s\n", per, atMost(per, 0.5))
	p50, p99 := ms(r.P50), ms(r.P99)
	fmt.Fprintf(tw, "two words (%d queries), p50 / p99 ms\t%.2f / %.2f\t<= 5 / <= 50\t\t%s / %s\n", f.Queries, p50, p99, atMost(p50, 5), atMost(p99, 50))
	fmt.Fprintf(tw, "phrase, p50 / p99 ms\t%.2f / %.2f\t\t\t\n", ms(f.PhraseP50), ms(f.PhraseP99))
	return tw.Flush()
}

// atLeast and atMost say whether a figure meets its goal, and by how
// much it misses it.
func atLeast(v, goal float64) string {
	if v >= goal {
		return "met"
	}
	return fmt.Sprintf("missed, %.2fx", v/goal)
}

func atMost(v, goal float64) string {
	if v <= goal {
		return "met"
	}
	return fmt.Sprintf("missed, %.1fx over", v/goal)
}

// pct is the latency at percentile p of sorted (nearest rank at or
// below, as bench.Distribution).
func pct(sorted []time.Duration, p float64) time.Duration {
	for _, q := range bench.Distribution(sorted) {
		if q.P == p {
			return q.Latency
		}
	}
	return 0
}

// searchQueries returns n two-word queries and n phrases (two words that
// follow each other), words of the corpus's .md files, 5 letters or more
// (the same draw as bench/peers' S6: seed 7, 7); of all its files if it
// has no .md file (the corpus built into a binary run outside the source
// tree is its .go files).
func searchQueries(c *bench.Corpus, n int) (two, phrase []string) {
	var words []string
	take := func(md bool) {
		for _, f := range c.Files {
			if md && !strings.HasSuffix(f.Path, ".md") {
				continue
			}
			for _, w := range strings.Fields(f.Text) {
				w = strings.Trim(strings.ToLower(w), ".,;:()`*\"'[]|")
				if len(w) >= 5 && strings.IndexFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) < 0 {
					words = append(words, w)
				}
			}
		}
	}
	if take(true); len(words) < 2 {
		take(false)
	}
	if len(words) < 2 {
		words = []string{"search", "index"} // (a corpus without words: queries that find nothing)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range n {
		i := r.IntN(len(words) - 1)
		two = append(two, words[i]+" "+words[r.IntN(len(words))])
		phrase = append(phrase, `"`+words[i]+" "+words[i+1]+`"`)
		r.IntN(len(words)) // S6's substring draw, kept so the pairs are S6's
	}
	return two, phrase
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	bq "github.com/blevesearch/bleve/v2/search/query"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// The choice of the search engine (issue 46, docs/SEARCH.md "Search"):
// the same agent-shaped events, indexed by the search package (SQLite
// FTS5 through modernc.org/sqlite) and by bleve v2, side by side.

// ChoiceResult is one engine's figures.
type ChoiceResult struct {
	Engine       string
	Events       int     // events read from the store
	Docs         int     // of them indexed (text)
	BuildPerSec  float64 // events per second, reading the store included
	IndexBytes   int64
	RawJSONBytes int64                 // of the indexed events
	Queries      map[string][2]float64 // kind: p50, p99 in ms
}

// ChoiceStore writes sessions×turns of the agent workload into a fresh
// engine store in dir.
func ChoiceStore(ctx context.Context, dir string, sessions, turns int) (store.Store, func() error, error) {
	c, err := bench.LoadCorpus("")
	if err != nil {
		return nil, nil, err
	}
	db, err := engine.Open(dir, nil)
	if err != nil {
		return nil, nil, err
	}
	st := store.Wrap[*engine.Handle](db)
	for i := range sessions {
		h, err := st.Create(ctx, store.Header{ID: bench.AgentSessionID(i), CreatedAt: 1_750_000_000_000 + int64(i), Cwd: "/w/" + fmt.Sprint(i%10)})
		if err != nil {
			return nil, nil, err
		}
		var seq uint64
		for t := range turns {
			evs := bench.AgentTurn(c, i, t, seq)
			seq += uint64(len(evs))
			if err := h.Append(ctx, evs...); err != nil {
				return nil, nil, err
			}
		}
		if err := h.Close(); err != nil {
			return nil, nil, err
		}
	}
	return st, db.Close, db.Flush(ctx)
}

// choiceQueries returns n queries of each kind, words cut from the corpus
// the events were made of.
func choiceQueries(n int) (map[string][]string, error) {
	c, err := bench.LoadCorpus("")
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(7, 7))
	var words []string
	for _, f := range c.Files {
		if !strings.HasSuffix(f.Path, ".md") {
			continue
		}
		for _, w := range strings.Fields(f.Text) {
			w = strings.Trim(strings.ToLower(w), ".,;:()`*\"'[]|")
			if len(w) >= 5 && strings.IndexFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) < 0 {
				words = append(words, w)
			}
		}
	}
	q := map[string][]string{}
	for range n {
		i := r.IntN(len(words) - 1)
		q["two words"] = append(q["two words"], words[i]+" "+words[r.IntN(len(words))])
		q["phrase"] = append(q["phrase"], words[i]+" "+words[i+1])
		w := words[r.IntN(len(words))]
		q["substring"] = append(q["substring"], w[1:len(w)-1])
	}
	return q, nil
}

// ChoiceFTS5 builds the search package's index of st in dir and times
// queries.
func ChoiceFTS5(ctx context.Context, st store.Store, dir string, nq int) (ChoiceResult, error) {
	res := ChoiceResult{Engine: "sqlite-fts5 (search package)", Queries: map[string][2]float64{}}
	build, err := search.Open(st, dir, search.Options{Fresh: -1})
	if err != nil {
		return res, err
	}
	start := time.Now()
	var events uint64
	err = build.CatchUp(ctx, func(done, total uint64) { events = total })
	build.Close()
	if err != nil {
		return res, err
	}
	res.BuildPerSec = float64(events) / time.Since(start).Seconds()
	res.Events = int(events)
	if res.Docs, res.RawJSONBytes, err = rawOfDocs(ctx, st); err != nil {
		return res, err
	}
	if res.IndexBytes, err = search.DirBytes(dir); err != nil {
		return res, err
	}
	// Searches as a host makes them: each catches up first if the last
	// catch-up is older than a second (Options.Fresh's default).
	ix, err := search.Open(st, dir, search.Options{})
	if err != nil {
		return res, err
	}
	defer ix.Close()
	qs, err := choiceQueries(nq)
	if err != nil {
		return res, err
	}
	for kind, list := range qs {
		var lat []float64
		for _, s := range list {
			q := search.Query{Text: s, Roles: []string{"*"}}
			if kind == "phrase" {
				q.Text = `"` + s + `"`
			}
			if kind == "substring" {
				q.Substring = true
			}
			t0 := time.Now()
			if _, err := ix.Search(ctx, q); err != nil {
				return res, fmt.Errorf("%s %q: %w", kind, s, err)
			}
			lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		}
		res.Queries[kind] = pcts(lat)
	}
	return res, nil
}

// rawOfDocs counts the indexed events of st and their raw JSON bytes.
func rawOfDocs(ctx context.Context, st store.Store) (int, int64, error) {
	var n int
	var raw int64
	err := eachEvent(ctx, st, func(id string, e event.Event) error {
		if _, ok := search.DocOf(e, 0); ok {
			b, _ := json.Marshal(e)
			n++
			raw += int64(len(b))
		}
		return nil
	})
	return n, raw, err
}

func eachEvent(ctx context.Context, st store.Store, f func(id string, e event.Event) error) error {
	snaps, err := st.List(ctx)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		h, err := st.Open(ctx, s.Header.ID, store.Read)
		if err != nil {
			return err
		}
		for e, err := range h.Events(ctx, 0) {
			if err != nil {
				h.Close()
				return err
			}
			if err := f(s.Header.ID, e); err != nil {
				h.Close()
				return err
			}
		}
		h.Close()
	}
	return nil
}

type bleveDoc struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Time    int64  `json:"time"`
	Text    string `json:"text"`
}

// ChoiceBleve indexes the same text of st with bleve v2 (its default
// mapping: the standard analyzer) in dir and times the same queries.
func ChoiceBleve(ctx context.Context, st store.Store, dir string, nq int) (ChoiceResult, error) {
	res := ChoiceResult{Engine: "bleve v2 (scorch, standard analyzer)", Queries: map[string][2]float64{}}
	m := bleve.NewIndexMapping()
	idx, err := bleve.New(dir, m)
	if err != nil {
		return res, err
	}
	defer idx.Close()
	start := time.Now()
	b := idx.NewBatch()
	err = eachEvent(ctx, st, func(id string, e event.Event) error {
		res.Events++
		d, ok := search.DocOf(e, 0)
		if !ok {
			return nil
		}
		res.Docs++
		if err := b.Index(fmt.Sprintf("%s/%d", id, e.Seq), bleveDoc{id, e.Seq, e.Type, d.Role, e.Time, d.Text}); err != nil {
			return err
		}
		if b.Size() >= 1000 {
			if err := idx.Batch(b); err != nil {
				return err
			}
			b.Reset()
		}
		return nil
	})
	if err == nil {
		err = idx.Batch(b)
	}
	if err != nil {
		return res, err
	}
	res.BuildPerSec = float64(res.Events) / time.Since(start).Seconds()
	if _, res.RawJSONBytes, err = rawOfDocs(ctx, st); err != nil {
		return res, err
	}
	if res.IndexBytes, err = dirBytes(dir); err != nil {
		return res, err
	}
	qs, err := choiceQueries(nq)
	if err != nil {
		return res, err
	}
	for kind, list := range qs {
		var lat []float64
		for _, s := range list {
			var q bq.Query
			switch kind {
			case "two words":
				mq := bleve.NewMatchQuery(s)
				mq.SetOperator(bq.MatchQueryOperatorAnd)
				q = mq
			case "phrase":
				q = bleve.NewMatchPhraseQuery(s)
			case "substring":
				q = bleve.NewWildcardQuery("*" + s + "*")
			}
			req := bleve.NewSearchRequestOptions(q, 50, 0, false)
			req.Highlight = bleve.NewHighlight()
			t0 := time.Now()
			if _, err := idx.SearchInContext(ctx, req); err != nil {
				return res, fmt.Errorf("%s %q: %w", kind, s, err)
			}
			lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		}
		res.Queries[kind] = pcts(lat)
	}
	return res, nil
}

func pcts(lat []float64) [2]float64 {
	slices.Sort(lat)
	at := func(p float64) float64 { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
	return [2]float64{at(0.50), at(0.99)}
}

func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		fi, err := os.Stat(p)
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

package search_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// BenchmarkS5Indexer is issue 46's "S5 with the indexer on": bench's
// agent-host workload (bench.AgentHost, S5 in bench/peers: S5_SESSIONS
// sessions of S5_TURNS turns, 16 x 20 by default) on the engine, run
// without and then with a search indexer following the store in the same
// process (Index.Run, a catch-up every S5_INDEX_EVERY, 100ms by default,
// Options.Fresh -1 so that none is skipped), b.N pairs of runs. It
// reports the events/s of each, their ratio (goal >= 0.9) and the index
// lag: for each turn-end Flush, the time from its return to the index's
// first commit that holds the turn's events (the session's next seq in
// the index's sessions table, written in the same transaction as the
// events' rows: from then on a search finds them), seen by an observer
// polling that table through a connection of its own every 5 ms (the
// lag's resolution). Goal: lag p99 <= 1 s.
func BenchmarkS5Indexer(b *testing.B) {
	sessions, turns := envInt("S5_SESSIONS", 16), envInt("S5_TURNS", 20)
	every := 100 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("S5_INDEX_EVERY")); err == nil && d > 0 {
		every = d
	}
	corpus, err := bench.LoadCorpus("")
	if err != nil {
		b.Fatal(err)
	}
	var off, on bench.Result
	var lags []time.Duration
	b.ResetTimer()
	for i := range b.N {
		// Each pair in the other order than the last: neither run
		// always goes first.
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, indexing := range order {
			r, host, err := runS5(b, corpus, sessions, turns, indexing, every)
			if err != nil {
				b.Fatal(err)
			}
			acc := &off
			if indexing {
				acc = &on
				lags = append(lags, host.lags...)
			}
			acc.Events += r.Events
			acc.Elapsed += r.Elapsed
		}
	}
	slices.Sort(lags)
	b.ReportMetric(off.EventsPerSec(), "events/s-off")
	b.ReportMetric(on.EventsPerSec(), "events/s-on")
	b.ReportMetric(on.EventsPerSec()/off.EventsPerSec(), "on/off")
	b.ReportMetric(ms(lags[len(lags)/2]), "lag-p50-ms")
	b.ReportMetric(ms(lags[min(len(lags)*99/100, len(lags)-1)]), "lag-p99-ms")
	b.ReportMetric(ms(lags[len(lags)-1]), "lag-max-ms")
}

// runS5 runs the agent-host workload once on a new engine store, with an
// indexer following it if indexing: its result and its host (the lag of
// each turn-end flush, in the order they were seen indexed). An error if
// the indexer failed or did not index every flushed turn within a minute
// after the run.
func runS5(tb testing.TB, corpus *bench.Corpus, sessions, turns int, indexing bool, every time.Duration) (bench.Result, *s5Host, error) {
	dir := filepath.Join(tb.TempDir(), "store")
	var host *s5Host
	cfg := bench.Config{Workload: bench.AgentHost, Dir: dir, Sessions: sessions, Turns: turns, Corpus: corpus,
		OpenHost: func(d string) (bench.HostStore, error) {
			if d != dir { // the warm-up's store, in a temporary directory
				st, err := bench.Local(nil)(d)
				return &s5Host{st: st}, err
			}
			var err error
			host, err = openS5Host(tb, dir, indexing, every)
			return host, err
		}}
	r, err := bench.Run(context.Background(), cfg)
	if err != nil {
		return r, host, err
	}
	if r.Events <= 0 || r.Elapsed <= 0 {
		return r, host, fmt.Errorf("%d events in %v", r.Events, r.Elapsed)
	}
	if indexing {
		if host.err != nil {
			return r, host, host.err
		}
		if len(host.lags) != sessions*turns {
			return r, host, fmt.Errorf("%d turn-end flushes seen indexed, want %d", len(host.lags), sessions*turns)
		}
	}
	return r, host, nil
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// s5Host is the engine as bench.AgentHost's store (as bench's own
// storeHost), with, when indexing, a search index of it kept by Run in
// the same process and an observer of the index's commits.
type s5Host struct {
	st  store.Store
	dir string // the store's; the index is in its search.DirName

	ix      *search.Index
	stop    context.CancelFunc
	wg      sync.WaitGroup
	obs     *sql.DB
	mu      sync.Mutex
	pending map[string][]flushMark // turn-end flushes not yet seen indexed, oldest first
	lags    []time.Duration
	err     error // Run's or the observer's, other than the stop
}

// flushMark is a turn-end Flush: the seq after the turn's last event,
// and when Flush returned.
type flushMark struct {
	next uint64
	at   time.Time
}

func openS5Host(tb testing.TB, dir string, indexing bool, every time.Duration) (*s5Host, error) {
	db, err := enginetest.OpenStore(tb, dir, nil)
	if err != nil {
		return nil, err
	}
	h := &s5Host{st: store.Wrap[*engine.Handle](db), dir: dir}
	if !indexing {
		return h, nil
	}
	ixDir := filepath.Join(dir, search.DirName)
	if h.ix, err = search.Open(h.st, ixDir, search.Options{Fresh: -1}); err != nil {
		db.Close()
		return nil, err
	}
	if h.obs, err = sql.Open("sqlite", "file:"+filepath.Join(ixDir, search.FileName)+"?_pragma=busy_timeout(10000)"); err != nil {
		h.ix.Close()
		db.Close()
		return nil, err
	}
	h.pending = map[string][]flushMark{}
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	h.wg.Go(func() {
		if err := h.ix.Run(ctx, every); err != nil && !errors.Is(err, context.Canceled) {
			h.fail(fmt.Errorf("Run: %w", err))
		}
	})
	h.wg.Go(func() { h.observe(ctx) })
	return h, nil
}

func (h *s5Host) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
}

// observe reads each session's next seq in the index every 5 ms, and
// records the lag of each turn-end flush the index now holds.
func (h *s5Host) observe(ctx context.Context) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.look(ctx); err != nil && ctx.Err() == nil {
			h.fail(fmt.Errorf("observer: %w", err))
			return
		}
	}
}

func (h *s5Host) look(ctx context.Context) error {
	rs, err := h.obs.QueryContext(ctx, `SELECT id, next FROM sessions`)
	if err != nil {
		return err
	}
	next := map[string]uint64{}
	for rs.Next() {
		var id string
		var n uint64
		if err := rs.Scan(&id, &n); err != nil {
			rs.Close()
			return err
		}
		next[id] = n
	}
	if err := rs.Close(); err != nil {
		return err
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, marks := range h.pending {
		k := 0
		for k < len(marks) && marks[k].next <= next[id] {
			h.lags = append(h.lags, max(now.Sub(marks[k].at), 0))
			k++
		}
		h.pending[id] = marks[k:]
	}
	return nil
}

// waitIndexed waits (up to a minute) until every flush was seen indexed.
func (h *s5Host) waitIndexed() error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		left, err := 0, h.err
		for _, m := range h.pending {
			left += len(m)
		}
		h.mu.Unlock()
		if err != nil || left == 0 {
			return err
		}
	}
	return errors.New("turn-end flushes not indexed a minute after the run")
}

func (h *s5Host) Create(ctx context.Context, i int) (bench.HostSession, error) {
	id := bench.AgentSessionID(i)
	s, err := h.st.Create(ctx, store.Header{ID: id, CreatedAt: 1_750_000_000_000, Cwd: "/work/seglog"})
	if err != nil {
		return nil, err
	}
	return &s5Session{Handle: s, h: h, id: id}, nil
}

// Written is what bench's storeHost reports: the sessions' frames.
func (h *s5Host) Written(ctx context.Context) (int64, error) {
	snaps, err := h.st.List(ctx)
	var n int64
	for _, s := range snaps {
		n += s.SizeBytes
	}
	return n, err
}

// Close waits for the index to hold every flushed turn (after the run's
// clock stopped), stops the indexer and closes the index and the store.
func (h *s5Host) Close() error {
	var err error
	if h.ix != nil {
		err = h.waitIndexed()
		h.stop()
		h.wg.Wait()
		h.fail(err)
		err = errors.Join(err, h.obs.Close(), h.ix.Close())
	}
	return errors.Join(err, h.st.Close())
}

// s5Session is a session's handle that marks its turn-end flushes.
type s5Session struct {
	store.Handle
	h    *s5Host
	id   string
	next uint64 // the seq after the last event handed over
}

func (s *s5Session) Enqueue(evs ...event.Event) error {
	s.note(evs)
	return s.Handle.Enqueue(evs...)
}

func (s *s5Session) Append(ctx context.Context, evs ...event.Event) error {
	s.note(evs)
	return s.Handle.Append(ctx, evs...)
}

func (s *s5Session) note(evs []event.Event) {
	if len(evs) > 0 {
		s.next = evs[len(evs)-1].Seq + 1
	}
}

func (s *s5Session) Flush(ctx context.Context) error {
	if err := s.Handle.Flush(ctx); err != nil {
		return err
	}
	if s.h.pending != nil {
		at := time.Now()
		s.h.mu.Lock()
		s.h.pending[s.id] = append(s.h.pending[s.id], flushMark{next: s.next, at: at})
		s.h.mu.Unlock()
	}
	return nil
}

// An indexer following a live agent host in the same process (Run, as
// BenchmarkS5Indexer runs it) sees every turn-end flush indexed, and its
// index then holds each event the index takes once: none missed, none
// twice, while the host wrote.
func TestRunFollowsAnAgentHost(t *testing.T) {
	const sessions, turns = 3, 4
	corpus, err := bench.LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	_, host, err := runS5(t, corpus, sessions, turns, true, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range host.lags {
		if l < 0 {
			t.Fatalf("lags %v", host.lags)
		}
	}
	want := map[string]bool{}
	for i := range sessions {
		var seq uint64
		for turn := range turns {
			evs := bench.AgentTurn(corpus, i, turn, seq)
			seq += uint64(len(evs))
			for _, e := range evs {
				if _, ok := search.DocOf(e, 0); ok {
					want[fmt.Sprintf("%s:%d", bench.AgentSessionID(i), e.Seq)] = true
				}
			}
		}
	}
	db, err := sql.Open("sqlite", filepath.Join(host.dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.Query(`SELECT s.id, d.seq FROM docs d JOIN sessions s ON s.sid = d.sid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	got := map[string]bool{}
	for rs.Next() {
		var id string
		var seq uint64
		if err := rs.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("%s:%d", id, seq)
		if got[k] {
			t.Errorf("%s indexed twice", k)
		}
		got[k] = true
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Errorf("indexed %d events, want %d", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s not indexed", k)
		}
	}
}

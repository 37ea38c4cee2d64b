package seglogprom_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	seglogprom "github.com/seglog/seglog/metrics/prometheus"
	"github.com/seglog/seglog/store"
)

// events returns n events from seq first, each with about size bytes of
// JSON data.
func events(first uint64, n, size int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		seq := first + uint64(i)
		text := strings.Repeat(fmt.Sprintf("event %d of the session; ", seq), size/24+1)[:size]
		data, _ := json.Marshal(map[string]any{"turn": seq, "text": text})
		evs[i] = event.Event{Seq: seq, Type: "assistant/message", Time: 1_700_000_000_000 + int64(seq), Data: data}
	}
	return evs
}

// scrape returns the text exposition a Prometheus server would read from
// the host's /metrics: metric (with its labels) -> value.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scraped line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestScrapeAfterAWorkload runs a workload on a real store (sessions
// appended in batches, flushed, read, one deleted and compacted away),
// scrapes the collector over HTTP as a Prometheus server would, and finds
// the counts the workload makes.
func TestScrapeAfterAWorkload(t *testing.T) {
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, t.TempDir(), &engine.Options{
		IndexInterval:   time.Hour, // the one checkpoint is Compact's
		CompactInterval: -1,
		NoDict:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := prometheus.NewPedanticRegistry() // checks every metric against its Describe
	reg.MustRegister(seglogprom.NewCollector(db))

	const sessions, batches, perBatch = 4, 5, 5 // N = 100 events
	hs := make([]*engine.Handle, sessions)
	for i := range hs {
		if hs[i], err = db.Create(ctx, store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var appendedBytes int
	for b := range batches {
		for i, h := range hs {
			size := 100
			if i == 0 {
				size = 4000 // s0 holds most of the bytes: deleted, its segment is rewritten
			}
			evs := events(uint64(b*perBatch), perBatch, size)
			for _, e := range evs {
				appendedBytes += len(e.Data)
			}
			if err := h.Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	flushes := 0
	for _, h := range hs { // M = 7 flushes
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	flushes++
	for _, h := range hs[2:] {
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	var readers []*engine.Handle
	for _, id := range []string{"s1", "s2"} {
		r, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Read(ctx, 0, -1); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	if err := hs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReclaimedBytes <= 0 {
		t.Fatalf("the compaction reclaimed nothing: %+v", rep)
	}

	got := scrape(t, reg)
	want := map[string]float64{
		"seglog_appends_total":                                 sessions * batches,
		"seglog_events_appended_total":                         sessions * batches * perBatch,
		"seglog_appended_bytes_total":                          float64(appendedBytes),
		"seglog_events_written_total":                          sessions * batches * perBatch,
		"seglog_flushes_total":                                 float64(flushes),
		"seglog_flush_errors_total":                            0,
		"seglog_window_flush_errors_total":                     0,
		"seglog_flush_seconds_count":                           float64(flushes),
		`seglog_flush_seconds_bucket{le="+Inf"}`:               float64(flushes),
		"seglog_writebehind_queue_events":                      0,
		"seglog_writebehind_failures_total":                    0,
		`seglog_frames_total{codec="zstd_dict"}`:               0,
		"seglog_index_checkpoints_total":                       1,
		"seglog_index_checkpoint_failures_total":               0,
		"seglog_index_checkpoint_lag_frames":                   0,
		"seglog_compactions_total":                             1,
		"seglog_compaction_failures_total":                     0,
		`seglog_compaction_segments_total{action="dropped"}`:   float64(len(rep.Dropped)),
		`seglog_compaction_segments_total{action="rewritten"}`: float64(len(rep.Rewritten)),
		"seglog_compaction_reclaimed_bytes_total":              float64(rep.ReclaimedBytes),
		`seglog_open_handles{access="read"}`:                   float64(len(readers)),
		`seglog_open_handles{access="write"}`:                  sessions - 1,
		"seglog_poisoned":                                      0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (scraped: %v), want %v", name, g, ok, v)
		}
	}
	// Window flushes run on a real clock here: how many ended during the
	// test depends on its speed, but the series is there.
	if _, ok := got["seglog_window_flushes_total"]; !ok {
		t.Error("seglog_window_flushes_total not scraped")
	}
	// One fsync for each of the first four flushes and one for the
	// Delete's tombstone: the DB.Flush and the last two flushes found
	// their events durable already.
	if f := got["seglog_fsyncs_total"]; f != sessions+1 {
		t.Errorf("seglog_fsyncs_total = %v, want %d", f, sessions+1)
	}
	// Every frame is counted under its codec: the headers, the small
	// frames and the tombstone uncompressed, s0's batches (20 KB each)
	// compressed (a flush's one frame S2, a batch of several zstd).
	if got[`seglog_frames_total{codec="none"}`] < sessions+1 || got[`seglog_frames_total{codec="zstd"}`]+got[`seglog_frames_total{codec="s2"}`] < batches {
		t.Errorf("frames by codec: none %v, zstd %v, s2 %v", got[`seglog_frames_total{codec="none"}`], got[`seglog_frames_total{codec="zstd"}`], got[`seglog_frames_total{codec="s2"}`])
	}
	for _, codec := range []string{"zstd", "s2"} {
		raw, stored := got[`seglog_frame_bytes_total{codec="`+codec+`",kind="raw"}`], got[`seglog_frame_bytes_total{codec="`+codec+`",kind="stored"}`]
		if stored < 0 || stored > raw || raw > 0 && stored == raw {
			t.Errorf("%s frame bytes: raw %v, stored %v", codec, raw, stored)
		}
	}
	if got[`seglog_frame_bytes_total{codec="zstd",kind="stored"}`]+got[`seglog_frame_bytes_total{codec="s2",kind="stored"}`] <= 0 {
		t.Error("no compressed frame bytes")
	}
	// The histogram's buckets are cumulative, in seconds.
	prev := 0.0
	for _, le := range []string{"5e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10", "+Inf"} {
		v, ok := got[`seglog_flush_seconds_bucket{le="`+le+`"}`]
		if !ok || v < prev {
			t.Errorf("bucket le=%s: %v (scraped: %v), below the one before (%v)", le, v, ok, prev)
		}
		prev = v
	}

	// The names and types follow Prometheus's conventions (promlint).
	problems, err := testutil.CollectAndLint(seglogprom.NewCollector(db))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// The poison shows as seglog_poisoned 1, with a constant label when the
// host gave one.
func TestPoisoned(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(seglogprom.NewCollector(source{engine.Metrics{Poisoned: true, PoisonError: "fsync: EIO"}},
		seglogprom.WithConstLabels(prometheus.Labels{"store": "a"})))
	got := scrape(t, reg)
	if v := got[`seglog_poisoned{store="a"}`]; v != 1 {
		t.Errorf(`seglog_poisoned{store="a"} = %v, want 1 (scraped: %v)`, v, got)
	}
}

type source struct{ m engine.Metrics }

func (s source) Metrics() engine.Metrics { return s.m }

package peers

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// S6 at a small size: every engine indexes (or lays out) every event of
// the store, and answers every kind of query.
func TestS6Small(t *testing.T) {
	rs, err := RunS6(context.Background(), S6Config{Sessions: 6, Turns: 2, Queries: 20, Scans: 20}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3", len(rs))
	}
	for _, r := range rs {
		if r.Events <= 0 || r.Docs <= 0 || r.Docs > r.Events || r.RawJSONBytes <= 0 {
			t.Errorf("%s: %+v", r.Engine, r)
		}
		if r.Docs != rs[0].Docs || r.RawJSONBytes != rs[0].RawJSONBytes {
			t.Errorf("%s indexed %d events (%d raw bytes), the search package %d (%d)", r.Engine, r.Docs, r.RawJSONBytes, rs[0].Docs, rs[0].RawJSONBytes)
		}
		for _, k := range []string{"two words", "phrase", "substring"} {
			if v, ok := r.Queries[k]; !ok || v[0] <= 0 || v[1] < v[0] {
				t.Errorf("%s %s: latency %v", r.Engine, k, v)
			}
		}
		// The phrases and substrings are cut from the corpus the
		// sessions were written from: some are found.
		if r.Hits["phrase"]+r.Hits["substring"] == 0 {
			t.Errorf("%s found nothing: %v", r.Engine, r.Hits)
		}
		if scan := r.Engine == rs[2].Engine; scan != (r.IndexBytes == 0 && r.BuildPerSec == 0) {
			t.Errorf("%s: build %.0f/s, %d index bytes", r.Engine, r.BuildPerSec, r.IndexBytes)
		}
	}
}

// BenchmarkS6 runs S6 once (S6Default; S6_SESSIONS and S6_TURNS resize
// it, S6_SESSIONS=10000 S6_TURNS=2 being the 1.2M events):
//
//	go test -run X -bench S6 -benchtime 1x ./bench/peers
func BenchmarkS6(b *testing.B) {
	c := S6Default
	if n, err := strconv.Atoi(os.Getenv("S6_SESSIONS")); err == nil && n > 0 {
		c.Sessions = n
	}
	if n, err := strconv.Atoi(os.Getenv("S6_TURNS")); err == nil && n > 0 {
		c.Turns = n
	}
	if c.Sessions >= S6Issue.Sessions {
		c.Queries, c.Scans = S6Issue.Queries, S6Issue.Scans
	}
	for i := range b.N {
		rs, err := RunS6(context.Background(), c, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			continue
		}
		for _, r := range rs {
			b.Logf("%s: %d events (%d indexed, %.1f MiB raw JSON), build %.0f events/s, index %.1f MiB (%.2fx raw); p50/p99 ms: two words %.2f/%.2f, phrase %.2f/%.2f, substring %.2f/%.2f; hits %v",
				r.Engine, r.Events, r.Docs, float64(r.RawJSONBytes)/(1<<20), r.BuildPerSec, float64(r.IndexBytes)/(1<<20), float64(r.IndexBytes)/float64(r.RawJSONBytes),
				r.Queries["two words"][0], r.Queries["two words"][1], r.Queries["phrase"][0], r.Queries["phrase"][1], r.Queries["substring"][0], r.Queries["substring"][1], r.Hits)
			if r.TrigramSeconds > 0 {
				b.Logf("%s: trigram table made on demand in %.1f s; index with it %.1f MiB (%.2fx raw)", r.Engine, r.TrigramSeconds,
					float64(r.IndexBytesTrigram)/(1<<20), float64(r.IndexBytesTrigram)/float64(r.RawJSONBytes))
			}
		}
		r := rs[0]
		b.ReportMetric(float64(r.Events), "events")
		b.ReportMetric(r.BuildPerSec, "build-events/s")
		b.ReportMetric(float64(r.IndexBytes)/float64(r.RawJSONBytes), "bytes/raw")
		b.ReportMetric(r.Queries["two words"][0], "two-p50-ms")
		b.ReportMetric(r.Queries["two words"][1], "two-p99-ms")
		b.ReportMetric(rs[1].BuildPerSec, "sqlite-build-events/s")
		b.ReportMetric(rs[1].Queries["two words"][0], "sqlite-two-p50-ms")
		b.ReportMetric(rs[2].Queries["two words"][0], "scan-two-p50-ms")
	}
}

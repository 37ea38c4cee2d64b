package peers

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkSearchChoice indexes the same agent-shaped events with both
// engines (SEARCH_CHOICE_SESSIONS×20 turns, ~25 events a turn) and reports
// build rate, bytes per raw JSON byte and query latencies. Run it once:
//
//	go test -run X -bench SearchChoice -benchtime 1x ./bench/peers
func BenchmarkSearchChoice(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	st, closeStore, err := ChoiceStore(ctx, filepath.Join(dir, "store"), 400, 20)
	if err != nil {
		b.Fatal(err)
	}
	defer closeStore()
	for _, eng := range []string{"fts5", "bleve"} {
		b.Run(eng, func(b *testing.B) {
			for i := range b.N {
				d := filepath.Join(dir, eng, fmt_(i))
				var r ChoiceResult
				var err error
				if eng == "fts5" {
					r, err = ChoiceFTS5(ctx, st, d, 100)
				} else {
					r, err = ChoiceBleve(ctx, st, d, 100)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(r.Events), "events")
				b.ReportMetric(r.BuildPerSec, "build-events/s")
				b.ReportMetric(float64(r.IndexBytes)/float64(r.RawJSONBytes), "bytes/raw")
				b.ReportMetric(float64(r.IndexBytes)/(1<<20), "index-MiB")
				for k, v := range r.Queries {
					name := map[string]string{"two words": "two", "phrase": "phrase", "substring": "substr"}[k]
					b.ReportMetric(v[0], name+"-p50-ms")
					b.ReportMetric(v[1], name+"-p99-ms")
				}
			}
		})
	}
}

func fmt_(i int) string { return string(rune('a' + i%26)) }

package jetstream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/testgen"
)

// BenchmarkFlush: 1 and 64 sessions on the package's embedded server
// (sync always), each op one 300-byte event appended and flushed by every
// session at once: events/s and the p50/p99 of one append+flush.
func BenchmarkFlush(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			ctx := context.Background()
			st, err := Open(ctx, connect(b, srvURL), freshOptions())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			hs := make([]*Handle, n)
			for i := range hs {
				if hs[i], err = st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			pool := testgen.Events(0, 256, 300)
			lat := make([][]time.Duration, n)
			b.ResetTimer()
			for b.Loop() {
				var wg sync.WaitGroup
				for i, h := range hs {
					wg.Go(func() {
						t0 := time.Now()
						e := pool[(int(h.Len())+i)%len(pool)]
						e.Seq = h.Len()
						if err := h.Append(ctx, e); err != nil {
							b.Error(err)
							return
						}
						if err := h.Flush(ctx); err != nil {
							b.Error(err)
							return
						}
						lat[i] = append(lat[i], time.Since(t0))
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "events/s")
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(st.commit.batches.Load()), "batches")
		})
	}
}

// BenchmarkFlushFree: 64 sessions on the package's embedded server, each
// appending and flushing one 300-byte event 62 times on its own (not in
// step with the others, as seglog bench's durable row): events/s, and
// the group commit's rounds per op (a round per flush of every session
// at best: 62).
func BenchmarkFlushFree(b *testing.B) {
	const n, per = 64, 62
	ctx := context.Background()
	st, err := Open(ctx, connect(b, srvURL), freshOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pool := testgen.Events(0, 256, 300)
	k := 0
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			h, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d-%d", k, i)))
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				defer h.Close()
				for seq := range uint64(per) {
					e := pool[(int(seq)+i)%len(pool)]
					e.Seq = seq
					if err := h.Append(ctx, e); err != nil {
						b.Error(err)
						return
					}
					if err := h.Flush(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		k++
	}
	b.ReportMetric(float64(n*per*b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(st.commit.rounds.Load())/float64(b.N), "rounds/op")
}

package jetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// BenchmarkReplay: sessions of 300-byte events written once, then per op
// read by a store instance that has not seen them (so each op builds the
// sessions' index from the stream) on the package's embedded server: an
// Open (read) and a Read of every event of each session. events/s, and
// the messages the connection sent per op (the requests).
//   - one session of 100,000 events, appended in batches of 1,000 without
//     a flush (messages of Options.FrameBytes);
//   - 200 sessions of 100 events, each flushed every 10 events (11
//     messages of a few events each, as an agent's turns leave them).
func BenchmarkReplay(b *testing.B) {
	for _, c := range []struct {
		name                  string
		sessions, events, per int
	}{
		{"sessions=1/events=100000", 1, 100_000, 1000},
		{"sessions=200/events=100", 200, 100, 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			nc := connect(b, srvURL)
			o := freshOptions()
			writeSessions(b, nc, o, c.sessions, c.events, c.per)
			ro := *o
			ro.Host, ro.Create = "", false
			var reqs uint64
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				st, err := Open(ctx, nc, &ro)
				if err != nil {
					b.Fatal(err)
				}
				out := nc.Stats().OutMsgs
				b.StartTimer()
				for i := range c.sessions {
					h, err := st.Open(ctx, fmt.Sprintf("s%d", i), store.Read)
					if err != nil {
						b.Fatal(err)
					}
					evs, err := h.Read(ctx, 0, -1)
					if err != nil {
						b.Fatal(err)
					}
					if len(evs) != c.events || evs[len(evs)-1].Seq != uint64(c.events-1) {
						b.Fatalf("read %d events, wrote %d", len(evs), c.events)
					}
					h.Close()
				}
				b.StopTimer()
				reqs += nc.Stats().OutMsgs - out
				st.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(c.sessions*c.events*b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(reqs)/float64(b.N), "requests/op")
		})
	}
}

// writeSessions writes sessions s0..s<n-1> of events 300-byte events each,
// appended per events at a time, with a Flush after each append if per is
// under 1,000 (16 sessions at a time), and closes the store.
func writeSessions(b *testing.B, nc *nats.Conn, o *Options, sessions, events, per int) {
	ctx := context.Background()
	st, err := Open(ctx, nc, o)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pool := testgen.Events(0, 4096, 300)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i)))
			if err != nil {
				b.Error(err)
				return
			}
			defer h.Close()
			for seq := 0; seq < events; seq += per {
				batch := pool[:0:0]
				for j := seq; j < min(seq+per, events); j++ {
					e := pool[j%len(pool)]
					e.Seq = uint64(j)
					batch = append(batch, e)
				}
				if err := h.Append(ctx, batch...); err != nil {
					b.Error(err)
					return
				}
				if per < 1000 {
					if err := h.Flush(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// BenchmarkBulk: per op, a session of 20,000 300-byte events appended in
// batches of 1,000 and flushed once, on the package's embedded server
// (sync always) and (unless -short) on the shared 3-node cluster with 3
// replicas: events/s.
func BenchmarkBulk(b *testing.B) {
	b.Run("server", func(b *testing.B) { benchBulk(b, srvURL, freshOptions()) })
	b.Run("cluster-R3", func(b *testing.B) {
		if testing.Short() {
			b.Skip("a 3-node cluster")
		}
		c, err := startClusterOnce()
		if err != nil {
			b.Fatal(err)
		}
		o := freshOptions()
		o.Replicas = 3
		benchBulk(b, c.URLs(), o)
	})
}

func benchBulk(b *testing.B, url string, o *Options) {
	const events = 20_000
	ctx := context.Background()
	st, err := Open(ctx, connect(b, url), o)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pool := testgen.Events(0, 4096, 300)
	n := 0
	b.ResetTimer()
	for b.Loop() {
		h, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("b%d", n)))
		n++
		if err != nil {
			b.Fatal(err)
		}
		for seq := 0; seq < events; seq += 1000 {
			batch := make([]event.Event, 0, 1000)
			for j := seq; j < seq+1000; j++ {
				e := pool[j%len(pool)]
				e.Seq = uint64(j)
				batch = append(batch, e)
			}
			if err := h.Append(ctx, batch...); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		h.Close()
	}
	b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
}

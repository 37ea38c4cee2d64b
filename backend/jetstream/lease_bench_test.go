package jetstream

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/engine/enginetest"
)

// BenchmarkRenewAll renews the leases of 1000 sessions held by one store,
// on the package's embedded server and on a 3-node cluster with 3
// replicas: session leases renewed per second, to hold against the TTL
// (each is renewed every third of it). Since one host lease carries every
// session lease of a store, a renewal is one key-value update however
// many sessions it holds (it was one update per session).
func BenchmarkRenewAll(b *testing.B) {
	run := func(b *testing.B, nc *nats.Conn, o *Options) {
		ctx := context.Background()
		st, err := Open(ctx, nc, o)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		const n = 1000
		for i := range n {
			if _, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i))); err != nil {
				b.Fatal(err)
			}
		}
		st.stopRenewing()
		b.ResetTimer()
		for b.Loop() {
			st.renewAll()
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "leases/s")
	}
	b.Run("server", func(b *testing.B) { run(b, connect(b, srvURL), freshOptions()) })
	b.Run("cluster-R3", func(b *testing.B) {
		c, err := startClusterOnce()
		if err != nil {
			b.Fatal(err)
		}
		nc := connect(b, c.URLs())
		o := freshOptions()
		o.Replicas = 3
		run(b, nc, o)
	})
}

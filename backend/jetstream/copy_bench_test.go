package jetstream

import (
	"context"
	"fmt"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// BenchmarkCopy: store.Copy of 16 sessions of 2,000 events of ~300 bytes
// (32,000 events) into an empty destination, from a local store into a
// stream on the embedded server, back, and local to local: events/s. The
// -again cases copy into a destination that holds them all already (the
// comparison of a run again: every event read from both).
func BenchmarkCopy(b *testing.B) {
	ctx := context.Background()
	const sessions, events = 16, 2000
	fill := func(s store.Store) {
		for i := range sessions {
			h, err := s.Create(ctx, enginetest.Meta(fmt.Sprintf("s%02d", i)))
			if err != nil {
				b.Fatal(err)
			}
			for off := 0; off < events; off += 500 {
				if err := h.Append(ctx, testgen.Events(uint64(off), 500, 300)...); err != nil {
					b.Fatal(err)
				}
			}
			if err := h.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	nc := connect(b, srvURL)
	local := func() store.Store {
		db, err := enginetest.OpenStore(b, b.TempDir(), &engine.Options{CompactInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return enginetest.Local(db)
	}
	stream := func() store.Store {
		st, err := Open(ctx, nc, freshOptions())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return store.Wrap[*Handle](st)
	}
	for _, c := range []struct {
		name     string
		src, dst func() store.Store
		again    bool
	}{
		{"local-to-local", local, local, false},
		{"local-to-jetstream", local, stream, false},
		{"jetstream-to-local", stream, local, false},
		{"local-to-jetstream-again", local, stream, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			src := c.src()
			fill(src)
			var dst store.Store
			if c.again {
				dst = c.dst()
				if _, err := store.Copy(ctx, dst, src, store.CopyOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				to := dst
				if !c.again {
					to = c.dst()
				}
				res, err := store.Copy(ctx, to, src, store.CopyOptions{})
				if err != nil || len(res) != sessions {
					b.Fatal(res, err)
				}
			}
			b.ReportMetric(float64(b.N*sessions*events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/vfs"
)

// TestForkOutlivesItsParent: a fork keeps its inherited events when the
// parent is deleted and compacted away, across a crash that keeps only
// what was synced.
func TestForkOutlivesItsParent(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := &engine.Options{FS: mem, SegmentSize: 64 << 10}
	db, err := engine.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.Create(ctx, enginetest.Meta("p"))
	if err != nil {
		t.Fatal(err)
	}
	var parent []event.Event
	for seq := range uint64(3000) {
		e := event.Event{Seq: seq, Type: "user/message", Time: 1000 + int64(seq), Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"%0200d"}`, seq, seq))}
		parent = append(parent, e)
	}
	if err := p.Append(ctx, parent...); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := db.Fork(ctx, "p", 2500, enginetest.Meta("c"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // durable without a flush: Fork synced it
	p.Close()
	if err := db.Delete(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReclaimedBytes == 0 {
		t.Fatalf("compaction reclaimed nothing of the deleted parent: %+v", rep)
	}
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db.Close()
	db, err = engine.Open("/db", &engine.Options{FS: crashed, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Open(ctx, "c", engine.Write)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2501 || !engine.IsInheritedMarker(&got[2500]) {
		t.Fatalf("fork after its parent went: %d events", len(got))
	}
	if diff := cmp.Diff(parent[:2500], got[:2500]); diff != "" {
		t.Errorf("inherited events differ (-parent +fork):\n%s", diff)
	}
	if _, err := db.Stat(ctx, "p"); !errors.Is(err, engine.ErrSessionNotFound) {
		t.Errorf("Stat of the deleted parent = %v", err)
	}
}

// BenchmarkFork forks a 100k-event session at its end: time and bytes
// the fork adds to the store.
func BenchmarkFork(b *testing.B) {
	ctx := context.Background()
	db, err := engine.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	p, err := db.Create(ctx, enginetest.Meta("p"))
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	evs := make([]event.Event, 0, 1000)
	for seq := uint64(0); seq < n; seq++ {
		evs = append(evs, event.Event{Seq: seq, Type: "user/message", Time: 1000 + int64(seq), Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"text":"event %d of a long agent session"}`, seq/20, seq))})
		if len(evs) == cap(evs) {
			if err := p.Append(ctx, evs...); err != nil {
				b.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	var disk int64
	b.ResetTimer()
	for i := range b.N {
		c, err := db.Fork(ctx, "p", n, enginetest.Meta(fmt.Sprintf("c%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st, err := db.Stat(ctx, c.ID())
		if err != nil {
			b.Fatal(err)
		}
		disk += st.SizeBytes
		c.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(disk)/float64(b.N), "disk-B/fork")
}

// TestSeedMarkerRules: a seeded session may carry markers before its cut
// (inherited from its parent), never after it; an unseeded one none.
func TestSeedMarkerRules(t *testing.T) {
	ctx := context.Background()
	marker := func(seq uint64) event.Event {
		return event.Event{Seq: seq, Type: "session/end-seed", Time: 1000, Data: json.RawMessage(`{"inherited":true}`)}
	}
	turn := func(seq uint64) event.Event {
		return event.Event{Seq: seq, Type: "turn/start", Time: 1000, Data: json.RawMessage(`{"turn":0}`)}
	}
	for _, c := range []struct {
		name      string
		seeded    bool
		inherited uint64
		log       []event.Event
		ok        bool
	}{
		{"marker at the cut", true, 1, []event.Event{turn(0), marker(1), turn(2)}, true},
		{"inherited marker before the cut", true, 3, []event.Event{turn(0), marker(1), turn(2), marker(3)}, true},
		{"marker after the cut", true, 1, []event.Event{turn(0), marker(1), marker(2)}, false},
		{"no marker at the cut", true, 1, []event.Event{turn(0), turn(1)}, false},
		{"unseeded with a marker", false, 0, []event.Event{turn(0), marker(1)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := engine.Open("/db", &engine.Options{FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			hdr := enginetest.Meta("s")
			hdr.IsSeeded = c.seeded
			h, err := db.Create(ctx, hdr, engine.Inherited(c.inherited))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Append(ctx, c.log...); err != nil {
				t.Fatal(err)
			}
			h.Close()
			r, err := db.Open(ctx, "s", engine.Read)
			if err != nil {
				t.Fatal(err)
			}
			_, rerr := r.Read(ctx, 0, -1)
			_, werr := db.Open(ctx, "s", engine.Write)
			for what, err := range map[string]error{"read": rerr, "write open": werr} {
				if c.ok && err != nil || !c.ok && !errors.Is(err, engine.ErrSeed) {
					t.Errorf("%s: %v (want ok: %v)", what, err, c.ok)
				}
			}
		})
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestSyncFailsAtTheSealOfARoll: a placement that fills the active
// segment rolls it: it writes the seal and fdatasyncs the segment (and,
// when the segment was preallocated, trims its zeros and fdatasyncs
// again) before it goes on in the next one. An fdatasync that fails there
// poisons the store: the flush fails, and so does every later write and
// flush, without another fdatasync (never retried: the kernel may have
// dropped the pages it could not write). A power cut then keeps every
// event flushed before, and what a reopen reads of the rest is what was
// appended.
func TestSyncFailsAtTheSealOfARoll(t *testing.T) {
	for _, c := range []struct {
		name string
		nth  int // the failing fdatasync of segment 1, counted from the rolling flush
		opts func(fs vfs.FS) *Options
	}{
		{"seal", 1, func(fs vfs.FS) *Options {
			return &Options{FS: fs, SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true, Uncompressed: true, CompactInterval: -1}
		}},
		{"trim of a preallocated segment", 2, func(fs vfs.FS) *Options {
			// (preallocated whole at creation: no growth syncs it meanwhile)
			return &Options{FS: fs, SegmentSize: 8 << 10, PreallocateStart: 8 << 10, FrameBytes: 1 << 10, Uncompressed: true, CompactInterval: -1}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			db, err := openStore(t, "/db", c.opts(ff))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			acked := testgen.Events(0, 6, 300)
			appendFlushed(t, h, acked...)
			if seg, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); seg != 1 {
				t.Fatalf("the first flush went to segment %d", seg)
			}
			ff.Add(vfs.Rule{Op: vfs.OpSync, Nth: c.nth, Name: "/db/" + segment.Name(1)})
			rest := testgen.Events(6, 40, 300) // (12 KB, uncompressed: past the end of segment 1)
			appended := append(acked[:len(acked):len(acked)], rest...)
			err = h.Append(ctx, rest...)
			if err == nil {
				err = h.Flush(ctx)
			}
			if !errors.Is(err, segment.ErrSyncFailed) {
				t.Fatalf("the flush whose placement rolled, the fdatasync of the seal failing: %v, want ErrSyncFailed", err)
			}
			tail, placing := db.shared.Word(coord.Tail).Load(), db.shared.Word(coord.Placing).Load()
			if seg, _ := coord.SplitPosition(tail); seg != 1 || placing <= tail {
				t.Fatalf("the tail at %x, the placement in progress ending at %x: want a roll of segment 1 cut short after its seal", tail, placing)
			}
			if d := db.shared.Word(coord.Durable).Load(); d > tail {
				t.Errorf("durable (%x) past the tail (%x) of the failed roll", d, tail)
			}
			syncs := ff.Count(vfs.OpSync)
			for i := range 3 {
				if err := h.Flush(ctx); err == nil {
					t.Fatalf("flush %d after the failed fdatasync succeeded", i+1)
				}
				if err := db.Flush(ctx); err == nil {
					t.Fatalf("DB.Flush %d after the failed fdatasync succeeded", i+1)
				}
			}
			if err := h.Append(ctx, testgen.Events(46, 1, 300)...); err == nil {
				if err := h.Flush(ctx); err == nil {
					t.Fatal("an append and flush after the failed fdatasync succeeded")
				}
			}
			if o, err := db.Create(ctx, store.Header{ID: "o", CreatedAt: 1}); err == nil {
				if err := o.Flush(ctx); err == nil {
					t.Error("a session created after the failed fdatasync was flushed")
				}
				o.Close()
			}
			if got := ff.Count(vfs.OpSync); got != syncs {
				t.Errorf("%d fdatasyncs after the failed one: never retry", got-syncs)
			}

			for v, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(7, 1)), Garble: true}, {Rand: rand.New(rand.NewPCG(8, 1))}} {
				label := fmt.Sprintf("power cut %d", v)
				got := reopenEvents(t, label, mem.CrashClone(cfg), c.opts, "s")
				if len(got) < len(acked) || len(got) > len(appended) {
					t.Fatalf("%s: %d events, want the %d flushed and at most the %d appended", label, len(got), len(acked), len(appended))
				}
				sameEvents(t, label, got, appended[:len(got)])
				if _, err := reopenStat(t, mem.CrashClone(cfg), c.opts, "o"); err == nil {
					t.Errorf("%s: the session created after the failure is there", label)
				}
			}
		})
	}
}

// reopenEvents opens the store /db on fs, reads session id whole and
// closes it; an open or read that fails fails the test.
func reopenEvents(t *testing.T, label string, fs vfs.FS, opts func(vfs.FS) *Options, id string) []event.Event {
	t.Helper()
	ctx := context.Background()
	db, err := openStore(t, "/db", opts(fs))
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer db.Close()
	r, err := db.Open(ctx, id, store.Read)
	if err != nil {
		t.Fatalf("%s: %s: %v", label, id, err)
	}
	defer r.Close()
	got, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatalf("%s: read %s: %v", label, id, err)
	}
	return got
}

// reopenStat opens the store /db on fs and stats session id.
func reopenStat(t *testing.T, fs vfs.FS, opts func(vfs.FS) *Options, id string) (store.Snapshot, error) {
	db, err := openStore(t, "/db", opts(fs))
	if err != nil {
		return store.Snapshot{}, err
	}
	defer db.Close()
	return db.Stat(context.Background(), id)
}

package engine_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// ReadRange never overflows: any offset and limit a caller can pass give a
// window inside the log (item 5 of issue 15).
func TestReadRangeExtremes(t *testing.T) {
	for _, c := range []struct {
		n             uint64
		offset, limit int
		lo, hi        uint64
	}{
		{10, 0, -1, 0, 10},
		{10, 1, math.MaxInt, 1, 10},
		{10, math.MaxInt, math.MaxInt, math.MaxInt, 10},
		{10, math.MaxInt, 1, math.MaxInt, 10},
		{10, math.MaxInt - 1, 1, math.MaxInt - 1, 10},
		{10, 3, 4, 3, 7},
		{10, 3, 0, 3, 3},
		{math.MaxUint64, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt + math.MaxInt},
		{math.MaxUint64, 5, -1, 5, math.MaxUint64},
	} {
		lo, hi := store.ReadRange(c.n, c.offset, c.limit)
		if lo != c.lo || hi != c.hi {
			t.Errorf("ReadRange(%d, %d, %d) = %d, %d; want %d, %d", c.n, c.offset, c.limit, lo, hi, c.lo, c.hi)
		}
	}
}

// Read with huge offsets and limits, on a session stored in the current
// format and on one stored in v2 (read migrated in memory), gives the
// window clipped to the log and never panics (item 5 of issue 15:
// Read(1, math.MaxInt) on a v2 session overflowed offset+limit).
func TestReadHugeOffsetsAndLimits(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, engine.CheckedDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	createV2(t, db, "v2", v2Events(2))
	h, err := db.Create(ctx, store.Header{ID: "v3", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(0, 9, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"v2", "v3"} {
		all := engine.ReadAll(t, db, id)
		n := len(all)
		r, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		offsets := []int{0, 1, n - 1, n, n + 1, math.MaxInt / 2, math.MaxInt - 1, math.MaxInt}
		limits := []int{-1, 0, 1, n, math.MaxInt / 2, math.MaxInt - 1, math.MaxInt}
		for _, off := range offsets {
			for _, lim := range limits {
				label := fmt.Sprintf("%s: Read(%d, %d)", id, off, lim)
				got, err := r.Read(ctx, off, lim)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				var want = all[:0]
				if off < n {
					end := n
					if lim >= 0 && lim < n-off {
						end = off + lim
					}
					want = all[off:end]
				}
				engine.SameEvents(t, label, got, want)
			}
		}
		r.Close()
	}
}

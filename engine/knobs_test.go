package engine

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seglog/seglog/engine/internal/dict"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestKnobsPerDB: two DBs in one test binary, each with its own hooks
// (one set in Options for the open, one on the open DB) and its own
// tuning, written at once: each hook counts only its own DB's work, each
// DB keeps its own tuning, and a change to the Options after Open reaches
// no DB (Open copied them).
func TestKnobsPerDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type run struct {
		db               *DB
		listed, appended atomic.Int64
	}
	var runs [2]*run
	for i := range runs {
		r := &run{}
		opts := &Options{CompactInterval: -1}
		opts.testing.listed = func() { r.listed.Add(1) }
		if i == 1 {
			opts = dictOpts(opts)
		}
		db, err := openStore(t, checkedDir(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		opts.testing.appended = func() { t.Errorf("a hook set in the Options after Open ran in DB %d", i) }
		db.knobs.appended = func() { r.appended.Add(1) }
		r.db = db
		runs[i] = r
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			h, err := r.db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Error(err)
				return
			}
			defer h.Close()
			for k := range 3 * (i + 1) {
				if err := h.Append(ctx, testgen.Event(uint64(k), 100)); err != nil {
					t.Error(err)
					return
				}
				if err := h.Flush(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	a, b := runs[0], runs[1]
	if a.listed.Load() != 1 || b.listed.Load() != 1 {
		t.Errorf("the open's hook ran %d and %d times, want once in each DB", a.listed.Load(), b.listed.Load())
	}
	if a.appended.Load() < 3 || b.appended.Load()-a.appended.Load() != 3 {
		t.Errorf("appends hooked: %d in DB 0 (3 flushes), %d in DB 1 (6 flushes); want each DB's own", a.appended.Load(), b.appended.Load())
	}
	if a.db.dict.Tuning() != dict.DefaultTuning() || b.db.dict.Tuning().TrainAfter != math.MaxInt {
		t.Errorf("dictionary tuning %+v and %+v: want the default and dictKnobs'", a.db.dict.Tuning(), b.db.dict.Tuning())
	}
}

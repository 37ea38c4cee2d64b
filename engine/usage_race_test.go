package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// hookFS runs hook (once, when armed) the first time the size of a file
// opened read-only under the name target is asked for: a reader's Remap.
type hookFS struct {
	vfs.FS
	target string
	mu     sync.Mutex
	hook   func()
}

func (h *hookFS) Open(name string) (vfs.File, error) {
	f, err := h.FS.Open(name)
	if err != nil || name != h.target {
		return f, err
	}
	return &hookFile{File: f, fs: h}, nil
}

func (h *hookFS) arm(hook func()) {
	h.mu.Lock()
	h.hook = hook
	h.mu.Unlock()
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (f *hookFile) Size() (int64, error) {
	f.fs.mu.Lock()
	hook := f.fs.hook
	f.fs.hook = nil
	f.fs.mu.Unlock()
	if hook != nil {
		hook()
	}
	return f.File.Size()
}

// TestUsageWhileTheActiveSegmentRolls: Usage reads the active segment up
// to the durable position it took at its start, so it must not read the
// segments after it: a roll may fill the next one (prepared ahead, listed)
// while Usage reads, with frames that continue the ones the durable
// position cut off. Here the roll comes as Usage starts reading segment 1
// (it has checked that segment 1 is still the active one): session s has
// events 0..6 before the durable position, 7..13 after it in segment 1 and
// 14..20 in segment 2. Usage reported "frame starts at seq 14, expected 7"
// at segment 2 (TestCompactStressWithIndex, about 1 run in 35: its
// segments are not prepared ahead, but a roll creates the next one before
// it publishes the durable position there, and Usage listed it meanwhile).
func TestUsageWhileTheActiveSegmentRolls(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	fsys := &hookFS{FS: vfs.Default}
	opts := &Options{FS: fsys, NoPreallocate: true, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fsys.target = db.segPath(1)
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	next := uint64(0)
	write := func(n int) {
		t.Helper()
		evs := make([]event.Event, n)
		for i := range evs {
			evs[i] = testgen.Event(next+uint64(i), 200)
		}
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		next += uint64(n)
	}
	write(7)
	if seg, _ := coord.SplitPosition(db.durablePos()); seg != 1 {
		t.Fatalf("events 0..6 in segment %d, want 1", seg)
	}
	// The next segment, prepared ahead of the roll (as the preparer does
	// once the active one is half full): Usage lists it.
	if err := db.log.PrepareNext(); err != nil {
		t.Fatal(err)
	}
	// The follower reads up to the durable position now: Usage's catch-up
	// reads nothing, and the first Remap of segment 1 is Usage's own.
	if _, err := db.Stat(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	fsys.arm(func() {
		write(7) // 7..13 in segment 1, after Usage's durable position
		if hookErr = db.log.RollNow(); hookErr != nil {
			return
		}
		write(7) // 14..20 in segment 2
	})
	us, err := db.Usage(ctx)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if next != 21 {
		t.Fatalf("the roll did not come during Usage (%d events written)", next)
	}
	if err != nil {
		t.Fatalf("Usage while the active segment rolled: %v", err)
	}
	if len(us) == 0 || us[0].ID != 1 || us[0].LiveBytes == 0 {
		t.Fatalf("Usage: %+v, want segment 1 with live bytes first", us)
	}
	// And once the roll is over, Usage reads both segments whole.
	us, err = db.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 2 || us[1].ID != 2 || us[1].LiveBytes == 0 {
		t.Fatalf("Usage after the roll: %+v, want segments 1 and 2, both with live bytes", us)
	}
}

package engine

import (
	"context"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// mapHookFS is the OS file system, calling onMap(path) after each Map of a
// file it opened.
type mapHookFS struct {
	vfs.FS
	onMap func(path string)
}

func (f mapHookFS) Open(name string) (vfs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return mapHookFile{File: file, path: name, onMap: f.onMap}, nil
}

type mapHookFile struct {
	vfs.File
	path  string
	onMap func(path string)
}

func (f mapHookFile) Map(size int64) (*vfs.Mapping, error) {
	m, err := f.File.Map(size)
	if err == nil {
		f.onMap(f.path)
	}
	return m, err
}

// TestJoinWhileTheActiveSegmentIsSealed: a process opens the store while a
// writing process seals the active segment, a segment ahead of it prepared.
// The seal trims the preallocated zeros of the segment, which the opener has
// mapped: touching the mapping past the file's new end faults (SIGBUS). The
// `seglog` CLI (ls, stats, compact) died so beside a host with a small
// SegmentSize (the compaction's roll had left a 64 MiB active segment). An
// open beside writers reads no further than their durable position, so it
// leaves the segments after it alone.
func TestJoinWhileTheActiveSegmentIsSealed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir() // checked at the end: an open that faulted holds the store's init lock
	w := liveOpen(t, dir, &Options{SegmentSize: 1 << 20, CompactInterval: -1})
	h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var want []event.Event
	var active uint64
	// Each open finds frames in the active segment, and a segment prepared
	// after it.
	ready := func() {
		t.Helper()
		evs := testgen.Events(uint64(len(want)), 3, 100)
		appendFlushed(t, h, evs...)
		want = append(want, evs...)
		active, _ = coord.SplitPosition(w.shared.Word(coord.Tail).Load())
		if err := w.log.Prepare(active+1, true); err != nil {
			t.Fatal(err)
		}
	}

	// The writer seals the active segment as soon as the opener has mapped it.
	var once sync.Once
	rolled := false
	fsys := mapHookFS{FS: vfs.Default, onMap: func(path string) {
		if path != w.segPath(active) {
			return
		}
		once.Do(func() {
			if err := w.log.RollNow(); err != nil {
				t.Errorf("roll: %v", err)
			}
			rolled = true
		})
	}}
	open := func(opts *Options) (db *DB, err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the open beside the writer touched the sealed segment past its end (SIGBUS): %v", r)
			}
		}()
		return openStore(t, dir, opts)
	}
	for _, opts := range []*Options{
		{FS: fsys, IndexPath: dir + "/index.db", CompactInterval: -1},
		{FS: fsys, IndexPath: dir + "/index.db", ReadOnly: true},
	} {
		ready()
		once, rolled = sync.Once{}, false
		db, err := open(opts)
		if err != nil {
			t.Fatalf("open (read-only %v) beside the writer: %v", opts.ReadOnly, err)
		}
		if !rolled {
			t.Fatalf("open (read-only %v): the writer did not seal the segment during it", opts.ReadOnly)
		}
		r, err := db.Open(ctx, "a", store.Read)
		if err != nil {
			t.Fatal(err)
		}
		readsAll(t, "the writer's session", r, want)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	appendFlushed(t, h, testgen.Events(uint64(len(want)), 2, 100)...)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Errorf("the store the test left: %v", p)
	}
}

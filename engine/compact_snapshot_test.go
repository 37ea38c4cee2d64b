package engine_test

// The cut-reopen-compact-reopen sweeps with the persistent index: bbolt
// needs real files, so the store lives in engine.CheckedDir(t) and a wrapper FS
// copies the whole directory (segments and index.db) before and after
// every segment-file operation of the run under test. Each copy is a
// state a power cut could leave if the page cache reached the disk: the
// "keep everything" variant of the in-memory sweeps, with the index as it
// was at that moment (index commits run in the goroutine doing the
// operations, so no copy catches one half done; IndexInterval is long so
// that the background checkpoint does not run).

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// snapFS copies dir into a new directory under base at each operation
// while on is set (identical states once).
type snapFS struct {
	vfs.FS
	dir, base string
	on        atomic.Bool
	writes    bool // also at every WriteAt

	mu    sync.Mutex
	seen  map[[32]byte]bool
	snaps []string
	err   error
}

func newSnapFS(dir, base string) *snapFS {
	return &snapFS{FS: vfs.Default, dir: dir, base: base, seen: map[[32]byte]bool{}}
}

func (f *snapFS) snap() {
	if !f.on.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	names, err := os.ReadDir(f.dir)
	if err != nil {
		f.err = err
		return
	}
	h := sha256.New()
	files := map[string][]byte{}
	for _, e := range names {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.dir, e.Name()))
		if err != nil {
			f.err = err
			return
		}
		files[e.Name()] = b
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if f.seen[sum] {
		return
	}
	f.seen[sum] = true
	to := filepath.Join(f.base, fmt.Sprintf("%04d", len(f.snaps)))
	if err := os.MkdirAll(to, 0o755); err != nil {
		f.err = err
		return
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(to, name), b, 0o644); err != nil {
			f.err = err
			return
		}
	}
	f.snaps = append(f.snaps, to)
}

func (f *snapFS) around(op func() error) error {
	f.snap()
	err := op()
	f.snap()
	return err
}

func (f *snapFS) Remove(name string) error {
	return f.around(func() error { return f.FS.Remove(name) })
}
func (f *snapFS) SyncDir(dir string) error {
	return f.around(func() error { return f.FS.SyncDir(dir) })
}
func (f *snapFS) Rename(a, b string) error {
	return f.around(func() error { return f.FS.Rename(a, b) })
}

func (f *snapFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &snapFile{File: file, fs: f}, nil
}

func (f *snapFS) OpenReadWrite(name string) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &snapFile{File: file, fs: f}, nil
}

type snapFile struct {
	vfs.File
	fs *snapFS
}

func (f *snapFile) Sync() error { return f.fs.around(f.File.Sync) }

func (f *snapFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.writes {
		f.fs.snap()
	}
	return f.File.WriteAt(p, off)
}

func indexOpts(dir string, fsys vfs.FS) *engine.Options {
	return &engine.Options{FS: fsys, IndexPath: filepath.Join(dir, "index.db"), SegmentSize: 16 << 10, FrameBytes: 1 << 10,
		NoPreallocate: true, CompactInterval: -1, IndexInterval: time.Hour}
}

// reopenCompactReopenOS is reopenCompactReopen on a snapshot directory,
// with the index.
func reopenCompactReopenOS(t *testing.T, label, dir string, check func(label string, db *engine.DB)) {
	t.Helper()
	ctx := context.Background()
	opts := indexOpts(dir, nil)
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	check(label+": reopened", db)
	if rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		db.Close()
		t.Fatalf("%s: compact after the reopen: %+v, %v", label, rep, err)
	}
	check(label+": compacted", db)
	if err := db.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	if db, err = engine.OpenStore(t, dir, opts); err != nil {
		t.Fatalf("%s: reopen after the compaction: %v", label, err)
	}
	check(label+": compacted and reopened", db)
	db.Close()
	if rep, err := engine.Check(dir, opts); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("%s: check: %+v, %v", label, rep, err)
	}
}

// TestCompactAfterCutCompactionWithIndex: a compaction that drops and
// rewrites segments, with the index, stopped at every operation (rewrite
// intent recorded or not, rename landed or not, index relocated or not),
// then reopen, compact, reopen.
func TestCompactAfterCutCompactionWithIndex(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	sfs := newSnapFS(dir, engine.CheckedDir(t))
	db, err := engine.OpenStore(t, dir, indexOpts(dir, sfs))
	if err != nil {
		t.Fatal(err)
	}
	createV2(t, db, "m", v2Events(3))
	g, err := db.Create(ctx, store.Header{ID: "gone", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < 120; seq += 10 { // segments of its own
		if err := g.Append(ctx, testgen.Events(seq, 10, 300)...); err != nil {
			t.Fatal(err)
		}
	}
	g.Close()
	if err := db.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	want := interleaved(t, db, 6, 5, 2) // s000, s002, s004 live
	if _, err := db.Migrate(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	want["m"] = engine.ReadAll(t, db, "m")
	h, err := db.Create(ctx, store.Header{ID: "s001", CreatedAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	want["s001"] = testgen.Events(0, 12, 200)
	h.Append(ctx, want["s001"]...)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	sfs.on.Store(true)
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.95})
	sfs.on.Store(false)
	if err != nil || len(rep.Rewritten) == 0 || len(rep.Dropped) == 0 {
		t.Fatalf("compact: %+v, %v; the sweep needs rewrites and drops", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if sfs.err != nil {
		t.Fatal(sfs.err)
	}
	check := func(label string, db *engine.DB) { expectSessions(t, label, db, want) }
	for i, snap := range sfs.snaps {
		reopenCompactReopenOS(t, fmt.Sprintf("state %d", i), snap, check)
	}
	t.Logf("checked %d states of a compaction rewriting %d and dropping %d segments", len(sfs.snaps), len(rep.Rewritten), len(rep.Dropped))
}

// TestCompactAfterCutMigrationWithIndex: a migration (spanning a segment
// roll) with another session appending around it, with the index,
// stopped at every write and sync, then reopen, compact, reopen.
func TestCompactAfterCutMigrationWithIndex(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	sfs := newSnapFS(dir, engine.CheckedDir(t))
	sfs.writes = true
	want := migrationStore(t, dir, indexOpts(dir, nil))
	wantM, err := recovery.MigrateV2("m", v2Events(migrationTurns))
	if err != nil {
		t.Fatal(err)
	}
	db, err := engine.OpenStore(t, dir, indexOpts(dir, sfs))
	if err != nil {
		t.Fatal(err)
	}
	side := testgen.Events(0, 10, 300)
	sh, err := db.Create(ctx, store.Header{ID: "side", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	sfs.on.Store(true)
	if err := sh.Append(ctx, side[:5]...); err != nil {
		t.Fatal(err)
	}
	if err := sh.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ackedAt := len(sfs.snaps) // states from here on hold side's first 5
	if _, err := db.Migrate(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	migratedAt := len(sfs.snaps) // states from here on hold the migration
	if err := sh.Append(ctx, side[5:]...); err != nil {
		t.Fatal(err)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	sfs.on.Store(false)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if sfs.err != nil {
		t.Fatal(sfs.err)
	}
	outcomes := map[store.FormatStatus]int{}
	for i, snap := range sfs.snaps {
		var status store.FormatStatus
		sideLen := -2
		check := func(label string, db *engine.DB) {
			t.Helper()
			snap, err := db.Stat(ctx, "m")
			if err != nil {
				t.Fatalf("%s: stat m: %v", label, err)
			}
			if sideLen == -2 {
				status = snap.FormatStatus
				outcomes[status]++
				if i >= migratedAt && status != store.FormatCurrent {
					t.Fatalf("%s: Migrate returned but m reopened unmigrated", label)
				}
			} else if snap.FormatStatus != status {
				t.Fatalf("%s: m is %v, was %v", label, snap.FormatStatus, status)
			}
			engine.SameEvents(t, label+" m", engine.ReadAll(t, db, "m"), wantM)
			got := -1
			if _, err := db.Stat(ctx, "side"); err == nil {
				evs := engine.ReadAll(t, db, "side")
				engine.SameEvents(t, label+" side", evs, side[:len(evs)])
				got = len(evs)
			}
			if (i >= ackedAt && got < 5) || (sideLen != -2 && got != sideLen) {
				t.Fatalf("%s: side has %d events (%d at the first reopen)", label, got, sideLen)
			}
			sideLen = got
			for id, evs := range want {
				engine.SameEvents(t, label+" "+id, engine.ReadAll(t, db, id), evs)
			}
			list, err := db.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(want) + 1 + map[bool]int{true: 1}[got >= 0]; len(list) != n {
				t.Fatalf("%s: %d sessions, want %d", label, len(list), n)
			}
		}
		reopenCompactReopenOS(t, fmt.Sprintf("state %d", i), snap, check)
	}
	t.Logf("checked %d states: %v", len(sfs.snaps), outcomes)
	if outcomes[store.FormatCurrent] == 0 || outcomes[store.FormatMigrationRequired] == 0 {
		t.Errorf("the sweep never saw one of the outcomes: %v", outcomes)
	}
}

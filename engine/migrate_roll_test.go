package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// pathFaultFS fails one operation (a write or a sync), once armed, of
// the file at exactly path: a segment, not its temporary file.
type pathFaultFS struct {
	vfs.FS
	path  string
	op    vfs.Op
	armed atomic.Bool
	fired atomic.Bool
}

func (p *pathFaultFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := p.FS.OpenReadWrite(name)
	if err != nil {
		return f, err
	}
	return &pathFaultFile{File: f, fs: p, name: name}, nil
}

type pathFaultFile struct {
	vfs.File
	fs   *pathFaultFS
	name string
}

func (f *pathFaultFile) fail(op vfs.Op) error {
	if f.name == f.fs.path && f.fs.op == op && f.fs.armed.CompareAndSwap(true, false) {
		f.fs.fired.Store(true)
		return fmt.Errorf("%s %s: %w", op, f.name, vfs.ErrInjected)
	}
	return nil
}

func (f *pathFaultFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.fail(vfs.OpWrite); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f *pathFaultFile) Sync() error {
	if err := f.fail(vfs.OpSync); err != nil {
		return err
	}
	return f.File.Sync()
}

// TestMigrationCutAcrossARoll: a migration's group (its header, then the
// session's events in frames) is larger than a segment, so it starts in
// segment k, whose roll seals it (its part of the group durable), and
// goes on in k+1. It fails there, after its header was placed: the write
// of its frames in k+1 fails, or the fdatasync of the seal of k, or the
// fdatasync once the group is whole. The store is poisoned (half a
// group placed: nothing more is written, not even another migration of
// the session), the session still reads as it was, and after a power
// cut (nothing, everything or part of what was not synced kept) the
// migration is absent or whole, never half: the session reads the same,
// the other session keeps what it flushed, and Migrate then works.
func TestMigrationCutAcrossARoll(t *testing.T) {
	ctx := context.Background()
	src := testgen.V2Turns("", 40) // (some 20 KB: over two segments)
	want, err := recovery.MigrateV2("m", src)
	if err != nil {
		t.Fatal(err)
	}
	opts := func(fs vfs.FS) *Options {
		return &Options{FS: fs, SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true, Uncompressed: true, CompactInterval: -1}
	}
	for _, c := range []struct {
		name  string
		op    vfs.Op
		next  bool // the fault is in segment k+1 (else k)
		whole bool // the group may survive whole
	}{
		{"write in the next segment", vfs.OpWrite, true, false},
		{"fdatasync of the seal", vfs.OpSync, false, false},
		{"fdatasync of the whole group", vfs.OpSync, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			pf := &pathFaultFS{FS: ff, op: c.op}
			db, err := openStore(t, "/db", opts(pf))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Create(ctx, store.Header{Version: 2, ID: "m", CreatedAt: 1})
			if err == nil {
				err = h.Append(ctx, src...)
			}
			if err == nil {
				err = h.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			side, err := db.Create(ctx, store.Header{ID: "side", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer side.Close()
			sideEvs := testgen.Events(0, 5, 200)
			appendFlushed(t, side, sideEvs...)
			// The group starts at the head of a fresh segment k.
			if err := db.log.RollNow(); err != nil {
				t.Fatal(err)
			}
			k, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load())
			seg := k
			if c.next {
				seg++
			}
			pf.path = db.segPath(seg)
			pf.armed.Store(true)
			_, err = db.Migrate(ctx, "m")
			if !pf.fired.Load() {
				t.Fatalf("the migration never came to the %s of %s (Migrate: %v)", c.op, segment.Name(seg), err)
			}
			if err == nil {
				t.Fatal("Migrate returned nil though it failed")
			}
			if now, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); now < k {
				t.Fatalf("the tail went back to segment %d", now)
			}
			syncs := ff.Count(vfs.OpSync)
			sameEvents(t, "m read after the failed migration", readAll(t, db, "m"), want)
			// (A group placed whole is this process's session, as appended
			// events are before their flush; half of one never is.)
			if s, err := db.Stat(ctx, "m"); err != nil || s.FormatStatus != store.FormatMigrationRequired && !c.whole {
				t.Errorf("m after the failed migration: %+v, %v; want it in its old format", s, err)
			}
			if _, err := db.Migrate(ctx, "m"); err == nil {
				t.Error("a second Migrate after the first was cut across a roll succeeded: the store must be poisoned")
			}
			if err := side.Append(ctx, testgen.Events(5, 1, 200)...); err == nil {
				if err := side.Flush(ctx); err == nil {
					t.Error("a flush after a migration was cut across a roll succeeded: the store must be poisoned")
				}
			}
			if got := ff.Count(vfs.OpSync); got != syncs {
				t.Errorf("%d fdatasyncs after the failure", got-syncs)
			}

			for v, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(11, 2)), Garble: true}, {Rand: rand.New(rand.NewPCG(12, 2))}} {
				label := fmt.Sprintf("power cut %d", v)
				crashed := mem.CrashClone(cfg)
				db2, err := openStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: reopen: %v", label, err)
				}
				s, err := db2.Stat(ctx, "m")
				if err != nil {
					t.Fatalf("%s: stat m: %v", label, err)
				}
				switch {
				case s.FormatStatus == store.FormatMigrationRequired && s.EventCount == uint64(len(src)):
				case s.FormatStatus == store.FormatCurrent && s.EventCount == uint64(len(want)) && c.whole:
				default:
					t.Fatalf("%s: m is %v with %d events: want it as it was (%d events) or whole", label, s.FormatStatus, s.EventCount, len(src))
				}
				sameEvents(t, label+": m", readAll(t, db2, "m"), want)
				if got := readAll(t, db2, "side"); len(got) < len(sideEvs) {
					t.Fatalf("%s: side has %d events, %d were flushed", label, len(got), len(sideEvs))
				}
				if _, err := db2.Migrate(ctx, "m"); err != nil {
					t.Fatalf("%s: Migrate after the reopen: %v", label, err)
				}
				db2.Close()
				db2, err = openStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: second reopen: %v", label, err)
				}
				if s, err := db2.Stat(ctx, "m"); err != nil || s.FormatStatus != store.FormatCurrent {
					t.Fatalf("%s: m after its migration and a reopen: %+v, %v", label, s, err)
				}
				sameEvents(t, label+": m migrated", readAll(t, db2, "m"), want)
				db2.Close()
				if rep, err := Check("/db", opts(crashed)); err != nil || len(rep.Problems) > 0 {
					t.Fatalf("%s: check: %+v, %v", label, rep, err)
				}
			}
		})
	}
}

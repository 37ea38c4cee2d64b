package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// rebuildWait bounds how long a rebuild of a live store's index waits for
// a compaction in progress to end and for the checkpointing process to
// hand the index over.
var rebuildWait = 30 * time.Second

// rebuildLive is RebuildIndex of a store other processes have open. It
// joins them as one more writing process, keeps compactions out (frame
// offsets stay where they are), takes the index over from the process
// that checkpoints it (coord.IndexWant asks it to step down at its next
// checkpoint), catches up with every process's durable frames, replays
// every segment up to there into a new index file beside the old one, and
// renames it over the old one (a copy of which goes to quarantine/).
// Others open the index for each use: their next one sees the new file.
func rebuildLive(dir string, o *Options) error {
	db, err := Open(dir, o)
	if err != nil {
		return err
	}
	err = db.rebuildIndexLive()
	return errors.Join(err, db.Close())
}

func (db *DB) rebuildIndexLive() error {
	sh := db.shared
	ctx, cancel := context.WithTimeout(context.Background(), rebuildWait)
	defer cancel()
	poll := func(what string, try func() (bool, error)) error {
		for {
			ok, err := try()
			if err != nil || ok {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("engine: rebuild the index of %s: %w: %s for %v", db.dir, store.ErrLocked, what, rebuildWait)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	db.compaction.Lock()
	defer db.compaction.Unlock()
	if err := poll("a compaction ran", func() (bool, error) { return sh.TryCompact(), nil }); err != nil {
		return err
	}
	defer sh.EndCompact()
	if err := db.settleLocked(); err != nil {
		return err
	}
	db.checkpoints.Lock()
	defer db.checkpoints.Unlock()
	if !sh.HoldsIndex() {
		// lockWant says the request is alive: if this process dies, the
		// others forget it (indexWanted).
		ok, err := sh.TryLock(coord.LockWant, true)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("engine: rebuild the index of %s: %w: another rebuild runs", db.dir, store.ErrLocked)
		}
		sh.Word(coord.IndexWant).Store(1)
		err = poll("the checkpointing process kept the index", sh.TakeIndex)
		sh.Word(coord.IndexWant).Store(0)
		sh.Unlock(coord.LockWant)
		if err != nil {
			return err
		}
		db.checkpoints.ours.Store(true)
	}
	if err := db.catchUp(); err != nil {
		return err
	}
	db.appendMu.Lock()
	db.follow.mu.Lock()
	until := db.follow.mu.pos
	db.follow.mu.Unlock()
	db.appendMu.Unlock()
	tmp := db.opts.IndexPath + ".rebuild"
	cp, err := db.buildIndex(tmp, until)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: rebuild the index of %s: %w", db.dir, err)
	}
	// The old index to quarantine/ (a copy: the new one replaces it in one
	// rename, so that no other process ever finds none), then the swap.
	qdir := filepath.Join(db.dir, QuarantineDir)
	if db.opts.FS != vfs.Default {
		qdir = filepath.Dir(db.opts.IndexPath)
	}
	if err := copyAside(db.opts.IndexPath, qdir); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: rebuild the index of %s: keeping the old one: %w", db.dir, err)
	}
	if err := os.Rename(tmp, db.opts.IndexPath); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("engine: rebuild the index of %s: %w", db.dir, err)
	}
	if err := vfs.Default.SyncDir(filepath.Dir(db.opts.IndexPath)); err != nil {
		return fmt.Errorf("engine: rebuild the index of %s: %w", db.dir, err)
	}
	pos := coord.Position(cp.Segment, cp.Offset)
	db.mu.Lock()
	db.takeIndexed(pos)
	db.mu.Unlock()
	coord.Raise(sh.Word(coord.Indexed), pos)
	db.opts.Logger.Warn("engine: the index was rebuilt from the segments beside other processes", "index", db.opts.IndexPath, "quarantine", qdir)
	return nil
}

// buildIndex replays every segment up to position until into a new index
// at path, and returns its checkpoint: until, or the header of the first
// migration not whole by then (the index takes a migration whole).
func (db *DB) buildIndex(path string, until uint64) (index.Checkpoint, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return index.Checkpoint{}, err
	}
	useg, uoff := coord.SplitPosition(until)
	ids, err := segment.List(db.opts.FS, db.dir)
	if err != nil {
		return index.Checkpoint{}, err
	}
	b := &DB{dir: db.dir, opts: db.opts}
	b.mu.sessions = map[string]*session{}
	f := newFold(b.mu.sessions, true)
	created := map[uint64]int64{}
	for _, id := range ids {
		if id > useg {
			break
		}
		r, err := db.openSegment(id)
		if err != nil {
			return index.Checkpoint{}, err
		}
		created[id] = r.Header().CreatedNs
		opts := segment.ScanOptions{Durable: math.MaxInt64}
		if id == useg {
			opts.Limit, opts.Durable = uoff, uoff
		}
		res, err := r.Scan(opts, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindSeal {
				return nil
			}
			_, err := f.frame(r, id, fi)
			return err
		})
		r.Close()
		if err != nil {
			return index.Checkpoint{}, err
		}
		if id != useg && !res.Sealed {
			return index.Checkpoint{}, &store.CorruptionError{Path: db.segPath(id), Offset: res.End, Reason: "segment before the durable one is not sealed"}
		}
	}
	cpos := until
	for _, rp := range f.replacing {
		cpos = min(cpos, rp.start.pos())
	}
	pend := slices.DeleteFunc(f.pend, func(p pendFrame) bool { return p.ref.pos() >= cpos })
	b.mu.pend = pend
	b.sortPend()
	u, _ := b.indexUpdate(b.mu.pend)
	cseg, coff := coord.SplitPosition(cpos)
	u.Checkpoint = index.Checkpoint{Segment: cseg, Offset: coff, Created: created[cseg]}
	x, err := index.Open(path, nil)
	if err != nil {
		return index.Checkpoint{}, err
	}
	err = x.Apply(u)
	if cerr := x.Close(); err == nil {
		err = cerr
	}
	return u.Checkpoint, err
}

// copyAside copies the file at path into the directory qdir (created if
// needed), under its name and a time stamp, and syncs it there.
func copyAside(path, qdir string) error {
	src, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	dst, err := os.OpenFile(filepath.Join(qdir, filepath.Base(path)+"."+stamp), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return vfs.Default.SyncDir(qdir)
}

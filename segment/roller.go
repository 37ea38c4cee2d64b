package segment

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/seglog/seglog/vfs"
)

// Name returns the file name of segment id: 16 hex digits and ".seg", so
// that names sort in ID order. Part of the on-disk format.
func Name(id uint64) string { return fmt.Sprintf("%016x.seg", id) }

// ParseName returns the ID in a segment file name made by Name.
func ParseName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// List returns the IDs of the segment files in dir, in increasing order.
// Other files are ignored.
func List(fsys vfs.FS, dir string) ([]uint64, error) {
	return listIDs(fsys, dir, ParseName) // (Name sorts like the IDs)
}

// listIDs returns the IDs that parse finds in the names of the files in
// dir, in the order of the names (vfs.FS.List sorts them). Other files
// are ignored.
func listIDs[T any](fsys vfs.FS, dir string, parse func(string) (T, bool)) ([]T, error) {
	names, err := orDefault(fsys).List(dir)
	if err != nil {
		return nil, err
	}
	var ids []T
	for _, n := range names {
		if id, ok := parse(n); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Roller appends to a sequence of segments in one directory: when a frame
// does not fit the active segment, it seals that segment (which makes all
// of it durable) and creates the next one, with the next ID.
//
// A Roller is safe for concurrent use. Its Sync covers every frame appended
// before the call, in whatever segment: older segments were synced when
// they were sealed. Any error while sealing or creating poisons the Roller.
type Roller struct {
	fsys vfs.FS
	dir  string
	opts WriterOptions

	mu     sync.Mutex // serializes rolls
	active *Writer
	spare  *Writer // the next segment, created ahead by PrepareNext
	err    error

	prepMu sync.Mutex // serializes creating segments; taken before mu
}

// NewRoller continues in dir with active as the active segment (created
// with Create, or reopened with OpenWriter). The next segments get IDs
// from active's ID + 1.
func NewRoller(fsys vfs.FS, dir string, active *Writer, opts WriterOptions) *Roller {
	return &Roller{fsys: orDefault(fsys), dir: dir, opts: opts, active: active}
}

// Active returns the active segment's writer.
func (r *Roller) Active() *Writer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

// AppendEncoded appends an encoded frame to the active segment, rolling to
// a new one if it is full, and returns the ID of the segment that holds it.
func (r *Roller) AppendEncoded(e *Encoded) (uint64, Location, error) {
	for {
		r.mu.Lock()
		w, err := r.active, r.err
		r.mu.Unlock()
		if err != nil {
			return 0, Location{}, err
		}
		loc, err := w.AppendEncoded(e)
		if errors.Is(err, ErrFull) || errors.Is(err, ErrSealed) {
			if err := r.roll(w); err != nil {
				return 0, Location{}, err
			}
			continue
		}
		return w.Header().ID, loc, err
	}
}

// roll seals full (if it is still the active segment) and creates the next.
func (r *Roller) roll(full *Writer) error {
	r.prepMu.Lock() // a PrepareNext in progress finishes the file first
	defer r.prepMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if r.active != full {
		return nil // another goroutine rolled already
	}
	if err := full.Seal(); err != nil {
		var lost *LostError
		if !errors.As(err, &lost) {
			r.err = err
		}
		return err // a lost seal is undone by Recover, and the roll tried again
	}
	id := full.Header().ID + 1
	next := r.spare
	r.spare = nil
	if next == nil || next.Header().ID != id {
		if next != nil {
			next.Close()
		}
		var err error
		if next, err = Create(r.fsys, filepath.Join(r.dir, Name(id)), id, r.opts); err != nil {
			err = fmt.Errorf("segment: roll to %s: %w", Name(id), err)
			if errors.Is(err, ErrSyncFailed) {
				r.err = err
			}
			// Otherwise (a full disk, say) Create left nothing behind: the
			// full segment stays sealed and active, and the next append
			// tries the roll again.
			return err
		}
	}
	if err := full.Close(); err != nil {
		next.Close()
		r.err = fmt.Errorf("segment: close sealed %s: %w", Name(full.Header().ID), err)
		return r.err
	}
	r.active = next
	return nil
}

// PrepareNext creates the segment that the next roll will use, if it does
// not exist yet, so that the roll (and the appends waiting on it) need not
// pay for creating and zero-filling it. It does not block appends. A
// prepared segment holds no frame; after a crash, recovery removes it.
func (r *Roller) PrepareNext() error {
	r.prepMu.Lock()
	defer r.prepMu.Unlock()
	r.mu.Lock()
	if r.err != nil {
		err := r.err
		r.mu.Unlock()
		return err
	}
	id := r.active.Header().ID + 1
	if r.spare != nil {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	w, err := Create(r.fsys, filepath.Join(r.dir, Name(id)), id, r.opts)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.spare != nil || r.active.Header().ID+1 != id {
		w.Close() // rolled meanwhile; the file stays empty and is reused or removed
		return nil
	}
	r.spare = w
	return nil
}

// Prepared reports whether the next segment is ready.
func (r *Roller) Prepared() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spare != nil
}

// Roll seals the active segment (making it durable) and starts the next,
// even though the active one is not full: compaction uses it so that the
// dead part of the active segment becomes reclaimable.
func (r *Roller) Roll() error {
	return r.roll(r.Active())
}

// Sync makes every frame appended before the call durable.
func (r *Roller) Sync() error {
	r.mu.Lock()
	w, err := r.active, r.err
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return w.Sync()
}

// Recover undoes a failed write of the active segment (see
// Writer.Recover).
func (r *Roller) Recover() error {
	r.mu.Lock()
	w, err := r.active, r.err
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if err := w.Recover(); err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

// Close closes the active segment without syncing it. It is idempotent.
func (r *Roller) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = ErrClosed
	}
	if r.spare != nil {
		r.spare.Close()
		r.spare = nil
	}
	return r.active.Close()
}

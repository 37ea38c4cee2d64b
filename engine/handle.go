package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Handle is one open channel onto a session: a read handle, or the single
// write handle. It is safe for concurrent use; appends through one handle
// are applied in call order.
type Handle struct {
	db     *DB
	s      *session
	id     string
	hdr    Header
	inh    uint64
	access Access
	lease  *handle.Lease

	mu       sync.Mutex
	closed   bool
	closeErr error
	front    handle.Front // Enqueue's write-behind
	seen     uint64       // longest log this handle has observed

	lost atomic.Pointer[lostErr] // set when a failed write lost events appended through it
}

// newHandle is called with db.mu held.
func (db *DB) newHandle(s *session, access Access, lease *handle.Lease) *Handle {
	h := &Handle{db: db, s: s, id: s.id, hdr: s.hdr, inh: s.inherited, access: access, lease: lease}
	if access == Write {
		db.handles[h] = struct{}{}
	}
	return h
}

// ID returns the session ID.
func (h *Handle) ID() string { return h.id }

// Header returns the session header, fixed when the handle opened.
func (h *Handle) Header() Header { return h.hdr }

// InheritedEventCount returns the length of a seeded session's inherited
// prefix (0 for an unseeded one).
func (h *Handle) InheritedEventCount() uint64 { return h.inh }

// Access returns Read or Write.
func (h *Handle) Access() Access { return h.access }

func (h *Handle) usable(op string) error {
	if h.closed {
		return sessionErr(h.id, op, ErrHandleClosed)
	}
	return nil
}

// writable is called with h.mu held.
func (h *Handle) writable(op string) error {
	if err := h.usable(op); err != nil {
		return err
	}
	if h.access != Write {
		return sessionErr(h.id, op, ErrReadOnly)
	}
	if err := h.lease.Check(); err != nil {
		return sessionErr(h.id, op, ErrOwnershipLost)
	}
	if l := h.lost.Load(); l != nil {
		return sessionErr(h.id, op, fmt.Errorf("%w; close this handle and open the session again to continue from its stored events", l.err))
	}
	return nil
}

// Read returns the events at offset..offset+limit-1 (limit < 0: to the
// end). An offset at or past the end gives an empty slice and no error.
// The events are the caller's: they share no memory with the store or with
// other reads. Reads started after an Append returned see its events.
func (h *Handle) Read(ctx context.Context, offset, limit int) ([]event.Event, error) {
	h.mu.Lock()
	err := h.usable("read")
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, sessionErr(h.id, "read", fmt.Errorf("%w: offset %d must be a non-negative integer", ErrInvalidArgument, offset))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.hdr.Version < FormatVersion {
		return h.readMigrated(ctx, offset, limit)
	}
	return h.readStored(ctx, offset, limit, true)
}

// readMigrated is Read of a session stored in an older format: the whole
// log is read and migrated in memory (nothing is written), then sliced.
func (h *Handle) readMigrated(ctx context.Context, offset, limit int) ([]event.Event, error) {
	raw, err := h.readStored(ctx, 0, -1, false)
	if err != nil {
		return nil, err
	}
	evs, err := migrate(h.hdr.Version, h.id, raw)
	if err != nil {
		return nil, sessionErr(h.id, "read", err)
	}
	lo, hi := store.ReadRange(uint64(len(evs)), offset, limit) // offset+limit may overflow an int
	if lo >= hi {
		return []event.Event{}, nil
	}
	return evs[lo:hi], nil
}

// readStored is Read of the events as stored; check applies the catalog.
func (h *Handle) readStored(ctx context.Context, offset, limit int, check bool) ([]event.Event, error) {
	db := h.db
	db.layoutMu.RLock()
	out, err := h.readFrames(ctx, offset, limit)
	db.layoutMu.RUnlock()
	if err != nil {
		return nil, err
	}
	for i := range out { // fail closed on events this build does not know
		if !check {
			break
		}
		if err := db.opts.Catalog.Check(&out[i]); err != nil {
			return nil, sessionErr(h.id, "read", err)
		}
	}
	return out, nil
}

// readFrames is readStored's part under db.layoutMu.
func (h *Handle) readFrames(ctx context.Context, offset, limit int) ([]event.Event, error) {
	db := h.db
	v, err := db.snapshot(h.s)
	if err != nil {
		return nil, sessionErr(h.id, "read", err)
	}
	h.mu.Lock()
	err = store.ObserveLength(&h.seen, v.len())
	h.mu.Unlock()
	if err != nil {
		return nil, sessionErr(h.id, "read", err)
	}
	off, end := store.ReadRange(v.len(), offset, limit)
	if off >= end {
		return []event.Event{}, nil
	}
	refs := v.refs
	lo := sort.Search(len(refs), func(i int) bool { return refs[i].first+uint64(refs[i].count) > off })
	hi := lo
	for hi < len(refs) && refs[hi].first < end {
		hi++
	}
	out := make([]event.Event, end-off)
	if err := db.decodeFrames(ctx, refs[lo:hi], v.active, off, end, out); err != nil {
		return nil, sessionErr(h.id, "read", err)
	}
	filled := uint64(0)
	if hi > lo {
		filled = min(refs[hi-1].first+uint64(refs[hi-1].count), end) - off
	}
	for seq := max(off, v.framed); seq < end; seq++ {
		out[seq-off] = v.open[seq-v.framed].Clone()
		filled = seq - off + 1
	}
	if filled != end-off {
		return nil, sessionErr(h.id, "read", &CorruptionError{Path: db.dir, Reason: fmt.Sprintf("session %q: frames cover %d of events %d..%d", h.id, filled, off, end)})
	}
	return out, nil
}

// checkLog is a write open's validation of the stored log: every event's
// type against the catalog, and the seed marker rules (REFERENCE.md §(f)).
// Events already checked by an earlier write open of this DB are skipped.
func (h *Handle) checkLog(ctx context.Context) error {
	db := h.db
	db.mu.Lock()
	from, n := h.s.checked, h.s.next
	seeded, inh := h.hdr.IsSeeded, h.inh
	db.mu.Unlock()
	if err := store.CheckLog(ctx, h.id, seeded, inh, from, n, h.Read); err != nil {
		return err
	}
	db.mu.Lock()
	if h.s.checked < n {
		h.s.checked = n
	}
	db.mu.Unlock()
	return nil
}

// parallelFrames is the number of frames from which a read decodes on
// several cores.
const parallelFrames = 16

// decodeFrames decodes refs (consecutive frames of one session) and puts
// the events in [off, end) at out[seq-off]. Large reads fan out over
// GOMAXPROCS goroutines, each taking every n-th frame.
func (db *DB) decodeFrames(ctx context.Context, refs []frameRef, active *segment.Writer, off, end uint64, out []event.Event) error {
	one := func(ref frameRef) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := db.readFrame(ref, active)
		if err != nil {
			return err
		}
		for i, e := range f.Events {
			if seq := ref.first + uint64(i); seq >= off && seq < end {
				out[seq-off] = e
			}
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), len(refs)/parallelFrames*2)
	if workers <= 1 {
		for _, ref := range refs {
			if err := one(ref); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(refs); i += workers {
				if err := one(refs[i]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// snapshotFrames returns s's frames, its event count and the active
// writer, loading the frame list from the index on first use.
type view struct {
	refs   []frameRef    // frames covering [0, framed)
	framed uint64        //
	open   []event.Event // events [framed, framed+len(open)), not yet framed
	active *segment.Writer
}

func (v *view) len() uint64 { return v.framed + uint64(len(v.open)) }

// snapshot returns a consistent view of s's events, loading the frame
// list from the index on first use.
func (db *DB) snapshot(s *session) (view, error) {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return view{}, ErrClosed
	}
	if s.erased {
		db.mu.Unlock()
		return view{}, ErrSessionNotFound
	}
	if !s.loaded && db.idx != nil {
		db.mu.Unlock()
		fromIdx, err := db.idx.Frames(s.id)
		if err != nil {
			return view{}, err
		}
		db.mu.Lock()
		if !s.loaded {
			limit := s.framed
			if len(s.frames) > 0 {
				limit = s.frames[0].first
			}
			all := make([]frameRef, 0, len(fromIdx)+len(s.frames))
			for _, f := range fromIdx {
				if f.FirstSeq < limit {
					all = append(all, frameRef{first: f.FirstSeq, count: f.Count, seg: f.Segment, off: f.Offset, size: f.Size})
				}
			}
			s.frames = append(all, s.frames...)
			s.loaded = true
		}
	}
	v := view{refs: s.frames, framed: s.framed, open: s.open}
	if db.roller != nil {
		v.active = db.roller.Active()
	}
	db.mu.Unlock()
	return v, nil
}

func (db *DB) readFrame(ref frameRef, active *segment.Writer) (*segment.Frame, error) {
	if active != nil && ref.seg == active.Header().ID {
		buf := make([]byte, ref.size)
		if active.ReadBuffered(buf, ref.off) {
			return segment.DecodeFrameAt(active.Path(), buf, ref.off, 0)
		}
	}
	r, err := db.reader(ref.seg)
	if errors.Is(err, fs.ErrNotExist) {
		// Reads hold the layout lock: a compaction removes only segments
		// with no live frame, so this one was lost.
		return nil, &CorruptionError{Path: db.segPath(ref.seg), Offset: ref.off, Err: err,
			Reason: fmt.Sprintf("segment missing: it held events %d..%d of this session", ref.first, ref.first+uint64(ref.count))}
	}
	if err != nil {
		return nil, err
	}
	f, err := r.ReadFrame(ref.off)
	if err != nil {
		return nil, err
	}
	if f.Kind != segment.KindEvents || f.FirstSeq != ref.first || len(f.Events) != int(ref.count) {
		return nil, &CorruptionError{Path: r.Path(), Offset: ref.off, Reason: fmt.Sprintf("frame does not hold the indexed events %d..%d", ref.first, ref.first+uint64(ref.count))}
	}
	return f, nil
}

// Append adds events to the session. The first seq must be the session's
// next seq and the seqs contiguous (*SeqError); every event must be valid
// (*event.InvalidError). A bad batch fails whole and writes nothing.
//
// Append is best-effort: when it returns, the events are ordered and
// visible to every read started afterwards on this DB; only Flush promises
// they survive a crash. An empty batch does nothing.
func (h *Handle) Append(ctx context.Context, evs ...event.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	wb := h.front.Buffer()
	h.mu.Unlock()
	// Events handed to Enqueue come first.
	if err := handle.DrainPending(ctx, wb); err != nil {
		return sessionErr(h.id, "append", err)
	}
	return h.appendNow(ctx, evs)
}

// appendNow is Append without draining the write-behind buffer (which
// calls it).
func (h *Handle) appendNow(ctx context.Context, evs []event.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable("append"); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	db := h.db
	db.mu.Lock()
	next, poison := h.s.next, db.poison
	db.mu.Unlock()
	if poison != nil {
		return sessionErr(h.id, "append", poison)
	}
	if err := h.validate(evs, next); err != nil {
		return err
	}
	cl, size := cloneBatch(evs)
	db.mu.Lock()
	h.s.open = append(h.s.open, cl...)
	h.s.openBytes += size
	h.s.next += uint64(len(cl))
	full := h.s.openBytes >= db.opts.FrameBytes
	db.mu.Unlock()
	if full {
		if err := h.cut(); err != nil {
			return sessionErr(h.id, "append", err)
		}
	}
	return nil
}

// cloneBatch copies events into one allocation for their bytes, so that
// the store's copy shares nothing with the caller's.
func cloneBatch(evs []event.Event) ([]event.Event, int) {
	n := 0
	for i := range evs {
		n += len(evs[i].Data) + len(evs[i].SurfaceOp)
	}
	arena := make([]byte, 0, n)
	out := make([]event.Event, len(evs))
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	for i, e := range evs {
		e.Data = take(e.Data)
		e.SurfaceOp = take(e.SurfaceOp)
		if e.SourceEventSeqs != nil {
			e.SourceEventSeqs = slices.Clone(e.SourceEventSeqs)
		}
		out[i] = e
	}
	return out, n + 64*len(evs)
}

// cut encodes the session's open events into frames and appends them (with
// the header frame first if the session is not yet written). Called with
// h.mu held by the owner.
func (h *Handle) cut() error {
	db := h.db
	db.mu.Lock()
	batch, pending := h.s.open, h.s.pending
	h.s.openBytes = 0
	db.mu.Unlock()
	if len(batch) == 0 && !pending {
		return nil
	}
	var frames []*segment.Encoded
	var counts []uint32
	if len(batch) > 0 {
		var err error
		if frames, counts, err = db.encodeBatch(h.id, batch); err != nil {
			return err
		}
	}
	var hdr *segment.Encoded
	if pending {
		var err error
		if hdr, err = db.enc.Header(h.id, marshalHeader(h.s)); err != nil {
			return err
		}
	}
	return db.appendFrames(h.s, hdr, frames, counts)
}

func (h *Handle) validate(evs []event.Event, next uint64) error {
	return store.CheckBatch(h.id, evs, next)
}

// Enqueue hands events to the write-behind buffer without waiting for
// I/O: the first pending event opens a batching window (Options.
// WriteBehindWindow) that later events do not extend; then the batch is
// appended in the background. Seqs and shapes are checked here, so a
// background write fails only on I/O; such a failure keeps the events in
// order, pauses the automatic path and logs a warning, and the next Flush
// retries and returns the error. An Append after Enqueue first appends
// what is buffered, so the two can be mixed.
func (h *Handle) Enqueue(evs ...event.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable("enqueue"); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	db := h.db
	db.mu.Lock()
	stored := h.s.next
	db.mu.Unlock()
	return h.front.Enqueue(handle.WriteBehindConfig[event.Event]{
		Write:     func(ctx context.Context, batch []event.Event) error { return h.appendNow(ctx, batch) },
		Window:    db.opts.WriteBehindWindow,
		Name:      h.id,
		Logger:    db.opts.Logger,
		AfterFunc: db.opts.AfterFunc,
	}, stored, evs, h.validate)
}

// Flush is the durability barrier: it appends what Enqueue buffered,
// writes a created-but-empty session, and returns once everything this
// handle appended is on stable storage. Flushes of many sessions at the
// same time share one fdatasync.
func (h *Handle) Flush(ctx context.Context) error {
	if err := h.prepareFlush(ctx); err != nil {
		return err
	}
	if err := h.db.sync(); err != nil {
		return sessionErr(h.id, "flush", err)
	}
	return nil
}

// prepareFlush drains the write-behind buffer and materializes a pending
// session, without syncing.
func (h *Handle) prepareFlush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	if err := h.writable("flush"); err != nil {
		h.mu.Unlock()
		return err
	}
	wb := h.front.Buffer()
	h.mu.Unlock()
	if wb != nil {
		if err := wb.Drain(ctx); err != nil {
			return sessionErr(h.id, "flush", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable("flush"); err != nil {
		return err
	}
	if err := h.cut(); err != nil {
		return sessionErr(h.id, "flush", err)
	}
	return nil
}

// closeFlush is DB.Close's flush of one write handle: drain the
// write-behind buffer and frame the open events, except that a creator
// that never appended is left unwritten (its session vanishes, as when the
// handle is closed).
func (h *Handle) closeFlush() error {
	h.mu.Lock()
	wb := h.front.Buffer()
	h.mu.Unlock()
	if wb != nil {
		if err := wb.Drain(context.Background()); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.writable("close"); err != nil {
		return err
	}
	db := h.db
	db.mu.Lock()
	untouched := h.s.pending && h.s.next == 0
	db.mu.Unlock()
	if untouched {
		return nil
	}
	return h.cut()
}

// Close ends the handle. A write handle first appends what Enqueue
// buffered and makes the session's appends durable, then releases its
// lease; a creator that never appended or flushed erases the session, as
// if it never existed. Later calls on the handle fail with
// ErrHandleClosed. Close is idempotent and returns the first call's error;
// the lease is released even when draining fails.
func (h *Handle) Close() error {
	h.mu.Lock()
	if h.closed {
		err := h.closeErr
		h.mu.Unlock()
		return err
	}
	wb := h.front.Buffer()
	h.mu.Unlock()
	var errs []error
	if wb != nil {
		if err := wb.Close(context.Background()); err != nil {
			errs = append(errs, sessionErr(h.id, "close", fmt.Errorf("close failed to drain: %w", err)))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return h.closeErr
	}
	h.closed = true
	if h.access == Write {
		db := h.db
		db.mu.Lock()
		delete(db.handles, h)
		s := h.s
		if s.owner == h {
			s.owner = nil
		}
		erase := s.pending && s.next == 0 && !s.erased // never appended, never flushed
		if erase {
			s.erased = true
			if db.sessions[s.id] == s {
				delete(db.sessions, s.id)
			}
		}
		dbClosed := db.closed
		db.mu.Unlock()
		if !erase && !dbClosed && h.lease.Check() == nil {
			err := h.cut()
			if err == nil {
				err = db.sync()
			}
			if err != nil {
				errs = append(errs, sessionErr(h.id, "close", err))
			}
		}
		h.lease.Release()
	}
	h.closeErr = errors.Join(errs...)
	return h.closeErr
}

package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/wal"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Flush is the barrier over every open write handle: it drains each one's
// write-behind buffer, writes each created-but-empty session, and makes
// everything durable with one fdatasync. The error joins one error per
// failing session, each naming it; the other sessions still flush.
func (db *DB) Flush(ctx context.Context) (err error) {
	if db.opts.ReadOnly {
		return store.ErrReadOnlyStore
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	start := time.Now()
	defer func() { db.metrics.flushed(start, err) }()
	db.mu.Lock()
	hs := db.writeHandles()
	db.mu.Unlock()
	var errs []error
	marks := make([]store.FlushMark, len(hs))
	failed := make([]error, len(hs))
	for i, h := range hs {
		marks[i] = h.front.BeginFlush()
		if err := h.prepareFlush(ctx); err != nil && !errors.Is(err, store.ErrHandleClosed) {
			failed[i] = err
			errs = append(errs, sessionErr(h.s.id, "flush", err))
		}
	}
	serr := db.sync()
	if serr != nil {
		errs = append(errs, serr)
	}
	// Each handle's outcome (store.Front.Flush): its write-out's, then
	// the sync's.
	for i, h := range hs {
		h.front.EndFlush(ctx, marks[i], cmp.Or(failed[i], serr))
	}
	return errors.Join(errs...)
}

// writeHandles returns the open write handles, by session id. Called with
// db.mu held.
func (db *DB) writeHandles() []*Handle {
	hs := make([]*Handle, 0, len(db.mu.handles))
	for h := range db.mu.handles {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].ID() < hs[j].ID() })
	return hs
}

// sync makes every frame this process placed durable (group commit with
// concurrent callers, and with the other processes: one fdatasync covers
// every frame placed before it).
func (db *DB) sync() error {
	return db.log.SyncPlaced()
}

// catchUpAll brings a writing DB up to every frame any process placed,
// before it takes session id over (a write open, Create, Delete, Migrate,
// Fork, each under the session's lease): frames a process placed and never
// synced (it may have died since) are made durable first, so that the new
// owner continues after them, never beside them. A group of id that
// another process began and never finished is then ended (endDeadGroup).
func (db *DB) catchUpAll(id string) error {
	if t := db.shared.Word(coord.Tail).Load(); t > db.shared.Word(coord.Durable).Load() {
		if err := db.log.Sync(t); err != nil {
			return err
		}
	}
	if err := db.catchUp(); err != nil {
		return err
	}
	return db.endDeadGroup(id)
}

// endDeadGroup, with session id's lease held and every frame any process
// placed followed (catchUpAll), ends a group of id (a migration, or a
// fork: a header that counts the events after it) that the fold still
// waits for: the process that began it held id's lease until the group
// was whole, so it died (or failed) before that, and the rest never
// comes. A durable tombstone of the group's incarnation ends it for every
// process, as the next first opener's recovery would (abandonMigrations);
// until then, the index checkpoint stops before its header, and the next
// header, events or tombstone of id would be corruption inside it.
func (db *DB) endDeadGroup(id string) error {
	db.mu.Lock()
	rp := db.fold.replacing[id]
	db.mu.Unlock()
	if rp == nil {
		return nil
	}
	e, err := db.encoder(false).Delete(id, rp.s.uid)
	if err != nil {
		return err
	}
	// Registered (the fold told) under db.mu as it is placed: this
	// process's follower skips its own frames.
	pl := &wal.Placement{Frames: []*segment.Encoded{e}, Register: func([]wal.Placed, int) {
		if db.fold.replacing[id] == rp {
			db.fold.abandon(rp)
		}
	}}
	if err := db.log.Place(pl); err != nil {
		return fmt.Errorf("engine: ending the unfinished group of session %q: %w", id, err)
	}
	if err := db.log.SyncPlaced(); err != nil {
		return fmt.Errorf("engine: ending the unfinished group of session %q: %w", id, err)
	}
	what := "a migration"
	if rp.fork {
		what = "a fork"
	}
	db.opts.Logger.Warn("engine: "+what+" that another process began and never finished is abandoned", "session", id, "segment", rp.start.seg, "offset", rp.start.off)
	return nil
}

// endDeadGroups, in the checkpointing process, ends every group whose
// writer is gone (endDeadGroup, under the session's lease, which a live
// writer holds): the checkpoint would otherwise stop before its header
// for as long as the store stays open.
func (db *DB) endDeadGroups() error {
	db.mu.Lock()
	ids := slices.Sorted(maps.Keys(db.fold.replacing))
	db.mu.Unlock()
	for _, id := range ids {
		l, err := db.acquire(id)
		if err != nil {
			continue // its writer is at work
		}
		err = db.catchUpAll(id)
		l.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// poisonWith poisons the store with err (the first error wins): nothing
// more is acknowledged. Takes db.mu: under it, call poisonLocked.
func (db *DB) poisonWith(err error) {
	db.mu.Lock()
	db.poisonLocked(err)
	db.mu.Unlock()
}

// poisonLocked is poisonWith for a caller that holds db.mu.
func (db *DB) poisonLocked(err error) {
	if db.mu.poison == nil {
		db.mu.poison = fmt.Errorf("engine: store failed, nothing more is acknowledged: %w", err)
		e := db.mu.poison
		db.poisonP.Store(&e)
	}
}

// poisonErr returns the error that poisoned the store, or nil: a failure
// of its own, or shm found cut under it (a *CoordinationError). It takes
// no lock: the placements and syncs of every flusher ask (db.poisonP).
func (db *DB) poisonErr() error {
	if p := db.poisonP.Load(); p != nil {
		return *p
	}
	return db.shared.Lost()
}

// appendFrames places encoded frames of s (made from the head of s.open)
// and registers them. What could not be placed stays in s.open for the
// next cut. Called with no lock held; the caller holds s's lease.
func (db *DB) appendFrames(s *session, header *segment.Encoded, frames []*segment.Encoded) error {
	es := frames
	if header != nil {
		es = append([]*segment.Encoded{header}, frames...)
	}
	err := db.log.Place(&wal.Placement{Frames: es, Register: func(at []wal.Placed, first int) {
		for i, p := range at {
			ref := frameRef{seg: p.Seg, off: p.Loc.Offset, size: uint32(p.Loc.Size)}
			k := first + i
			if header != nil {
				if k == 0 {
					s.pending = false
					s.size += p.Loc.Size
					db.mu.pend = append(db.mu.pend, pendFrame{s: s, header: true, ref: ref})
					continue
				}
				k--
			}
			n := frames[k].Count()
			evs := s.open[:n]
			s.open = s.open[n:]
			if len(s.open) == 0 {
				// Framed whole: drop the slice, or its backing array
				// keeps the batch's copies (and their bytes) alive for
				// as long as the session stays idle.
				s.open = nil
			}
			ref.first, ref.count = s.framed, n
			if db.placedChecked(s, ref.first) && store.SeedsKept(s.hdr.IsSeeded, s.inherited, evs) {
				// (The frame's index update writes the count.)
				s.checked, s.checkedCat = ref.first+uint64(n), db.catalogNow()
			}
			p := s.addFrame(ref)
			s.noteFrame(evs, &p)
			s.noteTurnBoundary(evs)
			db.mu.pend = append(db.mu.pend, p)
			db.relist(s, false)
		}
		if len(db.mu.pend) >= indexBatchFrames && db.checkpoints.ours.Load() {
			select { // enough for a checkpoint before the next tick
			case db.idxKick <- struct{}{}:
			default:
			}
		}
	}})
	for _, e := range es {
		// Placed (copied into the segment) or not, they are done with:
		// what was not placed stays open and is encoded again.
		e.Release()
	}
	if db.knobs.appended != nil {
		db.knobs.appended()
	}
	return err
}

// indexBatchFrames is how many unindexed frames wake the indexer before
// its interval: index commits stay batched and off the flush path.
const indexBatchFrames = 8192

// prepareBackoff is how long the segment preparer waits after a failure
// (a full disk) before it tries again; the roll itself always tries.
const prepareBackoff = 5 * time.Second

// prepareLoop grows the active segment ahead of its tail, and creates the
// next segment in the background once the active one is half full, so
// that neither a data sync nor a roll waits for a zero fill.
func (db *DB) prepareLoop() {
	defer db.wg.Done()
	var failedFor uint64 // the active segment whose successor could not be prepared
	var failedAt time.Time
	for {
		select {
		case <-db.stop:
			return
		case <-db.prepKick:
		}
		active, _ := coord.SplitPosition(db.shared.Word(coord.Tail).Load())
		if active == failedFor && time.Since(failedAt) < prepareBackoff {
			continue // one warning per segment and backoff, not one per append
		}
		if err := db.log.Grow(); err != nil {
			failedFor, failedAt = active, time.Now()
			db.opts.Logger.Warn("engine: growing the active segment failed; appends extend it", "error", err)
			continue
		}
		if err := db.log.PrepareNext(); err != nil {
			failedFor, failedAt = active, time.Now()
			db.opts.Logger.Warn("engine: preparing the next segment failed; the roll will create it", "error", err)
		}
	}
}

// encoder returns the encoder of this process's frames: with its current
// dictionary once the active segment may hold frames that name one, and
// fast (S2, segment.Encoder.Fast) for a frame a caller waits for (a
// turn's flush), once the active segment may hold S2 frames.
func (db *DB) encoder(fast bool) segment.Encoder {
	e := segment.Encoder{Uncompressed: db.opts.Uncompressed}
	v := db.log.TailVersion()
	if db.dict != nil && v >= segment.DictVersion {
		e.Dict = db.dict.Cur()
	}
	e.Fast = fast && v >= segment.S2Version
	return e
}

// encodeBatch splits evs into frames of about FrameBytes raw bytes. A
// batch of several frames is encoded (and compressed) on up to GOMAXPROCS
// goroutines (segment.Encoder.EventsFrames): a bulk append uses every core.
func (db *DB) encodeBatch(id string, evs []event.Event) ([]*segment.Encoded, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var cuts [][]event.Event
	start, bytes := 0, 0
	for i := range evs {
		bytes += len(evs[i].Data) + len(evs[i].Type) + 16
		if bytes >= db.opts.FrameBytes {
			cuts = append(cuts, evs[start:i+1])
			start, bytes = i+1, 0
		}
	}
	if start < len(evs) && len(cuts) > 0 { // (one frame needs no cuts)
		cuts = append(cuts, evs[start:])
	}
	// One frame is a flush's (a turn's, mostly), which its caller waits
	// for: S2. Several are a bulk append's, compressed on every core:
	// zstd, with the dictionary.
	enc := db.encoder(len(cuts) <= 1 && !db.opts.Dense)
	var out []*segment.Encoded
	var err error
	switch {
	case len(cuts) > 1:
		out, err = enc.EventsFrames(id, evs[0].Seq, cuts)
	case bytes < segment.DefaultMinCompress && start == 0 && db.dict != nil && !enc.Fast:
		// One small frame (a flush of a turn, mostly; stored as is
		// without a dictionary): compressed with a dictionary within the
		// CPU budget of such frames.
		var e *segment.Encoded
		e, err = db.dict.EncodeSmall(enc, id, evs)
		out = []*segment.Encoded{e}
	default: // one frame: no fan-out
		var e *segment.Encoded
		e, err = enc.Events(id, evs[0].Seq, evs)
		out = []*segment.Encoded{e}
	}
	if err != nil {
		return nil, err
	}
	if db.dict != nil {
		db.dict.Observe(out)
	}
	return out, nil
}

// handleWriter is a write handle's side of its store.Front (its
// store.Writer): the engine's steps of Append, Flush and Close. Its
// methods are called with the Front's lock held. A type of its own, not a
// second name of Handle, so that Handle's method set stays the public
// API; one pointer wide, it goes into the Front's interface without an
// allocation.
type handleWriter struct{ h *Handle }

// Writable fails once the lease is lost, or the store is poisoned (a
// failed fdatasync, shm found cut): an Append or Enqueue then takes
// nothing, instead of taking events that no window could make durable.
func (w handleWriter) Writable() error {
	if err := w.h.lease.Check(); err != nil {
		return store.ErrOwnershipLost
	}
	return w.h.db.poisonErr()
}

func (w handleWriter) Next() uint64 {
	db := w.h.db
	db.mu.Lock()
	defer db.mu.Unlock()
	return w.h.s.next
}

func (w handleWriter) Check([]event.Event) error { return nil }

// Stage takes evs (the store's copies) into the session's open events.
func (w handleWriter) Stage(cl []event.Event) (bool, error) {
	db, s := w.h.db, w.h.s
	n := 0
	for i := range cl {
		n += len(cl[i].Data) + len(cl[i].SurfaceOp)
	}
	db.mu.Lock()
	if err := db.mu.poison; err != nil {
		db.mu.Unlock()
		return false, err
	}
	s.open = append(s.open, cl...)
	s.openBytes += n + 64*len(cl)
	s.next += uint64(len(cl))
	full := s.openBytes >= db.opts.FrameBytes
	db.mu.Unlock()
	db.metrics.staged(len(cl), n)
	return full, nil
}

func (w handleWriter) Cut(context.Context) error {
	if w.h.db.knobs.cut != nil {
		w.h.db.knobs.cut(w.h)
	}
	return w.h.cut()
}

// CutBehind is Append's write-out of a full batch: it waits for the
// previous one (returning its error, the events of which are still
// open), then encodes and places the open events on another goroutine,
// so that the caller checks and copies its next batch while they are
// compressed. Every later cut of the handle, and its Close, waits for it.
func (w handleWriter) CutBehind(context.Context) error {
	h := w.h
	if err := h.waitBehind(); err != nil {
		return err
	}
	batch, pending := h.takeOpen()
	if len(batch) == 0 && !pending {
		return nil
	}
	// The write-out is an operation of its own in the DB's gate: Close
	// waits for it before it flushes the handles.
	if h.db.enter() != nil {
		// The DB is closing: nothing failed, and nothing may start. The
		// events stay open, for Close's flush of the handle (an Append
		// that entered before Close began, or the write-behind buffer's
		// background write, staged them; past that flush, the handle's
		// Close counts them as dropped).
		return nil
	}
	j := &cutJob{done: make(chan struct{})}
	h.behind = j
	go func() {
		defer h.db.leave()
		defer close(j.done)
		j.err = h.writeOut(batch, pending)
	}()
	return nil
}

// cutJob is a write-out running behind its handle's appends.
type cutJob struct {
	done chan struct{}
	err  error
}

// waitBehind waits for the handle's write-out in the background, if one
// runs, and returns its error. Called with h.front.mu (the Front's lock)
// held.
func (h *Handle) waitBehind() error {
	j := h.behind
	if j == nil {
		return nil
	}
	<-j.done
	h.behind = nil
	return j.err
}

// cut encodes the session's open events into frames and appends them (with
// the header frame first if the session is not yet written). Called with
// h.front.mu (the Front's lock) held by the owner.
func (h *Handle) cut() error {
	// A failed write-out behind left its events open: they go again now.
	h.waitBehind()
	batch, pending := h.takeOpen()
	if len(batch) == 0 && !pending {
		return nil
	}
	return h.writeOut(batch, pending)
}

// takeOpen returns the session's open events and whether its header is
// still to be written, and starts counting a new frame's bytes.
func (h *Handle) takeOpen() ([]event.Event, bool) {
	db := h.db
	db.mu.Lock()
	defer db.mu.Unlock()
	h.s.openBytes = 0
	return h.s.open, h.s.pending
}

// writeOut encodes batch (the head of the session's open events) into
// frames and appends them, after the header frame if pending. The handle's
// cuts run one at a time.
func (h *Handle) writeOut(batch []event.Event, pending bool) error {
	db := h.db
	var frames []*segment.Encoded
	if len(batch) > 0 {
		var err error
		if frames, err = db.encodeBatch(h.ID(), batch); err != nil {
			return err
		}
	}
	var hdr *segment.Encoded
	if pending {
		var err error
		if hdr, err = db.encoder(false).Header(h.ID(), marshalHeader(h.s)); err != nil {
			return err
		}
	}
	return db.appendFrames(h.s, hdr, frames)
}

// Flush is the durability barrier: it appends what Enqueue buffered,
// writes a created-but-empty session, and returns once everything this
// handle appended is on stable storage. Flushes of many sessions at the
// same time share one fdatasync.
func (h *Handle) Flush(ctx context.Context) error {
	if err := h.db.enter(); err != nil {
		return sessionErr(h.ID(), "flush", errClosedLease)
	}
	defer h.db.leave()
	start := time.Now()
	err := h.front.Flush(ctx, h.flush)
	h.db.metrics.flushed(start, err)
	return err
}

// placedEnd returns the position just past the session's last placed
// frame (0 if the DB holds none of it beyond the index, which holds only
// durable frames).
func (h *Handle) placedEnd() uint64 {
	h.db.mu.Lock()
	defer h.db.mu.Unlock()
	fr := h.s.frames
	if len(fr) == 0 {
		return 0
	}
	last := fr[len(fr)-1]
	return coord.Position(last.seg, last.off+int64(last.size))
}

// windowFlush is the flush at the end of a durability window
// (store.FrontConfig.Flush), on the window's timer: a Flush that the
// metrics count apart. Once the DB's Close has begun it does nothing:
// Close flushes every handle.
func (h *Handle) windowFlush(ctx context.Context) error {
	if err := h.db.enter(); err != nil {
		return nil
	}
	defer h.db.leave()
	err := h.prepareFlush(ctx)
	if err == nil {
		// Only this session's frames need be durable: a window whose
		// events a Flush made durable already ends without a sync, and
		// one that did cut waits for no other session's frames.
		if end := h.placedEnd(); end > h.db.durablePos() {
			if err = h.db.log.Sync(end); err != nil {
				err = sessionErr(h.ID(), "flush", err)
			}
		}
	}
	h.db.metrics.windowFlushes.Add(1)
	if err != nil {
		h.db.metrics.windowFlushErrors.Add(1)
	}
	return err
}

func (h *Handle) flush(ctx context.Context) error {
	if err := h.prepareFlush(ctx); err != nil {
		return err
	}
	if err := h.db.sync(); err != nil {
		return sessionErr(h.ID(), "flush", err)
	}
	return nil
}

// prepareFlush appends what Enqueue buffered and materializes a pending
// session, without syncing.
func (h *Handle) prepareFlush(ctx context.Context) error {
	return h.front.WriteOut(ctx, "flush", nil)
}

// closeFlush is DB.Close's flush of one write handle: drain the
// write-behind buffer and frame the open events, except that a creator
// that never appended is left unwritten (its session vanishes, as when the
// handle is closed).
func (h *Handle) closeFlush() error {
	return h.front.WriteOut(context.Background(), "close", func() bool {
		h.db.mu.Lock()
		defer h.db.mu.Unlock()
		return h.s.pending && h.s.next == 0
	})
}

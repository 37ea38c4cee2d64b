package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
)

// Front is the part of a session handle that is the same on every backend:
// the handle's identity and state (open or closed), the checks every write
// passes (the handle's access, the backend's Writable, the contract's
// CheckBatch), write-behind (Enqueue) in front of Append, the read's
// checks (CheckRead, Observe), and Close's protocol. A backend's handle
// holds a Front, initialized by Init, forwards its public methods to it,
// and gives it a Writer: the steps that are the backend's own.
//
// A Front serializes a handle's writes: Append, Enqueue, the write-out of
// Flush and Close run one at a time, in call order, and so do the Writer's
// methods they call.
type Front struct {
	id     string
	hdr    Header
	inh    uint64
	access Access
	w      Writer
	cfg    FrontConfig

	mu       sync.Mutex // held over the Writer's calls; guards the fields below
	closed   bool
	closeErr error         // what the first Close returned, for the next ones
	behind   handle.Behind // Enqueue's write-behind

	seen atomic.Uint64 // the longest log a read through the handle saw

	surface SurfaceChecker // a write handle's, when FrontConfig.Surface is set; guarded by mu

	// window is the durability window (FrontConfig.Flush): armed by the
	// first event handed to Append or Enqueue after the last one ended,
	// or by a failed window's retry; nil while none is open. Guarded by
	// mu.
	window handle.Timer

	// The failure rule (Flush, NotDurableError), guarded by mu. durable is
	// the seq after the last event a flush of the handle made durable
	// (set from the stored log at the first hand-over: started). A failed
	// write-out or flush sets failed, its cause, and failedAt, what had
	// been handed over by then: Append and Enqueue refuse until a flush
	// that began at or past failedAt succeeds. retry is the back-off of
	// the window's retries while failed.
	durable  uint64
	started  bool
	failed   error
	failedAt uint64
	retry    time.Duration
}

// maxRetry bounds the back-off of a failed window's retries.
const maxRetry = 5 * time.Second

// SurfaceChecker is the check of a session's log as a whole that
// FrontConfig.Surface turns on (the engine's is recovery.SurfaceChecker,
// the v3 surface rules): it follows the log from seq 0.
type SurfaceChecker interface {
	// Check takes evs, the events that follow those it took, if they
	// keep its rules; else it returns an error naming the first that
	// does not (the engine's: a *recovery.SurfaceError) and takes none.
	Check(evs ...event.Event) error
	// Undo takes back the batch the last successful Check took (its
	// write failed).
	Undo()
}

// Writer is a backend's side of a write handle. A Front calls its methods
// with its lock held (Next too), never two at a time.
type Writer interface {
	// Writable returns nil while the handle may write: its lease holds and
	// no earlier write failed it. The Front returns the error in a
	// *SessionError naming the operation.
	Writable() error
	// Next returns the session's next seq: stored and staged events.
	Next() uint64
	// Check is the backend's check of a batch beyond the contract's (what
	// its storage can hold), or nil.
	Check(evs []event.Event) error
	// Stage takes a checked batch into the session's open events, and
	// reports whether enough is open to write it out now. The events are
	// the store's own copies (the Front's, or the write-behind buffer's:
	// no caller holds them), for the backend to keep as they are.
	Stage(evs []event.Event) (full bool, err error)
	// Cut writes the open events out, with the session's header first if
	// it was never written. It promises no durability.
	Cut(ctx context.Context) error
}

// BehindCutter is a Writer that can write its open events out in the
// background: Append's write-out of a full batch calls CutBehind instead
// of Cut, and returns while the frames are encoded and written, so that
// the caller checks and stages its next batch meanwhile. The backend's
// next Cut, CutBehind and the end of the handle wait for such a write;
// its error is CutBehind's or Cut's to report (the events stay open, so
// the next Cut writes them again). The events stay readable throughout.
type BehindCutter interface {
	CutBehind(ctx context.Context) error
}

// FrontConfig is the write-behind configuration of a Front; see
// handle.WriteBehindConfig.
type FrontConfig struct {
	// Catalog, if set, is checked on every event appended to a session of
	// the current format: a type it does not know (and that is not
	// ignorable) or a retired shape fails the batch with an
	// *UnsupportedEventError and nothing is stored, since no read with
	// that catalog could return the event. (Only an import writes a
	// session of an older format, after its migration's checks; reads
	// apply the catalog to its events migrated.)
	Catalog *event.Catalog
	// Reload, if set, is called once when the catalog refuses an appended
	// event: it reports whether the catalog learned types since (another
	// process recorded them), and the check then runs again.
	Reload func() bool
	// Surface, if set, makes a write handle check every appended or
	// enqueued batch with a checker it returns (of the log from seq 0),
	// after every other check: a batch it refuses fails whole, with its
	// error in a *SessionError, and nothing is stored. The write open
	// feeds the checker the stored log (CheckSurfaceLog).
	Surface func() SurfaceChecker
	// Flush, if set, is the backend's flush of the handle (write the open
	// events out and make them durable). The Front calls it at the end of
	// every durability window: the first event handed to Append or
	// Enqueue after the last window ended opens one of Window, so that no
	// event stays only in memory longer than Window plus one flush.
	// Its error is logged and fails the handle (NotDurableError: the
	// host's next Append or Enqueue returns it) until a flush succeeds;
	// the events stay the session's, and the window is tried again
	// (backing off) while the backend can write. It must not be the
	// handle's public Flush (Front.Flush): the Front records the
	// window's outcome itself. Nil: only the host's Flush makes events
	// durable (the backend's flush-only option).
	Flush func(ctx context.Context) error
	// Window is the write-behind batching window of Enqueue and the
	// durability window of Flush.
	Window    time.Duration
	Logger    *slog.Logger
	AfterFunc func(d time.Duration, f func()) handle.Timer
	// Stats, if set, counts the handle's write-behind with the backend's
	// other handles (handle.Stats).
	Stats *handle.Stats
}

// Init sets up f for a handle on session id (header hdr, inh inherited
// events) with access; w is nil for a read handle.
func (f *Front) Init(id string, hdr Header, inh uint64, access Access, w Writer, cfg FrontConfig) {
	f.id, f.hdr, f.inh, f.access, f.w, f.cfg = id, hdr, inh, access, w, cfg
	if w != nil && cfg.Surface != nil {
		f.surface = cfg.Surface()
	}
}

// CheckSurfaceLog is a write open's feed of the stored log (n events,
// read in chunks through read, a handle's Read) to the handle's surface
// checker, if FrontConfig.Surface gave it one: a stored event that breaks
// its rules fails the open with its error in a *SessionError (op "open").
// Call it once, before the handle's first append.
func (f *Front) CheckSurfaceLog(ctx context.Context, n uint64, read func(ctx context.Context, offset, limit int) ([]event.Event, error)) error {
	if f.surface == nil {
		return nil
	}
	const chunk = 8192
	for off := uint64(0); off < n; off += chunk {
		evs, err := read(ctx, int(off), chunk)
		if err != nil {
			return err
		}
		f.mu.Lock()
		err = f.surface.Check(evs...)
		f.mu.Unlock()
		if err != nil {
			return sessionErr(f.id, "open", err)
		}
	}
	return nil
}

// ID returns the session ID.
func (f *Front) ID() string { return f.id }

// Header returns the session header, fixed when the handle opened.
func (f *Front) Header() Header { return f.hdr }

// InheritedEventCount returns the length of a seeded session's inherited
// prefix (0 for an unseeded one).
func (f *Front) InheritedEventCount() uint64 { return f.inh }

// Access returns Read or Write.
func (f *Front) Access() Access { return f.access }

// SetInherited corrects the inherited count of a handle on a session read
// migrated from an older format (the migration may move the marker), once
// the backend knows it; called before the handle is returned.
func (f *Front) SetInherited(n uint64) { f.inh = n }

// Err wraps err in a *SessionError naming the handle's session and op,
// unless it is one already.
func (f *Front) Err(op string, err error) error {
	if err == nil {
		return nil // (before se, which escapes: no allocation per call)
	}
	var se *SessionError
	if errors.As(err, &se) {
		return err
	}
	return sessionErr(f.id, op, err)
}

// CheckRead is the check before a read: ErrHandleClosed, or an offset
// that is not a non-negative integer (ErrInvalidArgument). On a write
// handle it then appends what Enqueue buffered (as an Append does first),
// so that the handle reads its own enqueued events as it reads its
// appended ones; that append's error is returned.
func (f *Front) CheckRead(ctx context.Context, offset int) error {
	f.mu.Lock()
	closed := f.closed
	wb := f.behind.Buffer()
	f.mu.Unlock()
	if closed {
		return sessionErr(f.id, "read", ErrHandleClosed)
	}
	if offset < 0 {
		return sessionErr(f.id, "read", fmt.Errorf("%w: offset %d must be a non-negative integer", ErrInvalidArgument, offset))
	}
	if f.access == Write {
		if err := handle.DrainPending(ctx, wb); err != nil {
			return f.Err("read", err)
		}
	}
	return nil
}

// CheckSeeds is a read's check of the events it returns against the seed
// marker rules (docs/EVENTS.md, Seeded sessions), as a write open checks
// the whole log: a seeded session has its tagged end-seed marker at its
// inherited count and nowhere else, an unseeded one has none. It returns
// an error wrapping ErrSeed naming the seq.
func (f *Front) CheckSeeds(evs []event.Event) error {
	return checkSeeds(f.id, "read", f.hdr.IsSeeded, f.inh, evs)
}

// Len returns the session's length as the handle knows it. On a write
// handle it is the seq the next Append (or Enqueue) must carry: every
// stored, appended and enqueued event counts. On a read handle it is the
// length of the longest log a read through it returned (0 before the
// first read).
func (f *Front) Len() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w != nil {
		return f.behind.Next(f.w.Next())
	}
	return f.seen.Load()
}

// Observe is a read's check that the log never shrinks below a length
// the handle has seen (a store that lost acknowledged events): it records
// that the read saw n events, or returns an error if n is shorter.
func (f *Front) Observe(n uint64) error {
	for {
		old := f.seen.Load()
		if n < old {
			return fmt.Errorf("stored log shrank below a previously observed prefix (%d < %d events)", n, old)
		}
		if n == old || f.seen.CompareAndSwap(old, n) {
			return nil
		}
	}
}

// writable is called with f.mu held.
func (f *Front) writable(op string) error {
	if f.closed {
		return sessionErr(f.id, op, ErrHandleClosed)
	}
	if f.access != Write {
		return sessionErr(f.id, op, ErrReadOnly)
	}
	if err := f.w.Writable(); err != nil {
		// (A lost lease or a poisoned store: what the handle holds
		// beyond durable cannot become durable any more.)
		return f.Err(op, f.notDurable(err))
	}
	return nil
}

// Append adds events to the session. The first seq must be the session's
// next seq and the seqs contiguous (*SeqError); every event must be valid
// (*event.InvalidError). A bad batch fails whole and writes nothing.
//
// When Append returns, the events are ordered and visible to every read
// started afterwards through this store; they are
// durable within the write-behind window (FrontConfig.Flush), and Flush
// waits for it. Events handed to Enqueue before are
// written first. An empty batch does nothing. Once the batch is taken, a
// failed write of its frames (a full disk) does not fail this Append (the
// events are the session's; a retried Append would take seqs already
// taken): it fails the handle, and the next Append or Enqueue returns a
// *NotDurableError and takes nothing until a flush succeeds (see
// NotDurableError).
func (f *Front) Append(ctx context.Context, evs ...event.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	if err := f.refused("append"); err != nil {
		f.mu.Unlock()
		return err
	}
	wb := f.behind.Buffer()
	f.mu.Unlock()
	if err := handle.DrainPending(ctx, wb); err != nil {
		return f.Err("append", err)
	}
	return f.appendNow(ctx, evs, false)
}

// appendNow is Append without draining the write-behind buffer (which
// calls it, with enqueued true: Enqueue gave its batches to the surface
// checker already).
func (f *Front) appendNow(ctx context.Context, evs []event.Event, enqueued bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable("append"); err != nil {
		if enqueued {
			f.fail(ctx, err) // (the buffer keeps the batch)
		}
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	if !enqueued {
		// (The write-behind buffer's own batches go on while the handle
		// has failed: they were handed over before, and a flush's retry
		// drains them.)
		if err := f.refused("append"); err != nil {
			return err
		}
		f.start()
	}
	if err := f.check("append", evs, f.w.Next(), enqueued); err != nil {
		if enqueued {
			f.fail(ctx, err)
		}
		return err
	}
	if !enqueued {
		evs = event.CloneBatch(evs) // (the write-behind buffer's are copies already)
	}
	full, err := f.w.Stage(evs)
	if err != nil {
		if !enqueued && f.surface != nil {
			f.surface.Undo() // nothing was stored
		}
		if enqueued {
			f.fail(ctx, err)
		}
		return f.Err("append", err)
	}
	if !enqueued {
		// (Enqueue opened a window for its events: the flush at its end
		// drains the write-behind buffer.)
		f.armWindow()
	}
	if full {
		// The events are the session's now: a failed write of their
		// frames (a full disk) leaves them open, and the next Cut (a
		// Flush's) writes them or returns the error. Not this call's
		// error: the caller (the write-behind buffer, or a host that
		// retries an Append) would append them again, at seqs taken.
		cut := f.w.Cut
		if b, ok := f.w.(BehindCutter); ok {
			cut = b.CutBehind
		}
		if err := cut(ctx); err != nil {
			// The host's next call hears of it (NotDurableError).
			f.fail(ctx, err)
			if f.cfg.Logger != nil {
				f.cfg.Logger.Warn("seglog: writing a session's frames failed; its next flush writes them again", "session", f.id, "error", err)
			}
		}
	}
	return nil
}

// armWindow opens a durability window if none is open (FrontConfig.
// Flush): events were just handed over. Called with f.mu held.
func (f *Front) armWindow() {
	if f.cfg.Flush == nil || f.window != nil || f.closed {
		return
	}
	f.window = f.afterFunc()(f.cfg.Window, f.windowEnd)
}

// windowEnd ends a durability window: events handed over from here on
// open the next one, and the backend's flush makes everything handed over
// so far durable. A handle closed meanwhile has flushed at its Close. A
// flush that fails marks the handle failed (NotDurableError: the host's
// next Append or Enqueue hears of it) and, while the handle can still
// write (a full disk, not a poisoned store or a lost lease), is tried
// again after a back-off (the window, doubled at each failure up to
// maxRetry), so that the events are written once space returns even if
// the host never flushes.
func (f *Front) windowEnd() {
	f.mu.Lock()
	f.window = nil
	if f.closed {
		f.mu.Unlock()
		return
	}
	mark := f.handedOver()
	f.mu.Unlock()
	ctx := context.Background()
	err := f.cfg.Flush(ctx)
	f.mu.Lock()
	f.flushed(ctx, mark, err)
	if f.failed != nil && !f.closed && f.window == nil && f.w.Writable() == nil {
		f.retry = min(max(2*f.retry, f.cfg.Window), maxRetry)
		f.window = f.afterFunc()(f.retry, f.windowEnd)
	}
	f.mu.Unlock()
	if err != nil && !errors.Is(err, ErrHandleClosed) && !errors.Is(err, ErrClosed) && f.cfg.Logger != nil {
		f.cfg.Logger.Warn("seglog: a write-behind window's flush failed; the session's next Append, Enqueue or Flush returns the error until a flush succeeds", "session", f.id, "error", err)
	}
}

func (f *Front) afterFunc() func(d time.Duration, fn func()) handle.Timer {
	if f.cfg.AfterFunc != nil {
		return f.cfg.AfterFunc
	}
	return func(d time.Duration, fn func()) handle.Timer { return time.AfterFunc(d, fn) }
}

// handedOver returns the seq after every event handed to the handle:
// stored, staged and enqueued. Called with f.mu held, on a write handle.
func (f *Front) handedOver() uint64 { return f.behind.Next(f.w.Next()) }

// start records, at the first hand-over, that the stored log is durable
// (a write open finds only durable events). Called with f.mu held.
func (f *Front) start() {
	if !f.started {
		f.durable, f.started = f.w.Next(), true
	}
}

// fail marks the handle failed with err, the error of a write-out or
// flush of what was handed over (a cancelled ctx, the caller's doing,
// and a closed handle or store do not count). Called with f.mu held.
func (f *Front) fail(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrHandleClosed) || errors.Is(err, ErrClosed) {
		return
	}
	f.start()
	if f.failed == nil {
		f.failed = f.cause(err)
	}
	f.failedAt = max(f.failedAt, f.handedOver())
}

// flushed records the outcome of a flush that began when mark events had
// been handed over: on success they are durable, and a failure recorded
// before it began is over. Called with f.mu held, on a write handle.
func (f *Front) flushed(ctx context.Context, mark uint64, err error) {
	if err != nil {
		f.fail(ctx, err)
		return
	}
	f.started = true
	f.durable = max(f.durable, mark)
	if f.failed != nil && mark >= f.failedAt {
		f.failed, f.failedAt, f.retry = nil, 0, 0
	}
}

// notDurable returns err as a NotDurableError if the handle holds events
// not known durable (or failed), else err. Called with f.mu held.
func (f *Front) notDurable(err error) error {
	var nd *NotDurableError
	if errors.As(err, &nd) {
		return err
	}
	if f.failed == nil && (!f.started || f.handedOver() <= f.durable) {
		return err
	}
	return &NotDurableError{Seq: f.durable, Err: f.cause(err)}
}

// cause returns err without the wrappers a NotDurableError of the handle
// puts around it again: a *SessionError naming this session (the
// NotDurableError goes in one naming the call) and a NotDurableError.
func (f *Front) cause(err error) error {
	var se *SessionError
	if errors.As(err, &se) && se.ID == f.id {
		err = se.Err
	}
	var nd *NotDurableError
	if errors.As(err, &nd) {
		err = nd.Err
	}
	return err
}

// refused is the failure rule's check before a hand-over (Append,
// Enqueue): the handle's failure, until a flush succeeds. Called with
// f.mu held.
func (f *Front) refused(op string) error {
	if f.failed == nil {
		return nil
	}
	if err := f.writable(op); err != nil {
		return err // (a lost lease or a poisoned store first: for good)
	}
	return sessionErr(f.id, op, &NotDurableError{Seq: f.durable, Err: f.failed})
}

// Flush runs flush, the backend's flush of the handle (write out what is
// open and make it durable), under the failure rule: its success makes
// durable what was handed over before it began, and ends a failure
// recorded before that; its failure marks the handle failed
// (NotDurableError), as a window's does. Its error is returned as it is.
func (f *Front) Flush(ctx context.Context, flush func(ctx context.Context) error) error {
	m := f.BeginFlush()
	err := flush(ctx)
	f.EndFlush(ctx, m, err)
	return err
}

// FlushMark is what BeginFlush records for EndFlush.
type FlushMark struct {
	n     uint64
	write bool
}

// BeginFlush and EndFlush are Flush in two parts, for a backend that
// flushes many handles with one sync (the engine's DB.Flush): call
// BeginFlush before the handle's write-out, and EndFlush with the
// outcome once the sync is done.
func (f *Front) BeginFlush() FlushMark {
	if f.w == nil {
		return FlushMark{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return FlushMark{n: f.handedOver(), write: true}
}

// EndFlush records the outcome of a flush begun with BeginFlush.
func (f *Front) EndFlush(ctx context.Context, m FlushMark, err error) {
	if !m.write {
		return
	}
	f.mu.Lock()
	f.flushed(ctx, m.n, err)
	f.mu.Unlock()
}

// check is the contract's check of a batch that starts at next, then the
// backend's, then the surface checker's (which takes the batch); op
// ("append" or "enqueue") names the operation in errors. With drained (the
// write-behind buffer's own copies of events Enqueue checked), neither
// each event's validity nor the surface is checked again (the seqs, the
// catalog and the backend's check are).
func (f *Front) check(op string, evs []event.Event, next uint64, drained bool) error {
	// (The event JSON scan was a third of a turn's CPU in the agent-host
	// workload, twice for every chunk.)
	if err := checkBatch(f.id, op, evs, next, !drained); err != nil {
		return err
	}
	// The catalog is the current format's: a session stored in an older
	// one (an import's, whose events the migration checked) is checked by
	// reads, which apply it to the events migrated.
	if c := f.cfg.Catalog; c != nil && f.hdr.Version >= FormatVersion {
		reloaded := false
		for i := range evs {
			err := c.Check(&evs[i])
			if err != nil && !reloaded && f.cfg.Reload != nil {
				reloaded = true
				if f.cfg.Reload() {
					err = c.Check(&evs[i])
				}
			}
			if err != nil {
				return sessionErr(f.id, op, err)
			}
		}
	}
	if err := f.w.Check(evs); err != nil {
		return f.Err(op, err)
	}
	if !drained && f.surface != nil {
		if err := f.surface.Check(evs...); err != nil {
			return sessionErr(f.id, op, err)
		}
	}
	return nil
}

// Enqueue hands events to the write-behind buffer without waiting for
// I/O: the first pending event opens a batching window (the backend's
// WriteBehindWindow) that later events do not extend; then the batch is
// appended (and, with FrontConfig.Flush, made durable) in the
// background. Seqs and shapes are checked here, so a
// background write fails only on I/O; such a failure keeps the events in
// order, pauses the automatic path, logs a warning and fails the handle:
// the next Append or Enqueue returns a *NotDurableError and takes nothing
// until a flush succeeds, and the next Flush retries. An Append after Enqueue first appends
// what is buffered, so the two can be mixed.
func (f *Front) Enqueue(evs ...event.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable("enqueue"); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	if err := f.refused("enqueue"); err != nil {
		return err
	}
	f.start()
	taken := false // the surface checker took the batch
	err := f.behind.Enqueue(handle.WriteBehindConfig[event.Event]{
		Write:     func(ctx context.Context, evs []event.Event) error { return f.appendNow(ctx, evs, true) },
		Window:    f.cfg.Window,
		Name:      f.id,
		Logger:    f.cfg.Logger,
		AfterFunc: f.cfg.AfterFunc,
		Stats:     f.cfg.Stats,
	}, f.w.Next(), evs, func(evs []event.Event, next uint64) error {
		err := f.check("enqueue", evs, next, false)
		taken = err == nil
		return err
	})
	if err != nil && taken && f.surface != nil {
		f.surface.Undo() // checked, but not buffered
	}
	if err == nil {
		f.armWindow()
	}
	if errors.Is(err, handle.ErrClosed) {
		return sessionErr(f.id, "enqueue", ErrHandleClosed)
	}
	return err
}

// WriteOut is a flush's first part: it appends what Enqueue buffered and
// writes the open events out (Writer.Cut), or, if skip says so (called
// with the lock held), nothing more. The backend then makes it durable.
// op names the operation in errors.
func (f *Front) WriteOut(ctx context.Context, op string, skip func() bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	if err := f.writable(op); err != nil {
		f.mu.Unlock()
		return err
	}
	wb := f.behind.Buffer()
	f.mu.Unlock()
	if wb != nil {
		if err := wb.Drain(ctx); err != nil {
			return f.Err(op, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writable(op); err != nil {
		return err
	}
	if skip != nil && skip() {
		return nil
	}
	return f.Err(op, f.w.Cut(ctx))
}

// Close ends the handle: it closes the write-behind buffer (appending what
// it holds), marks the handle closed, and calls finish with the lock held
// and the drain's error (nil if it succeeded): the backend's end of the
// handle (write what is open, make it durable, release the lease), whose
// error Close returns. Later calls on the handle fail with
// ErrHandleClosed; Close is idempotent and returns the first call's error.
func (f *Front) Close(finish func(drained error) error) error {
	f.mu.Lock()
	if f.closed {
		defer f.mu.Unlock()
		return f.closeErr
	}
	wb := f.behind.Buffer()
	f.mu.Unlock()
	var drained error
	if wb != nil {
		if err := wb.Close(context.Background()); err != nil {
			drained = sessionErr(f.id, "close", fmt.Errorf("close failed to drain: %w", err))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closeErr
	}
	f.closed = true
	f.stopWindow()
	f.closeErr = finish(drained)
	return f.closeErr
}

// Dropped is the error of a write handle's Close that cannot write (its
// ownership was lost) while it holds events: staged, those the backend
// holds unwritten, and those the write-behind buffer could not append
// (its Close keeps them); nil if there are none. Call it from Close's
// finish (with the Front's lock held).
func (f *Front) Dropped(staged int) error {
	n := staged
	if wb := f.behind.Buffer(); wb != nil {
		n += wb.Pending()
	}
	if n == 0 {
		return nil
	}
	return sessionErr(f.id, "close", &DroppedError{Dropped: n})
}

// MarkClosed closes the handle without writing anything: a write open
// that failed after the handle was made.
func (f *Front) MarkClosed() {
	f.mu.Lock()
	f.closed = true
	f.stopWindow()
	f.mu.Unlock()
}

// stopWindow stops the durability window's timer, if one is armed: the
// handle closed (its Close flushes what it holds). Called with f.mu held.
func (f *Front) stopWindow() {
	if f.window != nil {
		f.window.Stop()
		f.window = nil
	}
}

// CloseBuffer closes the write-behind buffer, if any, dropping nothing it
// could still write: what a store's Close does to handles it revoked.
func (f *Front) CloseBuffer() {
	f.mu.Lock()
	wb := f.behind.Buffer()
	f.mu.Unlock()
	if wb != nil {
		wb.Close(context.Background())
	}
}

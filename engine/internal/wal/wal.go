package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/internal/bufpool"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// Log is a writing process's side of the shared log (docs/MULTIPROCESS.md,
// Many processes, Appending). Every process appends to the same active
// segment: under the append lock it reads the tail from shm, writes its
// frames there in one pwrite, registers them and moves the tail. It never
// fdatasyncs under the lock: Sync, outside it, fdatasyncs the segment for
// every frame placed so far, by any process, and raises durable.
//
// In the process, placements and syncs are both group commits: callers
// queue their frames and one of them places every queued frame at once;
// callers wait for their frames to be durable and one of them syncs for
// all.
type Log struct {
	// TestHookGrow, if set, runs in Grow once it decided to grow the
	// file, before the first zero is written (tests only).
	TestHookGrow func()
	// TestHookSync, if set, runs at the start of every Sync, after the
	// placements it is to cover (tests only).
	TestHookSync func()

	cfg Config
	sh  Shared

	// The log's locks, each with what it guards. In the engine's lock
	// order (engine/doc.go): growth, the DB's Config.AppendMu, queue,
	// syncer, created, files.

	// queue: Place's group commit. The mutex guards the placements
	// queued and whether a leader is placing (it places without the
	// mutex).
	queue struct {
		sync.Mutex
		cond    sync.Cond    // on the mutex: a leader placed its batch, or a sync ended
		pending []*Placement // queued, not taken by a leader yet
		leading bool         // a leader is placing a batch
	}

	// files: the segment files open for writing. The mutex guards the
	// maps (writes to a file take no lock).
	files struct {
		sync.Mutex
		byID     map[uint64]vfs.File // by segment ID
		versions map[uint64]int      // their format versions, once read
	}
	// tailVersion: the format version of the segment of the last
	// placement (0: not known yet)
	tailVersion atomic.Int32

	// created: one creation of a segment at a time in this process (the
	// byte lock LockPrepare is per open file: it keeps other processes
	// out, not this one's goroutines).
	created struct {
		sync.Mutex
		// newest is the newest segment known to exist (created or
		// checked): raised under the mutex, read without it
		newest atomic.Uint64
	}

	// syncer: one sync at a time in this process; the others wait for
	// it. The mutex guards running, released and waiting.
	syncer struct {
		sync.Mutex
		cond    sync.Cond // on the mutex: the sync in progress ended
		running bool      // a sync is in progress
		// inSync: the syncer holds LockSync: placers leave their frames
		// to it (atomic: set and read without the mutex)
		inSync atomic.Bool
		// waiting: syncs waiting for the one in progress; released: how
		// many the last one released (the syncer yields once before the
		// next fdatasync when it released several)
		released, waiting int
	}

	// chunk: placeLocked's list of the placements in a write, kept
	// for the next one (placements run one at a time: Config.AppendMu)
	chunk []*Placement

	// placedEnd is the position after the last frame this process placed
	placedEnd atomic.Uint64
	// alone: no other process wrote the store when last looked (each
	// checkpoint tick): syncs skip LockSync, which only groups the
	// fdatasyncs of several processes
	alone atomic.Bool
	// growth: one growth of the active segment at a time in this
	// process (Grow).
	growth struct {
		sync.Mutex
		// extent is how far the active segment's file is known to
		// reach (position: segment and size), as the last growth saw it:
		// stored under the mutex, read without it
		extent atomic.Uint64
		// start is where the tail was (position) when this process first
		// looked at the active segment's growth: what it placed in the
		// segment since is the write volume the room follows
		start atomic.Uint64
	}
}

// Placed is where a frame went.
type Placed struct {
	Seg uint64
	Loc segment.Location
}

// Placement is one caller's frames: they go into the log contiguously, in
// order (a roll may split them between two segments).
type Placement struct {
	Frames []*segment.Encoded
	// Register records Frames[first:first+len(at)] at their places, with
	// Config.Locker held, before any other process can see them; with
	// Whole it is called only once every frame is placed.
	Register func(at []Placed, first int)
	Whole    bool

	at      []Placed // where Frames[:len(at)] went
	at1     [1]Placed
	written int // how many of them are written
	regd    int // how many of them are registered
	err     error
	done    bool
}

// Written returns how many of p's frames were written (after Place).
func (p *Placement) Written() int { return p.written }

// New returns the log of a writing process, as cfg describes it.
func New(cfg Config) *Log {
	a := &Log{cfg: cfg, sh: cfg.Shared}
	a.files.byID = map[uint64]vfs.File{}
	a.files.versions = map[uint64]int{}
	a.queue.cond.L = &a.queue.Mutex
	a.syncer.cond.L = &a.syncer.Mutex
	return a
}

// Place writes p's frames at the log's tail and registers them. It
// returns once they are placed (not yet durable: see Sync). On an error,
// the frames it could place are registered (p.at) and the others were not
// written.
func (a *Log) Place(p *Placement) error {
	a.queue.Lock()
	a.queue.pending = append(a.queue.pending, p)
	for !p.done {
		if a.queue.leading || a.syncer.inSync.Load() {
			// A sync in progress: its frames are on their way to the disk,
			// and what queues meanwhile goes with the next one; the syncer
			// wakes this placer when it is done, if no other placed it.
			a.queue.cond.Wait()
			continue
		}
		a.lead(a.syncReleased() > 1)
	}
	a.queue.Unlock()
	return p.err
}

// drain places what is queued, unless a placement is in progress (its
// leader places the rest). The syncer calls it before it reads the tail,
// so that one fdatasync covers the frames of every flusher that queued
// meanwhile.
func (a *Log) drain() {
	a.queue.Lock()
	if !a.queue.leading && len(a.queue.pending) > 0 {
		a.lead(false)
	}
	a.queue.Unlock()
}

// lead places the queued frames as their leader. Called and returns with
// a.queue held.
func (a *Log) lead(yield bool) {
	a.queue.leading = true
	if yield {
		// Group placement under load: the last sync released several
		// flushers, likely about to queue their frames. Let them in, so
		// that one pwrite (and one pair of lock calls) places them all.
		a.queue.Unlock()
		runtime.Gosched()
		a.queue.Lock()
	}
	batch := a.queue.pending
	a.queue.pending = nil
	a.queue.Unlock()
	a.placeBatch(batch)
	a.queue.Lock()
	for _, p := range batch {
		p.done = true
	}
	a.queue.leading = false
	a.queue.cond.Broadcast()
}

// syncReleased is how many waiters the last sync released.
func (a *Log) syncReleased() int {
	a.syncer.Lock()
	defer a.syncer.Unlock()
	return a.syncer.released
}

// placeBatch places the frames of batch under LockAppend.
func (a *Log) placeBatch(batch []*Placement) {
	err := a.placeLocked(batch)
	for _, p := range batch {
		if p.err == nil && len(p.at) < len(p.Frames) {
			p.err = err
		}
	}
}

func (a *Log) placeLocked(batch []*Placement) error {
	if err := a.cfg.Poisoned(); err != nil {
		return err
	}
	a.cfg.AppendMu.Lock()
	defer a.cfg.AppendMu.Unlock()
	if err := a.sh.Lock(LockAppend); err != nil {
		return fmt.Errorf("engine: taking the append lock: %w", err)
	}
	defer a.sh.Unlock(LockAppend)
	seg, off, err := a.tailLocked()
	if err != nil {
		return err
	}
	start := off
	total := 0
	for _, p := range batch {
		for _, e := range p.Frames {
			total += int(e.Size())
		}
	}
	buf := placeBufs.Get(total)
	defer func() { placeBufs.Put(buf) }()
	chunk := a.chunk[:0] // placements with frames in buf
	defer func() { clear(chunk[:cap(chunk)]); a.chunk = chunk[:0] }()
	var events uint64
	var tally Tally // the frames in buf, for DB.Metrics
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		end := position(seg, start+int64(len(buf)))
		a.sh.Word(Placing).Store(end)
		f, err := a.file(seg)
		if err == nil {
			_, err = f.WriteAt(buf, start)
		}
		if err != nil {
			// Nothing of this write counts: the tail stays before it, and
			// the next placement zeroes what it may have left.
			for _, p := range chunk {
				p.at = p.at[:p.written]
			}
			return fmt.Errorf("engine: writing frames to %s at %d: %w", a.segPath(seg), start, err)
		}
		a.cfg.Locker.Lock()
		for _, p := range chunk {
			for _, at := range p.at[p.written:] {
				a.cfg.OnWrite(at.Seg, at.Loc.Offset, at.Loc.Size)
			}
			p.written = len(p.at)
			if p.Register != nil && p.regd < len(p.at) && (!p.Whole || len(p.at) == len(p.Frames)) {
				p.Register(p.at[p.regd:], p.regd)
				p.regd = len(p.at)
			}
		}
		a.cfg.Locker.Unlock()
		a.sh.Word(Frames).Add(events)
		a.sh.Word(Tail).Store(end)
		a.placedEnd.Store(end)
		a.cfg.Written(&tally)
		start, buf, chunk, events = start+int64(len(buf)), buf[:0], chunk[:0], 0
		return nil
	}
	ver := a.Version(seg)
	for _, p := range batch {
		for i, e := range p.Frames {
			e = e.Fit(ver)
			n := e.Size()
			if start+int64(len(buf)) > segment.HeaderSize && start+int64(len(buf))+n > a.cfg.SegmentSize(seg) {
				if err := write(); err != nil {
					return err
				}
				var err error
				if seg, err = a.roll(seg, start); err != nil {
					return err
				}
				start = segment.HeaderSize
				ver = a.Version(seg)
				e = e.Fit(ver) // (a segment takes its first frame whatever its size)
				n = e.Size()
			}
			p.Frames[i] = e
			if len(chunk) == 0 || chunk[len(chunk)-1] != p {
				chunk = append(chunk, p)
			}
			base := int64(segment.HeaderSize)
			if dseg, doff := splitPosition(a.sh.Word(Durable).Load()); dseg == seg {
				base = min(doff, start)
			}
			if p.at == nil && len(p.Frames) == 1 {
				p.at = p.at1[:0] // (most placements are of one frame)
			}
			p.at = append(p.at, Placed{Seg: seg, Loc: segment.Location{Offset: start + int64(len(buf)), Size: n}})
			buf = e.AppendFrame(buf, base)
			tally.Add(e)
			if e.Events() {
				events++
			}
		}
	}
	if err := write(); err != nil {
		return err
	}
	a.tailVersion.Store(int32(ver))
	// The preparer is woken only when it has work: the active segment's
	// file to grow, or (past half of it) the next segment to create. A
	// wake-up for nothing opened, stat'ed and closed the segment's file.
	next := start > a.cfg.SegmentSize(seg)/2 && a.created.newest.Load() <= seg
	if !a.cfg.NoPreallocate && (next || a.growDue(seg, start)) {
		select {
		case a.cfg.Kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// tailLocked returns the shared tail (segment and offset), read under
// the append lock, once it has cleared what a placer that died mid-write
// left past it (undoDead). Only from a whole shm: a cut one reads as zeros
// (one fstat, under the lock taken anyway), and so does one grown back or
// written over (no segment is 0).
func (a *Log) tailLocked() (uint64, int64, error) {
	seg, off := splitPosition(a.sh.Word(Tail).Load())
	placing := a.sh.Word(Placing).Load()
	if err := a.sh.Verify(); err != nil {
		return 0, 0, err
	}
	if seg == 0 {
		return 0, 0, a.sh.Wiped()
	}
	if placing > position(seg, off) {
		if err := a.undoDead(seg, off, placing); err != nil {
			return 0, 0, err
		}
	}
	return seg, off, nil
}

// placeBufs keeps the buffers placements lay their frames out in: a bulk
// load places a batch's frames (some 100 KiB) per call, and a fresh buffer
// each time was garbage for the collector to clear and return.
var placeBufs = bufpool.Pool{Max: 4 << 20}

// undoDead zeroes what a placer that died mid-write left past the tail
// (seg, off) up to placing, and makes the zeros durable, so that no frame
// of it can ever be read as part of the log. Called under LockAppend.
func (a *Log) undoDead(seg uint64, off int64, placing uint64) error {
	pseg, poff := splitPosition(placing)
	if pseg != seg { // (cannot be: placing moves to a new segment with the tail)
		poff = math.MaxInt64
	}
	f, err := a.file(seg)
	if err != nil {
		return err
	}
	size, err := f.Size()
	if err != nil {
		return err
	}
	if end := min(poff, size); end > off {
		if _, err := f.WriteAt(make([]byte, end-off), off); err != nil {
			return fmt.Errorf("engine: clearing a write cut short in %s at %d: %w", a.segPath(seg), off, err)
		}
		if err := f.Sync(); err != nil {
			return a.cfg.Poison(fmt.Errorf("%w: %s: %w", segment.ErrSyncFailed, a.segPath(seg), err))
		}
	}
	a.sh.Word(Placing).Store(position(seg, off))
	return nil
}

// roll seals segment seg, whose frames end at off, and moves the tail to
// the start of the next segment (created now, unless a process prepared
// it). Called under LockAppend. A failed fdatasync poisons the store.
func (a *Log) roll(seg uint64, off int64) (uint64, error) {
	f, err := a.file(seg)
	if err != nil {
		return 0, err
	}
	base := int64(segment.HeaderSize)
	if dseg, doff := splitPosition(a.sh.Word(Durable).Load()); dseg == seg {
		base = min(doff, off)
	}
	seal := segment.AppendSeal(nil, uint32(a.sh.Word(Frames).Load()), base)
	end := off + int64(len(seal))
	a.sh.Word(Placing).Store(position(seg, end))
	if _, err := f.WriteAt(seal, off); err != nil {
		return 0, fmt.Errorf("engine: sealing %s: %w", a.segPath(seg), err)
	}
	if err := f.Sync(); err != nil {
		return 0, a.syncFailed(seg, err)
	}
	if size, err := f.Size(); err == nil && size > end {
		// The zeros of a preallocated segment go.
		if err := f.Truncate(end); err != nil {
			return 0, fmt.Errorf("engine: trimming sealed %s: %w", a.segPath(seg), err)
		}
		if err := f.Sync(); err != nil {
			return 0, a.syncFailed(seg, err)
		}
	}
	next := seg + 1
	if err := a.Prepare(next, true); err != nil {
		return 0, fmt.Errorf("engine: roll to %s: %w", a.segPath(next), err)
	}
	a.tailVersion.Store(int32(a.Version(next)))
	p := position(next, segment.HeaderSize)
	a.sh.Word(Frames).Store(0)
	a.sh.Word(Tail).Store(p)
	a.sh.Word(Placing).Store(p)
	a.sh.Publish(p) // the sealed segment is durable, and the new one's header
	return next, nil
}

// RollNow seals the active segment, if it holds a frame, and starts the
// next: compaction makes the dead part of the active segment reclaimable.
func (a *Log) RollNow() error {
	a.cfg.AppendMu.Lock()
	defer a.cfg.AppendMu.Unlock()
	if err := a.sh.Lock(LockAppend); err != nil {
		return fmt.Errorf("engine: taking the append lock: %w", err)
	}
	defer a.sh.Unlock(LockAppend)
	seg, off, err := a.tailLocked()
	if err != nil {
		return err
	}
	if off <= segment.HeaderSize {
		return nil
	}
	_, err = a.roll(seg, off)
	return err
}

// syncFailed poisons the store after the fdatasync of segment seg failed.
func (a *Log) syncFailed(seg uint64, err error) error {
	return a.cfg.Poison(fmt.Errorf("%w: %s: %w", segment.ErrSyncFailed, a.segPath(seg), err))
}

// Prepare creates segment id if no process has yet, under LockPrepare
// (waiting for another process that is creating it, with wait; else
// giving up at once).
func (a *Log) Prepare(id uint64, wait bool) error {
	if wait {
		a.created.Lock()
	} else if !a.created.TryLock() {
		return nil
	}
	defer a.created.Unlock()
	if wait {
		if err := a.sh.Lock(LockPrepare); err != nil {
			return err
		}
	} else if ok, err := a.sh.TryLock(LockPrepare); err != nil || !ok {
		return err
	}
	defer a.sh.Unlock(LockPrepare)
	if a.created.newest.Load() >= id {
		return nil
	}
	path := a.segPath(id)
	if r, err := segment.OpenReader(a.cfg.FS, path); err == nil {
		h := r.Header()
		r.Close()
		if h.ID != id {
			return &segment.CorruptionError{Path: path, Offset: 0, Reason: fmt.Sprintf("segment header names segment %d", h.ID)}
		}
		raise(&a.created.newest, id)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	err := segment.Create(a.cfg.FS, path, id, a.cfg.CreateOptions(id))
	if errors.Is(err, segment.ErrSyncFailed) {
		// The directory may or may not hold the new segment.
		return a.cfg.Poison(err)
	}
	if err != nil {
		return err
	}
	raise(&a.created.newest, id)
	return nil
}

// PrepareNext creates the segment after the active one ahead of its roll.
// It waits until the active segment is half full: a store that writes
// little has no spare.
func (a *Log) PrepareNext() error {
	seg, off := splitPosition(a.sh.Word(Tail).Load())
	if a.created.newest.Load() > seg || off <= a.cfg.SegmentSize(seg)/2 {
		return nil
	}
	return a.Prepare(seg+1, false)
}

// growDue reports whether the file of the active segment seg, whose
// frames end at off, is to be grown ahead of them: its extent (as last
// seen), short of the segment's size, leaves less room past off than
// growWritten.
func (a *Log) growDue(seg uint64, off int64) bool {
	eseg, size := splitPosition(a.growth.extent.Load())
	return eseg != seg || size < a.cfg.SegmentSize(seg) && size-off < a.growWritten(seg, off)
}

// growWritten is what this process placed in segment seg, whose tail is
// at off, since it first looked at its growth (growth.start), at least
// half of PreallocateStart: the write volume the room follows. A growth
// is due once the room past the tail is less than that, and makes it
// three times that (at most doubling the file, or adding
// PreallocateStart). For a segment this process saw begin, that is the
// doubling of the file once the tail passes half of it, as before; for
// one whose file ends at its tail (trimmed by the last close:
// docs/DURABILITY.md, Preallocation), the room starts at 1.5 x
// PreallocateStart and follows the writes, not the size of the frames
// already there.
func (a *Log) growWritten(seg uint64, off int64) int64 {
	written := int64(0)
	if sseg, from := splitPosition(a.growth.start.Load()); sseg == seg && off > from {
		written = off - from
	}
	return max(a.cfg.PreallocateStart/2, written)
}

// Grow zero-fills the active segment's file ahead of its tail, in place,
// once the room past the tail is under what this process placed in the
// segment (growWritten): to three times that past the tail, at most
// twice the file (or PreallocateStart more) and the segment's size,
// fdatasynced, so that the data syncs that follow overwrite
// allocated blocks. It writes only past a clean tail, under LockAppend,
// never over a frame (docs/DURABILITY.md, Preallocation). A failed write-back
// or sync poisons the store.
func (a *Log) Grow() error {
	a.growth.Lock()
	defer a.growth.Unlock()
	seg, off := splitPosition(a.sh.Word(Tail).Load())
	limit := a.cfg.SegmentSize(seg)
	path := a.segPath(seg)
	f, err := a.cfg.FS.OpenReadWrite(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return err
	}
	a.growth.extent.Store(position(seg, size))
	if sseg, _ := splitPosition(a.growth.start.Load()); sseg != seg {
		a.growth.start.Store(position(seg, off))
	}
	w := a.growWritten(seg, off)
	if size >= limit || size-off >= w {
		return nil
	}
	target := min(limit, off+3*w, max(2*size, size+a.cfg.PreallocateStart))
	if a.TestHookGrow != nil {
		a.TestHookGrow()
	}
	from := size
	for size < target {
		n := min(int64(growChunk), target-size)
		ok, err := a.zeroAhead(seg, f, size, n)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if err := vfs.WriteBack(f, size, n); err != nil {
			return a.syncFailed(seg, err)
		}
		size += n
	}
	if size == from {
		return nil
	}
	if err := f.Sync(); err != nil {
		return a.syncFailed(seg, err)
	}
	a.growth.extent.Store(position(seg, size))
	return nil
}

// growChunk is how many zeros grow writes under one hold of LockAppend.
const growChunk = 256 << 10

// zeros is what grow writes (never written to).
var zeros = make([]byte, growChunk)

// zeroAhead writes n zeros at the end of segment seg's file, which is
// size bytes long, if the tail is still in seg and not past size, and no
// placement or seal was cut short there. It reports whether it wrote
// them.
func (a *Log) zeroAhead(seg uint64, f vfs.File, size, n int64) (bool, error) {
	if err := a.cfg.Poisoned(); err != nil {
		return false, err
	}
	a.cfg.AppendMu.Lock()
	defer a.cfg.AppendMu.Unlock()
	if err := a.sh.Lock(LockAppend); err != nil {
		return false, fmt.Errorf("engine: taking the append lock: %w", err)
	}
	defer a.sh.Unlock(LockAppend)
	// Only past a clean tail: a placement cut short or a seal whose roll
	// did not finish (placing past tail) is cleared by the next placement
	// first, and nothing is written after a seal.
	tail := a.sh.Word(Tail).Load()
	if tseg, off := splitPosition(tail); tseg != seg || off > size || a.sh.Word(Placing).Load() != tail {
		return false, nil
	}
	if now, err := f.Size(); err != nil || now != size {
		return false, err
	}
	if _, err := f.WriteAt(zeros[:n], size); err != nil {
		// Nothing past the tail counts: cut what the fill left (a full
		// disk), so that the file ends where it did.
		if terr := f.Truncate(size); terr != nil {
			return false, fmt.Errorf("engine: growing %s at %d: %w (and cutting it back: %v)", a.segPath(seg), size, err, terr)
		}
		return false, fmt.Errorf("engine: growing %s at %d: %w", a.segPath(seg), size, err)
	}
	return true, nil
}

// Version returns the format version of segment seg (0 if its header
// cannot be read).
func (a *Log) Version(seg uint64) int {
	f, err := a.file(seg)
	if err != nil {
		return 0
	}
	a.files.Lock()
	defer a.files.Unlock()
	if v, ok := a.files.versions[seg]; ok {
		return v
	}
	var b [segment.HeaderSize]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return 0
	}
	h, err := segment.DecodeHeader(a.segPath(seg), b[:])
	if err != nil {
		return 0
	}
	a.files.versions[seg] = h.Version
	return h.Version
}

// TailVersion returns the format version of the active segment (as of
// this process's last placement, or now): which codecs its frames may
// use. (A frame encoded for a newer one and placed in an older one is
// refitted there.)
func (a *Log) TailVersion() int {
	v := a.tailVersion.Load()
	if v == 0 {
		seg, _ := splitPosition(a.sh.Word(Tail).Load())
		v = int32(a.Version(seg))
		a.tailVersion.Store(v)
	}
	return int(v)
}

// file returns segment seg open for writing.
func (a *Log) file(seg uint64) (vfs.File, error) {
	a.files.Lock()
	defer a.files.Unlock()
	if f := a.files.byID[seg]; f != nil {
		return f, nil
	}
	f, err := a.cfg.FS.OpenReadWrite(a.segPath(seg))
	if err != nil {
		return nil, err
	}
	a.files.byID[seg] = f
	return f, nil
}

// Sync returns once everything before position target is durable: it
// fdatasyncs the active segment (for every frame any process placed before
// it read the tail) and raises durable, unless another sync did.
func (a *Log) Sync(target uint64) error {
	if a.TestHookSync != nil {
		a.TestHookSync()
	}
	for {
		if err := a.cfg.Poisoned(); err != nil {
			return err
		}
		if a.sh.Word(Durable).Load() >= target {
			return nil
		}
		a.syncer.Lock()
		if a.syncer.running {
			a.syncer.waiting++
			a.syncer.cond.Wait()
			a.syncer.waiting--
			a.syncer.Unlock()
			continue
		}
		a.syncer.running = true
		yield := a.syncer.released > 1
		a.syncer.Unlock()
		err := a.syncOnce(target, yield)
		a.syncer.Lock()
		a.syncer.running = false
		a.syncer.inSync.Store(false)
		a.syncer.released = a.syncer.waiting
		a.syncer.cond.Broadcast()
		a.syncer.Unlock()
		a.queue.Lock()
		a.queue.cond.Broadcast() // placers that waited for this sync
		a.queue.Unlock()
		if err != nil {
			return err
		}
	}
}

// syncWaitMax bounds a wait for another process's sync: its notify wakes
// the waiter at once, unless it died before it could (or is of an older
// build, which does not notify).
const syncWaitMax = time.Millisecond

// syncOnce fdatasyncs the segment at the tail and publishes the tail as
// durable, unless another process's sync covers target first.
func (a *Log) syncOnce(target uint64, yield bool) error {
	if yield {
		// Group commit under load: the last sync released several
		// waiters, likely about to place again. Let their frames in.
		runtime.Gosched()
	}
	if a.alone.Load() {
		a.syncer.inSync.Store(true)
		defer a.syncer.inSync.Store(false)
		return a.syncTail(false)
	}
	// Group commit across processes: one fdatasync at a time. While
	// another process syncs, this one sleeps until that sync is done
	// (notify) and stops waiting if it covered target (its flushers go
	// at once, not after the syncs queued before its own); if not, its
	// own sync covers what every process placed meanwhile.
	for {
		seq := a.sh.SyncSeq()
		ok, err := a.sh.TryLock(LockSync)
		if err != nil {
			return fmt.Errorf("engine: taking the sync lock: %w", err)
		}
		if ok {
			break
		}
		if a.sh.Word(Durable).Load() >= target {
			return nil
		}
		if err := a.sh.Lost(); err != nil {
			return err // (a lost shm's Wait returns at once)
		}
		a.sh.WaitSync(seq, syncWaitMax)
	}
	// From here this process's placers leave their frames to this sync
	// (while it waited for the lock they placed them themselves, so that
	// the other process's sync could cover them).
	a.syncer.inSync.Store(true)
	defer a.syncer.inSync.Store(false)
	return a.syncTail(true)
}

// syncTail places what is queued, then fdatasyncs the segment at the tail
// and publishes the tail as durable. With locked (the caller holds
// LockSync) it releases the lock before it publishes, so that the next
// process's sync can start before this one's waiters wake, and
// publish's notify wakes them with both the lock free and durable raised;
// if it publishes nothing, its release notifies them itself.
func (a *Log) syncTail(locked bool) error {
	published := false
	if locked {
		defer func() {
			if !published {
				a.sh.Unlock(LockSync)
				a.sh.Notify()
			}
		}()
	}
	a.drain()
	t := a.sh.Word(Tail).Load()
	d := a.sh.Word(Durable).Load()
	// A cut shm reads as zeros, which would pass for everything synced
	// (one fstat per sync, beside its fdatasync); so does one grown back
	// or written over (no segment is 0).
	if err := a.sh.Verify(); err != nil {
		return err
	}
	if seg, _ := splitPosition(t); seg == 0 {
		return a.sh.Wiped()
	}
	if d >= t {
		return nil // another process's sync covered everything placed
	}
	seg, _ := splitPosition(t)
	f, err := a.file(seg)
	if err != nil {
		return err
	}
	err = f.Sync()
	a.cfg.Fsynced()
	if err != nil {
		return a.syncFailed(seg, err)
	}
	if locked {
		a.sh.Unlock(LockSync)
	}
	published = true
	a.sh.Publish(t)
	a.closeBefore(seg)
	return nil
}

// closeBefore closes the files of segments before seg: they are sealed,
// and no placement or sync of this process uses them again. Called by the
// syncer.
func (a *Log) closeBefore(seg uint64) {
	a.files.Lock()
	defer a.files.Unlock()
	for id, f := range a.files.byID {
		if id < seg {
			f.Close()
			delete(a.files.byID, id)
			delete(a.files.versions, id)
		}
	}
}

// Close closes every file.
func (a *Log) Close() error {
	a.files.Lock()
	defer a.files.Unlock()
	var errs []error
	for id, f := range a.files.byID {
		errs = append(errs, f.Close())
		delete(a.files.byID, id)
	}
	return errors.Join(errs...)
}

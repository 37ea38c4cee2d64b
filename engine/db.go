package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// DB is an open store directory. It is safe for concurrent use.
type DB struct {
	dir  string
	opts Options
	lock io.Closer
	idx  *index.Index // nil with NoIndex
	enc  segment.Encoder

	owners handle.Owners

	// appendMu orders frame appends with their registration in pend, so
	// that pend is in file order (the index checkpoint relies on it).
	appendMu sync.Mutex

	mu       sync.Mutex
	sessions map[string]*session
	roller   *segment.Roller
	readers  map[uint64]*segment.Reader
	pend     []pendFrame // appended frames not yet in the index, in file order
	handles  map[*Handle]struct{}
	closed   bool
	poison   error              // sticky write/sync error: nothing is acked after it
	orphans  map[string]*orphan // replay only: frames awaiting their tombstone
	// replay only: migrations whose events are not all replayed yet
	replacing map[string]*replacement
	ended     map[uint64]bool // replay only: incarnations a tombstone or migration ended
	rec       *openRecovery   // what the open's recovery found (and did)

	// layoutMu guards where frames are: reads hold it (shared) from taking
	// their frame list to decoding the last frame; compaction takes it to
	// switch a rewritten segment's offsets and reader, and to close the
	// reader of a removed one. Taken before mu.
	layoutMu  sync.RWMutex
	compactMu sync.Mutex  // serializes compactions
	dead      atomic.Bool // something was deleted or migrated since the last compaction
	idxMu     sync.Mutex  // serializes checkpoints
	idxKick   chan struct{}
	prepKick  chan struct{} // the active segment is half full: create the next
	stop      chan struct{}
	wg        sync.WaitGroup
}

// session is the in-memory state of one session. Guarded by DB.mu.
type session struct {
	id        string
	hdr       Header
	hdrRaw    []byte // the header record as the index holds it, decoded on first use
	inherited uint64
	uid       uint64        // location of the header frame; 0 while pending
	pending   bool          // created here, header frame not yet appended
	next      uint64        // next seq: framed + len(open)
	framed    uint64        // events already in frames
	open      []event.Event // appended, not yet encoded into a frame (the caller's copies)
	openBytes int
	size      int64
	frames    []frameRef // every frame if loaded, else those after the index's
	loaded    bool       // frames holds every frame
	owner     *Handle    // the write handle holding the lease, if any
	erased    bool       // a pending session its creator closed

	checked uint64 // events verified against the catalog and the seed rules by a write open

	idxNext uint64 // events the index holds (frames in pend are not counted)
	idxSize int64
}

type frameRef struct {
	first uint64
	count uint32
	seg   uint64
	off   int64
	size  uint32
}

// addFrame records a frame of s's events, which continue its framed seqs,
// and returns its entry for the index. Called with db.mu held (or during
// replay).
func (s *session) addFrame(ref frameRef) pendFrame {
	s.framed += uint64(ref.count)
	s.size += int64(ref.size)
	s.frames = append(s.frames, ref)
	return pendFrame{s: s, ref: ref}
}

// orphan is the first events frame of a session met without its header
// during replay.
type orphan struct {
	path string
	off  int64
}

type pendFrame struct {
	s      *session
	header bool
	delete bool // a tombstone of s
	ref    frameRef
	// groupEnd, on the first entry of a migration, is its last frame: the
	// index takes the migration whole or not at all.
	groupEnd  *frameRef
	migration bool // an entry of a migration's group
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Open opens the store in dir, creating it if needed, and recovers it: it
// takes the directory lock (ErrLocked, with the holder's pid, if another
// process has it), loads the index, re-reads the frames written after the
// index's checkpoint, cuts off a torn tail of the newest segment, and
// reports damage to synced data as a *CorruptionError.
func Open(dir string, opts *Options) (*DB, error) {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return nil, err
	}
	var lock io.Closer = closerFunc(func() error { return nil })
	if o.ReadOnly {
		if _, err := o.FS.List(dir); err != nil {
			return nil, fmt.Errorf("engine: open %s read-only: %w", dir, err)
		}
	} else {
		if err := o.FS.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", dir, err)
		}
		// The directory's own entry must be durable before anything in it is.
		if err := o.FS.SyncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", dir, err)
		}
		if lock, err = o.FS.Lock(filepath.Join(dir, "LOCK")); err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", dir, err)
		}
	}
	db := &DB{
		dir:      dir,
		opts:     o,
		lock:     lock,
		enc:      segment.Encoder{Uncompressed: o.Uncompressed},
		sessions: map[string]*session{},
		readers:  map[uint64]*segment.Reader{},
		handles:  map[*Handle]struct{}{},
		idxKick:  make(chan struct{}, 1),
		prepKick: make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	if err := db.recover(); err != nil {
		db.closeFiles()
		return nil, err
	}
	if o.ReadOnly {
		return db, nil // no writer, no background work
	}
	db.wg.Add(2)
	go db.indexLoop()
	go db.prepareLoop()
	if o.CompactInterval > 0 {
		db.wg.Add(1)
		go db.compactLoop()
	}
	return db, nil
}

func (db *DB) segPath(id uint64) string { return filepath.Join(db.dir, segment.Name(id)) }

// openSegment opens segment id and checks that its header names the same
// ID as its file name (a renamed or swapped file is corruption).
func (db *DB) openSegment(id uint64) (*segment.Reader, error) {
	r, err := segment.OpenReader(db.opts.FS, db.segPath(id))
	if err != nil {
		return nil, err
	}
	if got := r.Header().ID; got != id {
		r.Close()
		return nil, &CorruptionError{Path: db.segPath(id), Offset: 0, Reason: fmt.Sprintf("header says segment %d", got)}
	}
	return r, nil
}

// reader returns the open reader of segment id, opening it if needed.
func (db *DB) reader(id uint64) (*segment.Reader, error) {
	db.mu.Lock()
	r := db.readers[id]
	db.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := db.openSegment(id)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if old := db.readers[id]; old != nil {
		r.Close()
		return old, nil
	}
	if db.closed {
		r.Close()
		return nil, ErrClosed
	}
	db.readers[id] = r
	return r, nil
}

// Create makes a new session and returns a write handle on it. The session
// is visible to Stat, List and Open of this DB at once, and is written to
// disk no later than its first Flush; closed without an append or a flush,
// it vanishes. Create writes nothing and reserves nothing on failure.
func (db *DB) Create(ctx context.Context, h Header, opts ...CreateOption) (*Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, inherited, err := store.PrepareHeader(h, opts...)
	if err != nil {
		return nil, err
	}
	if db.opts.ReadOnly {
		return nil, ErrReadOnlyStore
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, ErrClosed
	}
	if s, ok := db.sessions[h.ID]; ok && !s.erased {
		return nil, sessionErr(h.ID, "create", ErrSessionExists)
	}
	lease, err := db.owners.Acquire(h.ID)
	if err != nil {
		return nil, sessionErr(h.ID, "create", ErrSessionExists)
	}
	s := &session{id: h.ID, hdr: h, inherited: inherited, pending: true, loaded: true, uid: store.NewIncarnation()}
	db.sessions[h.ID] = s
	hd := db.newHandle(s, Write, lease)
	s.owner = hd
	return hd, nil
}

// Open returns a handle on an existing session: ErrSessionNotFound if it
// does not exist, ErrAlreadyOwned for Write while another write handle (or
// the creator) holds it.
func (db *DB) Open(ctx context.Context, id string, access Access) (*Handle, error) {
	if err := db.lockOpen(ctx); err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	s, err := db.lookup(id, "open")
	if err != nil {
		return nil, err
	}
	hdr, err := db.header(s)
	if err != nil {
		return nil, err
	}
	if err := db.checkVersion(id, hdr); err != nil {
		return nil, err
	}
	if access != Write {
		return db.newHandle(s, Read, nil), nil
	}
	if hdr.Version < FormatVersion {
		return nil, sessionErr(id, "open", ErrMigrationRequired)
	}
	if db.opts.ReadOnly {
		return nil, sessionErr(id, "open", ErrReadOnlyStore)
	}
	lease, err := db.owners.Acquire(id)
	if err != nil {
		return nil, sessionErr(id, "open", ErrAlreadyOwned)
	}
	h := db.newHandle(s, Write, lease)
	s.owner = h
	db.mu.Unlock()
	err = h.checkLog(ctx)
	db.mu.Lock()
	if err != nil {
		// A failed write open releases what it took, so a retry never
		// finds the session owned.
		delete(db.handles, h)
		if s.owner == h {
			s.owner = nil
		}
		h.closed = true
		lease.Release()
		return nil, err
	}
	return h, nil
}

// checkVersion refuses a session written in a format this build does not
// read (a newer build's, or one older than OldestFormatVersion).
func (db *DB) checkVersion(id string, h Header) error {
	if h.Version > FormatVersion || h.Version < OldestFormatVersion {
		return &FormatError{Path: db.dir + "#" + id, What: "session", Version: h.Version, Supported: FormatVersion, Oldest: OldestFormatVersion}
	}
	return nil
}

// lockOpen checks ctx and that db is open; on success it returns with
// db.mu held.
func (db *DB) lockOpen(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// lookup returns the stored or pending session id, or ErrSessionNotFound
// for op. Called with db.mu held.
func (db *DB) lookup(id, op string) (*session, error) {
	s, ok := db.sessions[id]
	if !ok || s.erased {
		return nil, sessionErr(id, op, ErrSessionNotFound)
	}
	return s, nil
}

// Stat describes a session; ErrSessionNotFound if it does not exist.
func (db *DB) Stat(ctx context.Context, id string) (Snapshot, error) {
	if err := db.lockOpen(ctx); err != nil {
		return Snapshot{}, err
	}
	defer db.mu.Unlock()
	s, err := db.lookup(id, "stat")
	if err != nil {
		return Snapshot{}, err
	}
	snap, err := db.snapshotOf(s)
	if err != nil {
		return Snapshot{}, err
	}
	if err := db.checkVersion(id, snap.Header); err != nil {
		return Snapshot{}, err
	}
	return snap, nil
}

// header returns the session header, decoding the index's copy on first
// use (Open of a store with many sessions does not parse every header).
// Called with db.mu held.
func (db *DB) header(s *session) (Header, error) {
	if s.hdrRaw != nil {
		rec, err := store.DecodeHeaderRecord(s.hdrRaw, s.id)
		if err != nil {
			return Header{}, &CorruptionError{Path: db.opts.IndexPath, Offset: -1, Reason: fmt.Sprintf("index record of session %q has a bad header (seglog check --repair rebuilds the index)", s.id), Err: err}
		}
		s.hdr, s.hdrRaw = rec.Header, nil
	}
	return s.hdr, nil
}

func (db *DB) snapshotOf(s *session) (Snapshot, error) {
	if _, err := db.header(s); err != nil {
		return Snapshot{}, err
	}
	return s.snapshot(), nil
}

func (s *session) snapshot() Snapshot {
	snap := Snapshot{
		Header:              s.hdr,
		Revision:            store.Revision(s.uid, s.next),
		EventCount:          s.next,
		SizeBytes:           s.size,
		InheritedEventCount: s.inherited,
	}
	if s.hdr.Version < FormatVersion {
		snap.FormatStatus = FormatMigrationRequired
	}
	return snap
}

// List describes every session, sorted by ID.
func (db *DB) List(ctx context.Context) ([]Snapshot, error) {
	if err := db.lockOpen(ctx); err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	out := make([]Snapshot, 0, len(db.sessions))
	for _, s := range db.sessions {
		if !s.erased {
			snap, err := db.snapshotOf(s)
			if err != nil {
				return nil, err
			}
			if db.checkVersion(s.id, snap.Header) != nil {
				continue // a format this build does not read: not listed, as the reference skips foreign versions
			}
			out = append(out, snap)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Header.ID < out[j].Header.ID })
	return out, nil
}

// Delete removes a session: its log is gone for every reader of this DB at
// once, and durably (a tombstone is written and synced) when Delete
// returns. The bytes stay in their segments until compaction. It fails
// with ErrSessionNotFound if the session does not exist and with
// ErrAlreadyOwned while a write handle holds it. A session created but
// never written just vanishes. The id may be created again; the new
// session's revisions never repeat the old one's.
func (db *DB) Delete(ctx context.Context, id string) error {
	if db.opts.ReadOnly {
		return ErrReadOnlyStore
	}
	if err := db.lockOpen(ctx); err != nil {
		return err
	}
	s, err := db.lookup(id, "delete")
	if err != nil {
		db.mu.Unlock()
		return err
	}
	lease, err := db.owners.Acquire(id)
	if err != nil {
		db.mu.Unlock()
		return sessionErr(id, "delete", ErrAlreadyOwned)
	}
	defer lease.Release()
	if s.pending {
		// Never written (its events, if any, not yet framed): nothing of
		// it is on disk.
		s.erased = true
		delete(db.sessions, id)
		db.mu.Unlock()
		return nil
	}
	uid := s.uid
	db.mu.Unlock()
	e, err := db.enc.Delete(id, uid)
	if err != nil {
		return sessionErr(id, "delete", err)
	}
	db.appendMu.Lock()
	db.mu.Lock()
	r, poison := db.roller, db.poison
	db.mu.Unlock()
	if poison != nil {
		db.appendMu.Unlock()
		return sessionErr(id, "delete", poison)
	}
	seg, loc, err := r.AppendEncoded(e)
	if err != nil {
		err = db.storeErr(err, true)
		db.appendMu.Unlock()
		return sessionErr(id, "delete", err)
	}
	db.mu.Lock()
	s.erased = true
	delete(db.sessions, id)
	db.pend = append(db.pend, pendFrame{s: s, delete: true, ref: frameRef{seg: seg, off: loc.Offset, size: uint32(loc.Size)}})
	db.mu.Unlock()
	db.appendMu.Unlock()
	db.dead.Store(true)
	if testHookDeleted != nil {
		testHookDeleted()
	}
	if err := db.sync(); err != nil {
		return sessionErr(id, "delete", err)
	}
	return nil
}

// Flush is the barrier over every open write handle: it drains each one's
// write-behind buffer, writes each created-but-empty session, and makes
// everything durable with one fdatasync. The error joins one error per
// failing session, each naming it; the other sessions still flush.
func (db *DB) Flush(ctx context.Context) error {
	if db.opts.ReadOnly {
		return ErrReadOnlyStore
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	hs := db.writeHandles()
	db.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.prepareFlush(ctx); err != nil && !errors.Is(err, ErrHandleClosed) {
			errs = append(errs, sessionErr(h.s.id, "flush", err))
		}
	}
	if err := db.sync(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeHandles returns the open write handles, by session id. Called with
// db.mu held.
func (db *DB) writeHandles() []*Handle {
	hs := make([]*Handle, 0, len(db.handles))
	for h := range db.handles {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].id < hs[j].id })
	return hs
}

// sync makes every appended frame durable (group commit with concurrent
// callers) and wakes the indexer.
func (db *DB) sync() error {
	db.mu.Lock()
	if db.poison != nil {
		err := db.poison
		db.mu.Unlock()
		return err
	}
	r := db.roller
	db.mu.Unlock()
	return db.storeErr(r.Sync(), false)
}

func (db *DB) poisonWith(err error) {
	db.mu.Lock()
	if db.poison == nil {
		db.poison = fmt.Errorf("engine: store failed, nothing more is acknowledged: %w", err)
	}
	db.mu.Unlock()
}

// appendFrames appends encoded frames of s (made from the head of s.open)
// and registers them. Called with no lock held; the caller holds s's lease.
func (db *DB) appendFrames(s *session, header *segment.Encoded, frames []*segment.Encoded, counts []uint32) error {
	db.appendMu.Lock()
	defer db.appendMu.Unlock()
	db.mu.Lock()
	if err := db.poison; err != nil {
		db.mu.Unlock()
		return err
	}
	r := db.roller
	db.mu.Unlock()
	type placed struct {
		seg uint64
		loc segment.Location
	}
	var hp *placed
	var ps []placed
	var err error
	if header != nil {
		seg, loc, aerr := r.AppendEncoded(header)
		if err = aerr; err == nil {
			hp = &placed{seg, loc}
		}
	}
	for i := 0; err == nil && i < len(frames); i++ {
		seg, loc, aerr := r.AppendEncoded(frames[i])
		if err = aerr; err == nil {
			ps = append(ps, placed{seg, loc})
		}
	}
	if testHookAppended != nil {
		testHookAppended()
	}
	if w := r.Active(); err == nil && !db.opts.NoPreallocate && w.Size() > db.opts.SegmentSize/2 && !r.Prepared() {
		select {
		case db.prepKick <- struct{}{}:
		default:
		}
	}
	// Register what was appended, even when a later frame failed: it may
	// be durable already (a roll syncs), and the index must know it.
	db.mu.Lock()
	if hp != nil {
		s.pending = false
		s.size += hp.loc.Size
		db.pend = append(db.pend, pendFrame{s: s, header: true, ref: frameRef{seg: hp.seg, off: hp.loc.Offset, size: uint32(hp.loc.Size)}})
	}
	if len(db.pend) >= indexBatchFrames {
		select { // enough for a checkpoint before the next tick
		case db.idxKick <- struct{}{}:
		default:
		}
	}
	for i, p := range ps {
		s.open = s.open[counts[i]:]
		db.pend = append(db.pend, s.addFrame(frameRef{first: s.framed, count: counts[i], seg: p.seg, off: p.loc.Offset, size: uint32(p.loc.Size)}))
	}
	db.mu.Unlock()
	// What was not appended stays in s.open for the next cut.
	return db.storeErr(err, true)
}

// testHookAppended, if set, runs in appendFrames after the frames are
// appended and before they are registered for the index.
var testHookAppended func()

// testHookDeleted, if set, runs in Delete after the tombstone is appended
// and before it is synced.
var testHookDeleted func()

// indexBatchFrames is how many unindexed frames wake the indexer before
// its interval: index commits stay batched and off the flush path.
const indexBatchFrames = 8192

// prepareLoop creates the next segment in the background once the active
// one is half full, so that rolling does not stall appends on creating and
// zero-filling a file.
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
		db.mu.Lock()
		r := db.roller
		db.mu.Unlock()
		active := r.Active().Header().ID
		if active == failedFor && time.Since(failedAt) < prepareBackoff {
			continue // one warning per segment and backoff, not one per append
		}
		if err := r.PrepareNext(); err != nil {
			failedFor, failedAt = active, time.Now()
			db.opts.Logger.Warn("engine: preparing the next segment failed; the roll will create it", "error", err)
		}
	}
}

// encodeBatch splits evs into frames of about FrameBytes raw bytes.
func (db *DB) encodeBatch(id string, evs []event.Event) ([]*segment.Encoded, []uint32, error) {
	var out []*segment.Encoded
	var counts []uint32
	start, bytes := 0, 0
	flush := func(end int) error {
		e, err := db.enc.Events(id, evs[start].Seq, evs[start:end])
		if err != nil {
			return err
		}
		out = append(out, e)
		counts = append(counts, uint32(end-start))
		start, bytes = end, 0
		return nil
	}
	for i := range evs {
		bytes += len(evs[i].Data) + len(evs[i].Type) + 16
		if bytes >= db.opts.FrameBytes && i+1 > start {
			if err := flush(i + 1); err != nil {
				return nil, nil, err
			}
		}
	}
	if start < len(evs) {
		if err := flush(len(evs)); err != nil {
			return nil, nil, err
		}
	}
	return out, counts, nil
}

// Close flushes what every open handle has buffered, makes all appended
// events durable, checkpoints the index, revokes every lease (later writes
// through old handles fail with ErrOwnershipLost) and releases the
// directory. It is idempotent.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	if db.opts.ReadOnly {
		db.closed = true
		db.mu.Unlock()
		return db.closeFiles()
	}
	hs := db.writeHandles()
	db.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.closeFlush(); err != nil && !errors.Is(err, ErrHandleClosed) {
			errs = append(errs, sessionErr(h.s.id, "close", err))
		}
	}
	if err := db.sync(); err != nil {
		errs = append(errs, err)
	}
	db.mu.Lock()
	db.closed = true
	db.mu.Unlock()
	db.owners.RevokeAll()
	close(db.stop)
	db.wg.Wait()
	if len(errs) == 0 {
		// The index is a cache: if it cannot take the last frames, the
		// next open replays them; nothing acknowledged is at stake.
		if err := db.checkpoint(); err != nil {
			db.opts.Logger.Warn("engine: the last index checkpoint failed; the next open re-reads more of the segments", "error", err)
		}
	}
	for _, h := range hs {
		h.mu.Lock()
		wb := h.front.Buffer()
		h.mu.Unlock()
		if wb != nil {
			wb.Close(context.Background())
		}
	}
	errs = append(errs, db.closeFiles())
	return errors.Join(errs...)
}

func (db *DB) closeFiles() error {
	var errs []error
	for _, r := range db.readers {
		errs = append(errs, r.Close())
	}
	db.readers = nil
	if db.roller != nil {
		errs = append(errs, db.roller.Close())
	}
	if db.idx != nil {
		errs = append(errs, db.idx.Close())
	}
	errs = append(errs, db.lock.Close())
	return errors.Join(errs...)
}

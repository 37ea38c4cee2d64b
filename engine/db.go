package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/listorder"
	"github.com/seglog/seglog/engine/internal/wal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/dict"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// DB is an open store directory. It is safe for concurrent use.
type DB struct {
	dir  string
	opts Options
	// shared is the store's coordination with other processes
	shared *coord.Shared
	// bound, in a read-only open of a store another process writes, is
	// the durable position its recovery reads up to (0: every frame)
	bound uint64
	// follow keeps the DB up with the processes that write the store
	follow *follower
	// log places this process's frames in the shared log (nil read-only)
	log *wal.Log
	// joined: a write open of a store other processes were writing, whose
	// recovery changed nothing (it is theirs as much as this process's)
	joined   bool
	recIndex *index.Index // the index while Open's recovery holds it; nil after
	// index is the index between uses once the store is open (nil with
	// NoIndex, or when a read-only open set it aside)
	index *indexFile
	// dicts are the store's compression dictionaries, loaded as frames
	// name them; dict, of a writing process that compresses, the one its
	// frames use and its training (nil otherwise)
	dicts *segment.Dicts
	dict  *dict.Trainer

	owners handle.Owners
	// holders: this DB's holder file, naming the leases it holds
	// (holders.go)
	holders holders
	// leaseWarned: a lease's holder record could not be written, and
	// Options.Logger was told (once)
	leaseWarned atomic.Bool

	// The DB's locks, outermost first (doc.go, "Lock order", has the
	// others between them): each groups what it guards.

	// compaction: one compaction at a time in this process (Compact, the
	// background compactor, Usage, a rebuild of the index; lockCompact
	// keeps the other processes out). After a handle's lock.
	compaction struct {
		sync.Mutex
		// dead: something was deleted or migrated since the last
		// compaction (atomic: set without the mutex; a compaction clears
		// it holding the mutex)
		dead atomic.Bool
		// planned: the horizon segment of the last compaction's plan (the
		// ones before it were planned); a segment sealed after them
		// wakes the background compactor to recode it
		planned atomic.Uint64
	}
	// checkpoints: one index checkpoint at a time (a checkpoint, a
	// compaction's relocation in the index, a rebuild of it); the mutex
	// guards shared.index, whether this process checkpoints. After
	// compaction, before the log's growth lock.
	checkpoints struct {
		sync.Mutex
		// ours is shared.index, for those that do not hold the mutex
		ours atomic.Bool
	}
	// appendMu is held while this process places frames (package wal's
	// placements, seals and growth steps; coord.LockAppend keeps the other
	// processes out): it guards the shared tail in this process. A
	// checkpoint takes it to wait out a placement in progress. After the
	// log's growth lock, before its queue.
	appendMu sync.Mutex
	// layoutMu guards where frames are (the segments' readers and the
	// sessions' frame offsets, which mu guards besides): reads hold it
	// (shared) from taking their frame list to decoding the last frame;
	// compaction takes it to switch a rewritten segment's offsets and
	// reader, and to close the reader of a removed one. After the log's
	// locks and follower.mu, before indexFile.mu and mu.
	layoutMu sync.RWMutex
	// mu guards the store's in-memory state. After layoutMu and
	// indexFile.mu; only pins and the locks of the shared memory and of
	// the dictionary come after it.
	mu struct {
		sync.Mutex
		sessions map[string]*session // by ID: the live incarnation of each session
		readers  map[uint64]*segment.Reader
		pend     []pendFrame // placed and folded frames not yet in the index
		// own: the frames this process placed that its follower has
		// not passed yet, in increasing order
		own     []ownFrame
		handles map[*Handle]struct{}
		poison  error // sticky write/sync error: nothing is acked after it (see poisonP)
		// list and byUpdated: the sessions in ID order and in
		// OrderUpdated, for ListPage (see listorder.IDs, updatedOrder)
		list      listorder.IDs
		byUpdated updatedOrder
		// catalogs: the fingerprints the DB's catalog has had (catalogNow);
		// checkedDirty: sessions whose checked count moved on since the
		// checkpoint last wrote their index record
		catalogs     []uint64
		checkedDirty map[*session]struct{}
	}
	// poisonP holds mu.poison once it is set (never reset): what
	// poisonErr reads without mu, on every placement and sync
	poisonP atomic.Pointer[error]
	// pins: forks in progress of sessions a write handle of this process
	// holds; the handle's lease waits for them (see holdParent). After
	// mu, never before it.
	pins struct {
		sync.Mutex
		cond     sync.Cond      // on the mutex: a count fell to 0
		byParent map[string]int // forks in progress, by parent session ID
	}

	// The open's recovery, run before the DB is shared.
	fold *fold         // the replay; nil once it is over
	rec  *openRecovery // what the recovery found (and did)
	// rebuildIndex: this open replays every segment and replaces the
	// index (RebuildIndex)
	rebuildIndex bool

	idxKick  chan struct{} // enough frames are pending: checkpoint now
	prepKick chan struct{} // the active segment is half full: create the next
	// gate counts the operations in progress; Close shuts it at its start
	// and waits for them (gate.go)
	gate gate
	// stop is closed at the start of Close: it stops the goroutines and
	// wakes the operations that wait (Handle.Wait)
	stop chan struct{}
	// stopCtx is done at the same moment: it cancels a background
	// compaction in progress
	stopCtx    context.Context
	stopCancel context.CancelFunc
	// closed is closed once Close is over
	closed chan struct{}
	wg     sync.WaitGroup

	// metrics are the counters DB.Metrics reports (metrics.go)
	metrics dbMetrics
	// lostLogged: the checkpoint tick logged that shm was cut
	lostLogged atomic.Bool

	// knobs are the test hooks and overrides (knobs.go): Options.testing
	// with the defaults filled in
	knobs testingKnobs
}

// Open opens the store in dir, creating it if needed. Other processes may
// have it open too (docs/MULTIPROCESS.md, Many processes): the first to open it
// recovers it (it loads the index, re-reads the frames written after the
// index's checkpoint, cuts off a torn tail of the newest segment, and
// reports damage to synced data as a *CorruptionError); the others join
// it, reading what is durable. It fails with ErrLocked (with the holder's
// pid) beside a build that writes a store alone.
func Open(dir string, opts *Options) (*DB, error) { return open(dir, opts, false) }

// open is Open; with rebuildIndex (RebuildIndex), every segment is
// replayed and the index replaced.
func open(dir string, opts *Options, rebuildIndex bool) (*DB, error) {
	for try := 1; ; try++ {
		db, err := openOnce(dir, opts, rebuildIndex)
		if err != errLayoutMoved {
			return db, err
		}
		if try == openTries {
			return nil, fmt.Errorf("engine: open %s: a compaction by the writing process changed the segments during each of %d tries", dir, try)
		}
	}
}

// errLayoutMoved: a compaction in another process removed or rewrote
// segments while a read-only open read them (the index and the files may
// disagree): the open is done again.
var errLayoutMoved = errors.New("engine: the segments changed during the open")

// errOthersOpen: an open that needs the store to itself (RebuildIndex's)
// found other processes in it.
var errOthersOpen = errors.New("other processes have the store open")

// openTries bounds the read-only opens a compaction elsewhere may spoil.
const openTries = 50

// openOnce is one try of open.
func openOnce(dir string, opts *Options, rebuildIndex bool) (*DB, error) {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return nil, err
	}
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
	}
	sh, err := coord.Join(o.FS, dir, !o.ReadOnly, !o.NoIndex)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	if rebuildIndex && !sh.First() {
		// Replacing the index needs the store to itself.
		sh.Close()
		return nil, fmt.Errorf("engine: rebuild the index of %s: %w: %w", dir, store.ErrLocked, errOthersOpen)
	}
	db := &DB{
		dir:          dir,
		opts:         o,
		rebuildIndex: rebuildIndex,
		shared:       sh,
		dicts:        segment.NewDicts(o.FS, dir),
		idxKick:      make(chan struct{}, 1),
		prepKick:     make(chan struct{}, 1),
		gate:         newGate(),
		stop:         make(chan struct{}),
		closed:       make(chan struct{}),
		knobs:        o.testing,
	}
	if db.knobs.waitMin == 0 {
		db.knobs.waitMin = waitMin
	}
	if db.knobs.waitMax == 0 {
		db.knobs.waitMax = waitMax
	}
	sh.Knobs = coord.Knobs{Bump: db.knobs.bump, WatchPoll: db.knobs.watchPoll}
	db.stopCtx, db.stopCancel = context.WithCancel(context.Background())
	db.metrics.start = time.Now()
	db.checkpoints.ours.Store(sh.HoldsIndex())
	db.mu.sessions = map[string]*session{}
	db.mu.readers = map[uint64]*segment.Reader{}
	db.mu.handles = map[*Handle]struct{}{}
	db.pins.cond.L = &db.pins.Mutex
	// A write open of a store that other processes write joins their log:
	// like a read-only open, its recovery reads up to what they made
	// durable and changes nothing.
	db.joined = !o.ReadOnly && sh.Live()
	if o.ReadOnly && o.keepCompactionsOut {
		keepCompactionsOut(sh)
	}
	// A compaction may remove or rewrite segments during the open (a
	// joining writer's slot holds position 0 only from now on): an open
	// that saw the layout counter move is done again.
	layout := sh.Layout()
	if o.ReadOnly || db.joined {
		layout = sh.StableLayout()
	}
	for db.joined && layout%2 == 1 && !o.NoIndex {
		// A compaction died mid-change (StableLayout found coord.LockCompact
		// free): finish (or clear) the rewrite intent it left, and end the
		// change, before reading the index. If another process took
		// coord.LockCompact first, it settles before anything else (compactLocks,
		// rebuildLive): wait for it. Never read the index meanwhile: with a
		// rewrite in place and its moves not applied, this open would find
		// the index unusable, and run without one for its whole life.
		if db.knobs.joinSettle != nil {
			db.knobs.joinSettle()
		}
		if sh.TryCompact() {
			err := (&indexFile{path: o.IndexPath}).use(true, db.settleRewriteIn)
			if err == nil {
				sh.SettleLayout()
			}
			sh.EndCompact()
			if err != nil {
				db.closeFiles()
				return nil, fmt.Errorf("engine: open %s: settling a compaction that died: %w", dir, err)
			}
		}
		layout = sh.StableLayout()
	}
	moved := func() bool { return (o.ReadOnly || db.joined) && sh.Mapped() && sh.Layout() != layout }
	if o.ReadOnly || db.joined {
		db.bound = o.bound
		if d, ok := sh.Durable(); ok && db.bound == 0 {
			db.bound = d
		}
	}
	if err := db.recover(); err != nil {
		// (moved reads shm: before closeFiles unmaps it.)
		again := moved()
		db.closeFiles()
		if again {
			return nil, errLayoutMoved
		}
		return nil, err
	}
	if !o.ReadOnly && db.recIndex == nil && sh.Writes() {
		// A joining writer that found the index unusable (it leaves the
		// rebuild to the next first opener), or one without an index: it
		// cannot follow a compaction, which tells only the index where the
		// frames it moves went. It holds coord.LockFixed instead of a slot (no
		// compaction runs while it is open), and never checkpoints.
		if err := sh.WithoutIndex(); err != nil {
			db.closeFiles()
			return nil, fmt.Errorf("engine: open %s: %w", dir, err)
		}
		db.checkpoints.ours.Store(false)
	}
	if o.checking && db.recIndex != nil {
		db.loadEveryFrame(db.recIndex)
	}
	if moved() {
		db.closeFiles()
		return nil, errLayoutMoved
	}
	if db.recIndex != nil {
		// From here on the index is opened for each use: other processes
		// may need it too.
		db.index = &indexFile{path: db.recIndex.Path()}
		err := db.recIndex.Close()
		db.recIndex = nil
		if err != nil {
			db.closeFiles()
			return nil, fmt.Errorf("engine: closing the index after recovery: %w", err)
		}
	}
	switch {
	case !o.ReadOnly:
		if db.log == nil {
			db.log = newLog(db)
		}
		db.log.SetAlone(sh.Alone())
		// Keep up with the other writing processes.
		db.follow = &follower{}
		db.follow.mu.pos = db.rec.end
		db.follow.layout.Store(layout)
		sh.SetSeen(&db.follow.layout)
		if db.joined {
			db.follow.mu.pos = db.bound
		}
		if !db.joined && layout%2 == 1 && sh.TryCompact() {
			// A compaction died mid-change, and this open's recovery
			// finished or cleared its rewrite intent: end the change.
			if sh.Layout() == layout {
				sh.SettleLayout()
				db.follow.layout.Store(layout + 1)
			}
			sh.EndCompact()
		}
		sh.PublishFollow(db.follow.mu.pos)
	case sh.Mapped() && o.bound == 0:
		// Keep up with the writing processes.
		db.follow = &follower{}
		db.follow.mu.pos = db.bound
		db.follow.layout.Store(layout)
		if db.bound == 0 {
			db.follow.mu.pos = db.rec.end
		}
	default:
		db.fold = nil
	}
	if err := db.shared.Opened(); err != nil {
		db.closeFiles()
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	db.loadTypes() // the host types the store records (RegisterTypes)
	if o.ReadOnly {
		return db, nil // no writer, no background work
	}
	if !o.Uncompressed && !o.NoDict {
		var err error
		if db.dict, err = newDictTrainer(db); err != nil {
			db.closeFiles()
			return nil, fmt.Errorf("engine: open %s: %w", dir, err)
		}
	}
	db.openHolders()
	db.wg.Add(2)
	go db.indexLoop()
	go db.prepareLoop()
	if db.dict != nil {
		db.wg.Add(1)
		go db.dictLoop()
	}
	if o.CompactInterval > 0 {
		db.wg.Add(1)
		go db.compactLoop(db.stopCtx)
	}
	return db, nil
}

func (db *DB) segPath(id uint64) string { return filepath.Join(db.dir, segment.Name(id)) }

// Create makes a new session and returns a write handle on it. The session
// is visible to Stat, List and Open of this DB at once, and is written to
// disk no later than its first Flush; closed without an append or a flush,
// it vanishes. Create writes nothing and reserves nothing on failure.
func (db *DB) Create(ctx context.Context, h store.Header, opts ...store.CreateOption) (*Handle, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, inherited, err := store.PrepareHeader(h, opts...)
	if err != nil {
		return nil, err
	}
	if db.opts.ReadOnly {
		return nil, store.ErrReadOnlyStore
	}
	// The lease first, across processes: of two creating the same ID, one
	// gets it; then everything any process placed, so that an ID another
	// process created is seen.
	lease, err := db.acquire(h.ID)
	if err != nil {
		return nil, sessionErr(h.ID, "create", store.ErrSessionExists)
	}
	if db.knobs.createLeased != nil {
		db.knobs.createLeased()
	}
	if err := db.catchUpAll(h.ID); err != nil {
		lease.Release()
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if s, ok := db.mu.sessions[h.ID]; ok && !s.erased {
		lease.Release()
		return nil, sessionErr(h.ID, "create", store.ErrSessionExists)
	}
	s := &session{id: h.ID, hdr: &h, inherited: inherited, pending: true, loaded: true, uid: store.NewIncarnation()}
	db.mu.sessions[h.ID] = s
	db.relist(s, true)
	hd := db.newHandle(s, store.Write, lease)
	s.owner = hd
	return hd, nil
}

// Open returns a handle on an existing session: ErrSessionNotFound if it
// does not exist, ErrAlreadyOwned for Write while another write handle (or
// the creator) holds it. A write open of a session stored in an older
// format (FormatMigrationRequired) first migrates it in place, as Migrate
// does (the revision changes; a crash leaves the old session or the
// migrated one, never a mix), and appends after the migrated log; if the
// migration refuses the log, the open fails with its error and the
// session stays as it was. A read open never migrates: it reads migrated,
// in memory.
func (db *DB) Open(ctx context.Context, id string, access store.Access) (*Handle, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
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
	if access != store.Write {
		h := db.newHandle(s, store.Read, nil)
		if hdr.Version < store.FormatVersion && s.inherited > 0 {
			// Read migrated: its marker may sit elsewhere, and the count
			// follows it.
			db.mu.Unlock()
			err := h.settleMigratedInherited(ctx)
			db.mu.Lock()
			if err != nil {
				h.Close() //lint:lockok h is a read handle: only a write handle's Close takes db.mu
				return nil, err
			}
		}
		return h, nil
	}
	if db.opts.ReadOnly {
		return nil, sessionErr(id, "open", store.ErrReadOnlyStore)
	}
	older := hdr.Version < store.FormatVersion
	db.mu.Unlock()
	lease, err := db.acquire(id)
	if err != nil {
		db.mu.Lock()
		return nil, sessionErr(id, "open", ownedKind(err))
	}
	// Under the lease, everything other processes placed: the session
	// continues after its last event, whoever wrote it.
	err = db.catchUpAll(id)
	if err == nil && older {
		// Stored in an older format: migrated in place first, as Migrate
		// does (a crash leaves the old session or the migrated one), and
		// the handle appends after the migrated log. (Another process
		// may have migrated it meanwhile: then nothing is done.)
		_, err = db.migrateLeased(ctx, id, "open")
	}
	db.mu.Lock()
	if err == nil {
		s, err = db.lookup(id, "open")
	}
	if err != nil {
		lease.Release()
		return nil, err
	}
	h := db.newHandle(s, store.Write, lease)
	s.owner = h
	db.mu.Unlock()
	err = h.checkLog(ctx)
	db.mu.Lock()
	if err != nil {
		// A failed write open releases what it took, so a retry never
		// finds the session owned.
		delete(db.mu.handles, h)
		if s.owner == h {
			s.owner = nil
		}
		h.front.MarkClosed() //lint:lockok h is new and never returned: no other goroutine takes its Front's lock
		db.metrics.handleClosed(store.Write)
		lease.Release()
		return nil, err
	}
	return h, nil
}

// checkVersion refuses a session written in a format this build does not
// read (a newer build's, or one older than OldestFormatVersion).
func (db *DB) checkVersion(id string, h store.Header) error {
	if h.Version > store.FormatVersion || h.Version < store.OldestFormatVersion {
		return &store.FormatError{Path: db.dir + "#" + id, What: "session", Version: h.Version, Supported: store.FormatVersion, Oldest: store.OldestFormatVersion}
	}
	return nil
}

// lockOpen checks ctx and catches up; on success it returns with db.mu
// held. Called by an operation in the gate.
func (db *DB) lockOpen(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := db.catchUp(); err != nil {
		return err
	}
	db.mu.Lock()
	return nil
}

// lookup returns the stored or pending session id, or ErrSessionNotFound
// for op. Called with db.mu held.
func (db *DB) lookup(id, op string) (*session, error) {
	s, ok := db.mu.sessions[id]
	if !ok || s.erased {
		return nil, sessionErr(id, op, store.ErrSessionNotFound)
	}
	return s, nil
}

// Stat describes a session; ErrSessionNotFound if it does not exist.
func (db *DB) Stat(ctx context.Context, id string) (store.Snapshot, error) {
	if err := db.enter(); err != nil {
		return store.Snapshot{}, err
	}
	defer db.leave()
	if err := db.lockOpen(ctx); err != nil {
		return store.Snapshot{}, err
	}
	defer db.mu.Unlock()
	for try := 1; ; try++ {
		s, err := db.lookup(id, "stat")
		if err != nil {
			return store.Snapshot{}, err
		}
		snap, err := db.snapshotOf(s)
		if err != nil {
			return store.Snapshot{}, err
		}
		if err := db.checkVersion(id, snap.Header); err != nil {
			return store.Snapshot{}, err
		}
		if !s.stale() || s.pending || try > 2 {
			// (A listing behind again after it was brought up to date,
			// by appends since, is as of a moment of this Stat.)
			return snap, nil
		}
		if err := db.freshListings(ctx, []*session{s}); err != nil {
			return store.Snapshot{}, err
		}
	}
}

// List describes every session, sorted by ID.
func (db *DB) List(ctx context.Context) ([]store.Snapshot, error) {
	snaps, _, err := db.ListPage(ctx, store.ListOptions{})
	return snaps, err
}

// ListPage is List filtered, ordered and paged (ListOptions, store.Page):
// the page and the cursor of the next page ("" after the last). A session
// left out by Prefix (or, in ID order, After) costs no header read. In ID
// order, only the sessions of the page have their listing (Title,
// UpdatedAt) brought up to date, where it is behind; in OrderUpdated,
// those of the sessions whose listing moved since the last page in that
// order (the order is kept between pages: listupdated.go). It fails with
// ErrInvalidArgument for bad options.
func (db *DB) ListPage(ctx context.Context, opts store.ListOptions) ([]store.Snapshot, string, error) {
	if err := opts.Check(); err != nil {
		return nil, "", err
	}
	if err := db.enter(); err != nil {
		return nil, "", err
	}
	defer db.leave()
	if err := db.lockOpen(ctx); err != nil {
		return nil, "", err
	}
	defer db.mu.Unlock()
	for {
		var keep []*session
		var err error
		visit := func(s *session) bool {
			var hdr store.Header
			if hdr, err = db.header(s); err != nil {
				return false
			}
			if db.checkVersion(s.id, hdr) != nil || (opts.Cwd != "" && hdr.Cwd != opts.Cwd) {
				return true // (a format this build does not read: not listed, as the reference skips foreign versions)
			}
			keep = append(keep, s)
			// (One past the page: there is a next one.)
			return opts.Limit <= 0 || len(keep) <= opts.Limit
		}
		if opts.OrderBy == store.OrderUpdated {
			// (The walk brings listings up to date before it orders them.)
			if werr := db.walkUpdated(ctx, opts, visit); werr != nil {
				return nil, "", werr
			}
		} else {
			db.walkIDs(opts, func(_ string, s *session) bool { return visit(s) })
		}
		if err != nil {
			return nil, "", err
		}
		if opts.OrderBy == store.OrderID {
			if err := db.freshListings(ctx, keep); err != nil {
				return nil, "", err
			}
		}
		snaps := make([]store.Snapshot, 0, len(keep))
		for _, s := range keep {
			if db.mu.sessions[s.id] != s {
				break // (deleted or replaced while the listings were read)
			}
			snaps = append(snaps, s.snapshot())
		}
		if len(snaps) == len(keep) {
			return store.Page(snaps, opts)
		}
	}
}

// Delete removes a session: its log is gone for every reader of this DB at
// once, and durably (a tombstone is written and synced) when Delete
// returns. The bytes stay in their segments until compaction. It fails
// with ErrSessionNotFound if the session does not exist and with
// ErrAlreadyOwned while a write handle holds it. A session created but
// never written just vanishes. The id may be created again; the new
// session's revisions never repeat the old one's. With IfRevision(rev) it
// deletes only if the session's revision is still rev under the lease,
// else fails with ErrRevisionMismatch.
func (db *DB) Delete(ctx context.Context, id string, opts ...store.DeleteOption) error {
	if db.opts.ReadOnly {
		return store.ErrReadOnlyStore
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	if err := db.lockOpen(ctx); err != nil {
		return err
	}
	if _, err := db.lookup(id, "delete"); err != nil {
		db.mu.Unlock()
		return err
	}
	db.mu.Unlock()
	lease, err := db.acquire(id)
	if err != nil {
		return sessionErr(id, "delete", ownedKind(err))
	}
	defer lease.Release()
	if err := db.catchUpAll(id); err != nil {
		return err
	}
	db.mu.Lock()
	s, err := db.lookup(id, "delete")
	if err != nil {
		db.mu.Unlock()
		return err
	}
	if err := store.DeleteOptionsOf(opts).Check(s.uid, s.next); err != nil {
		db.mu.Unlock()
		return sessionErr(id, "delete", err)
	}
	if s.pending {
		// Never written (its events, if any, not yet framed): nothing of
		// it is on disk.
		s.erased = true
		delete(db.mu.sessions, id)
		db.mu.Unlock()
		return nil
	}
	uid := s.uid
	db.mu.Unlock()
	e, err := db.encoder(false).Delete(id, uid)
	if err != nil {
		return sessionErr(id, "delete", err)
	}
	err = db.log.Place(&wal.Placement{Frames: []*segment.Encoded{e}, Register: func(at []wal.Placed, _ int) {
		s.erased = true
		delete(db.mu.sessions, id)
		db.mu.pend = append(db.mu.pend, pendFrame{s: s, delete: true, ref: frameRef{seg: at[0].Seg, off: at[0].Loc.Offset, size: uint32(at[0].Loc.Size)}})
	}})
	if err != nil {
		return sessionErr(id, "delete", err)
	}
	db.compaction.dead.Store(true)
	if db.knobs.deleted != nil {
		db.knobs.deleted()
	}
	if err := db.sync(); err != nil {
		return sessionErr(id, "delete", err)
	}
	return nil
}

// Close closes the DB. It marks it closing first: every operation that
// begins afterwards, on the DB or on its handles, fails with ErrClosed
// (a write through a handle with ErrOwnershipLost too) and writes nothing,
// and the operations that wait (Handle.Wait) return ErrClosed. It waits
// for the operations in progress to end (a handle's Close that began
// since waits for Close instead), then flushes what every open write
// handle has buffered, makes all appended events durable, checkpoints the
// index, revokes every lease and releases the directory. It is
// idempotent: a call while another runs waits for it and returns nil.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.gate.shutting() {
		db.mu.Unlock()
		<-db.closed
		return nil
	}
	db.gate.shut()
	db.mu.Unlock()
	defer close(db.closed)
	close(db.stop) // (wakes the Waits, cancels a background compaction)
	db.stopCancel()
	if db.knobs.closeWaits != nil {
		db.knobs.closeWaits()
	}
	db.gate.wait() // (and the write-outs behind appends)
	if db.opts.ReadOnly {
		db.wg.Wait()
		return db.closeFiles()
	}
	// Every handle an operation made is here: none is made from now on.
	db.mu.Lock()
	hs := db.writeHandles()
	db.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.closeFlush(); err != nil && !errors.Is(err, store.ErrHandleClosed) {
			errs = append(errs, sessionErr(h.s.id, "close", err))
		}
	}
	if err := db.sync(); err != nil {
		errs = append(errs, err)
	}
	db.owners.RevokeAll()
	db.wg.Wait()
	if len(errs) == 0 {
		// The index is a cache: if it cannot take the last frames, the
		// next open replays them; nothing acknowledged is at stake.
		if err := db.checkpoint(); err != nil {
			db.opts.Logger.Warn("engine: the last index checkpoint failed; the next open re-reads more of the segments", "error", err)
		}
	}
	for _, h := range hs {
		h.front.CloseBuffer()
	}
	var plan *trimPlan
	if len(errs) == 0 {
		plan = db.planTrim()
	}
	errs = append(errs, db.closeFiles())
	if plan != nil {
		db.trim(plan)
	}
	return errors.Join(errs...)
}

// closeFiles closes what the DB holds open: by Close, once no operation
// is in progress and the goroutines are over, or by a failed open.
func (db *DB) closeFiles() error {
	var errs []error
	for _, r := range db.mu.readers {
		errs = append(errs, r.Close())
	}
	db.mu.readers = nil
	if db.log != nil {
		errs = append(errs, db.log.Close())
	}
	if db.recIndex != nil {
		errs = append(errs, db.recIndex.Close())
	}
	db.holders.close(db.opts.FS)
	errs = append(errs, db.shared.Close())
	return errors.Join(errs...)
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/seglog/seglog/engine/internal/compactplan"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// CompactOptions configures Compact.
type CompactOptions struct {
	// Roll seals the active segment first (if it holds any frame), so that
	// the deleted data in it can be reclaimed too. The next append goes to
	// a fresh segment.
	Roll bool
	// LiveRatio is the threshold under which a sealed segment that still
	// holds live data is rewritten without its dead frames: a segment whose
	// live bytes are less than LiveRatio of its size. Zero means
	// DefaultLiveRatio; a negative value turns rewriting off (only segments
	// with nothing alive are removed). At most 1.
	LiveRatio float64
	// RecodeShare is the share of a sealed segment's bytes in frames
	// stored as S2 blocks (what a turn's flush writes: docs/FORMAT.md,
	// Codecs) at or above which Compact rewrites a segment never rewritten
	// before, to compress those frames again with zstd (with the
	// dictionary their S2 form came from). Zero means DefaultRecodeShare;
	// a negative value turns it off. At most 1. (Any rewrite compresses
	// the S2 frames it keeps again; a negative LiveRatio does not turn
	// this off.)
	RecodeShare float64
}

// DefaultRecodeShare is the recode share at or over which Compact
// rewrites a segment to compress its S2 frames again: one mostly of them.
const DefaultRecodeShare = 0.5

// DefaultLiveRatio is the live ratio under which Compact rewrites a
// segment: rewriting a segment costs reading it and writing its live
// bytes, so one that is mostly alive is left alone.
const DefaultLiveRatio = 0.5

// CompactReport says what Compact reclaimed.
type CompactReport struct {
	Dropped   []uint64 // segment IDs removed
	Rewritten []uint64 // segment IDs rewritten without their dead frames or to recode their S2 frames
	// Recoded is the segments of Rewritten rewritten for their S2 frames
	// alone (RecodeShare), and RecodedFrames the frames compressed again
	// by all the rewrites, from RecodedFrom bytes to RecodedTo.
	Recoded                []uint64
	RecodedFrames          int
	RecodedFrom, RecodedTo int64
	ReclaimedBytes         int64
	Scanned                int // sealed segments examined
}

// Compact reclaims the space of deleted and replaced (migrated)
// incarnations in sealed segments: a segment with nothing alive left is
// removed, one whose live bytes are under LiveRatio of its size is
// rewritten with only the frames that must stay, others are kept. An
// incarnation goes whole or not at all, and each step is durable before
// the next, so a crash anywhere leaves a store that replays to the same
// sessions. Appends go on meanwhile; reads wait only while a rewritten
// segment is switched in. docs/FORMAT.md (Segment file, Compaction) says
// how.
func (db *DB) Compact(ctx context.Context, opts CompactOptions) (rep *CompactReport, err error) {
	if db.opts.ReadOnly {
		return nil, store.ErrReadOnlyStore
	}
	ratio := opts.LiveRatio
	switch {
	case ratio == 0:
		ratio = DefaultLiveRatio
	case ratio > 1 || ratio != ratio:
		return nil, fmt.Errorf("%w: live ratio %v is not at most 1", store.ErrInvalidArgument, opts.LiveRatio)
	}
	recode := opts.RecodeShare
	switch {
	case recode == 0:
		recode = DefaultRecodeShare
	case recode > 1 || recode != recode:
		return nil, fmt.Errorf("%w: recode share %v is not at most 1", store.ErrInvalidArgument, opts.RecodeShare)
	}
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	db.compaction.Lock()
	defer db.compaction.Unlock()
	release, err := db.compactLocks()
	if err != nil {
		return nil, err
	}
	defer release()
	defer func() { db.metrics.compacted(ctx, rep, err) }()
	if why := db.indexNotKept(); why != "" {
		if err := db.setIndexAsideAlone(why); err != nil {
			return nil, err
		}
	}
	db.compaction.dead.Store(false) // what is deleted from here on waits for the next run
	if _, off := coord.SplitPosition(db.shared.Word(coord.Tail).Load()); opts.Roll && off > segment.HeaderSize {
		if err := db.log.RollNow(); err != nil {
			return nil, err
		}
	}
	// Tombstones must be in the index before the frames they delete go:
	// the index never points into a removed segment or at a dropped frame.
	if err := db.sync(); err != nil {
		return nil, err
	}
	if err := db.checkpointTo(true); err != nil {
		return nil, fmt.Errorf("engine: compact: index checkpoint: %w", err)
	}
	if err := db.catchUp(); err != nil {
		return nil, err
	}
	// The plan reads the log up to the horizon: what every writing
	// process has fed its fold (their follow positions, in shm slots, and
	// this process's). So every tombstone it acts on has been seen by all
	// of them, no process has frames left to fold in a segment it removes
	// or rewrites, and each of them finds the frames it knows of there in
	// the index (docs/MULTIPROCESS.md, Many processes, Maintenance).
	db.follow.mu.Lock()
	followed := db.follow.mu.pos
	db.follow.mu.Unlock()
	horizon := followed
	var cpos uint64 // the index checkpoint, if any
	if db.index != nil {
		// Nor past the index checkpoint: the index must know every
		// tombstone the plan acts on (it never points into a removed
		// segment or at a dropped frame), and hold every live frame a
		// rewrite moves. (The checkpoint is also where the next open
		// starts reading: it must not point into a segment that is removed
		// or rewritten.)
		cp, err := db.index.checkpoint()
		if err != nil {
			return nil, err
		}
		cpos = coord.Position(cp.Segment, cp.Offset)
		horizon = min(db.shared.Horizon(followed), cpos)
	}
	// Only the segments wholly before it may go or move.
	hseg, hoff := coord.SplitPosition(horizon)
	if aseg, _ := coord.SplitPosition(db.durablePos()); hseg < aseg {
		// Held back (another process has not followed, or the checkpoint
		// is behind): the background compactor tries again next time.
		defer db.compaction.dead.Store(true)
	}
	// The segments before hseg are planned: the background compactor
	// runs again once one after them is sealed (to recode it).
	defer db.compaction.planned.Store(hseg)
	ids, err := segment.List(db.opts.FS, db.dir)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	live := db.liveIncarnations()
	db.mu.Unlock()
	// The plan reads no tombstone past the horizon: an incarnation deleted
	// (or replaced) there is not live in this snapshot but not ended in
	// the plan either, so its frames stay.

	p := newPlan(live)
	rep = &CompactReport{}
	for _, id := range ids {
		if id > hseg {
			break
		}
		if id == hseg {
			limit, err := db.horizonLimit(id, hoff, followed, cpos)
			if err != nil {
				return rep, err
			}
			if _, err := db.planSegment(ctx, p, id, limit, false); err != nil {
				return rep, err
			}
			break
		}
		if _, err := db.planSegment(ctx, p, id, 0, true); err != nil {
			return rep, err
		}
		rep.Scanned++
	}
	p.DecideRecode(ratio, recode)
	// The deletes the feed will no longer find, recorded before any frame
	// goes (docs/SEARCH.md, Change feed).
	if err := db.recordPurges(p.Deletes(), ids); err != nil {
		return rep, err
	}

	for _, si := range p.Segments() { // in segment order: frames go before their tombstones
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		switch si.Action {
		case compactplan.Drop:
			if err := db.dropSegment(si.ID); err != nil {
				return rep, err
			}
			rep.Dropped = append(rep.Dropped, si.ID)
			rep.ReclaimedBytes += si.Size
		case compactplan.Rewrite:
			res, err := db.rewriteSegment(p, si)
			if err != nil {
				return rep, err
			}
			rep.Rewritten = append(rep.Rewritten, si.ID)
			if si.Recode {
				rep.Recoded = append(rep.Recoded, si.ID)
			}
			rep.RecodedFrames += res.Recoded
			rep.RecodedFrom += res.RecodedFrom
			rep.RecodedTo += res.RecodedTo
			rep.ReclaimedBytes += si.Size - res.Size
		}
	}
	return rep, nil
}

// setIndexAsideAlone, in a compaction without the index (which runs
// alone: no other process writes the store), moves the store's index file
// to quarantine/ before any frame moves, as the next write open would set
// a stale index aside: the next open of the store by a process alone
// builds a new one from the segments. A change of the layout (that the
// move is) makes read-only processes reload without it. A layout change
// that a compaction which died left (its rewrite intent was in that
// index) ends with it.
func (db *DB) setIndexAsideAlone(why string) error {
	db.shared.LayoutBegin()
	err := moveAside(vfs.Default, db.indexFilePath(), db.quarantineDir())
	db.shared.LayoutEnd()
	if err != nil {
		return fmt.Errorf("engine: compact: setting aside the index this process does not keep: %w", err)
	}
	db.shared.SettleLayout()
	db.opts.Logger.Warn("engine: compacting without the index: it is set aside, and the next open of the store by a process alone rebuilds it", "reason", why, "quarantine", db.quarantineDir())
	return nil
}

// indexFilePath is where the store's index file is: Options.IndexPath,
// or, if none is set (NoIndex), its default place; "" if the store's
// files are not the operating system's (an index is a file of its).
func (db *DB) indexFilePath() string {
	if db.opts.IndexPath != "" {
		return db.opts.IndexPath
	}
	if db.opts.FS != vfs.Default {
		return ""
	}
	return defaultIndexPath(db.dir)
}

// indexNotKept says why this process keeps no index of a store that has
// an index file; "" if it keeps it, or the store has none.
func (db *DB) indexNotKept() string {
	if db.index != nil {
		return ""
	}
	path := db.indexFilePath()
	if path == "" {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	if db.opts.NoIndex {
		return "opened with NoIndex"
	}
	if db.rec != nil && db.rec.rebuild != "" {
		return "it found the index unusable at its open: " + db.rec.rebuild
	}
	return "it found no index at its open"
}

// compactLocks takes what a compaction needs across processes:
// coord.LockCompact, then coord.LockFixed exclusive (no writing process that cannot
// follow a compaction is open, and none opens until it is done), or,
// without an index, coord.LockWriters exclusive: it runs only while no other
// process writes (they would have no index to reload moved frames from).
// Then it settles what a compaction that died left, and brings this
// process's view up to the compactions since its last catch-up. release
// gives the locks back.
func (db *DB) compactLocks() (release func(), err error) {
	sh := db.shared
	if !sh.TryCompact() {
		return nil, fmt.Errorf("engine: compact: %w: another process is compacting the store", store.ErrLocked)
	}
	if sh.CheckWaits() {
		sh.EndCompact()
		return nil, fmt.Errorf("engine: compact: %w: a check of the store waits to keep compactions out", store.ErrLocked)
	}
	other, why := coord.LockFixed, "a process that cannot follow a compaction (more than 64 writing processes, or one without an index) writes the store"
	if db.index == nil {
		other, why = coord.LockWriters, "other processes write the store (without an index, compaction runs while one process writes it)"
	}
	if ok, err := sh.TryLock(other, true); err != nil || !ok {
		db.shared.EndCompact()
		if err == nil {
			err = fmt.Errorf("engine: compact: %w: %s", store.ErrLocked, why)
		}
		return nil, err
	}
	done := func() {
		if other == coord.LockWriters {
			sh.TryLock(coord.LockWriters, false) // back to shared
		} else {
			sh.Unlock(coord.LockFixed)
		}
		db.shared.EndCompact()
	}
	if db.knobs.compactLocked != nil {
		db.knobs.compactLocked()
	}
	if err := db.settleLocked(); err != nil {
		done()
		return nil, err
	}
	// Another process may have compacted since this one last looked.
	db.follow.mu.Lock()
	if db.shared.LayoutMoved(&db.follow.layout) {
		err = db.relayout(db.follow)
	}
	db.follow.mu.Unlock()
	if err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// settleCompaction finishes what a compaction that died left, if no
// compaction runs (see settleLocked).
func (db *DB) settleCompaction() error {
	if !db.compaction.TryLock() {
		return nil // this process compacts: it settles
	}
	defer db.compaction.Unlock()
	if !db.shared.TryCompact() {
		return nil // a compaction runs (or the store has no locks)
	}
	defer db.shared.EndCompact()
	return db.settleLocked()
}

// settleLocked, with coord.LockCompact held, finishes what a compaction that
// died left: its rewrite intent is finished or cleared (see
// settleRewriteIntent), then a layout change it began is ended.
func (db *DB) settleLocked() error {
	if db.indexNotKept() != "" {
		// The intent is in the index: a process that keeps it settles.
		// (Ending the change without applying its moves would let the
		// others read the rewritten segment at the index's old offsets.)
		return nil
	}
	if err := db.settleRewriteIntent(); err != nil {
		return err
	}
	db.shared.SettleLayout()
	return nil
}

// liveIncarnations maps each session to its live incarnation. Called with
// db.mu held.
func (db *DB) liveIncarnations() map[string]uint64 {
	live := map[string]uint64{}
	for _, s := range db.mu.sessions {
		if s.uid != 0 {
			live[s.id] = s.uid
		}
	}
	return live
}

// planSegment reads segment id into p, whole or (limit > 0: the active
// segment's durable part) up to limit, and returns its reader.
func (db *DB) planSegment(ctx context.Context, p *compactplan.Plan, id uint64, limit int64, movable bool) (*segment.Reader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rd, err := db.reader(id)
	if err != nil {
		return nil, err
	}
	if err := rd.Remap(); err != nil { // it may have grown since it was opened, while active
		return nil, err
	}
	return rd, p.Scan(rd, limit, movable)
}

// horizonLimit is how far the plan reads segment id, in which the horizon
// stands at offset off: there, unless that is past the end of the
// segment, sealed. Then the horizon is a stale position: a follow slot that
// a new process has just taken (it stores 0 right after) still showing
// where a process that died (or closed) stood, in a segment rewritten
// shorter since. No live process stands in that segment: its rewrite
// needed every one of them past it, and a process that joined since
// started past it. The plan reads it up to the lowest of the other
// bounds, this process's follow position and the index checkpoint (cpos,
// 0 if none): whole if both are past it.
func (db *DB) horizonLimit(id uint64, off int64, followed, cpos uint64) (int64, error) {
	limit := max(off, segment.HeaderSize)
	if aseg, _ := coord.SplitPosition(db.durablePos()); id >= aseg {
		return limit, nil // (the active segment: positions in it are its frames')
	}
	rd, err := db.reader(id)
	if err != nil {
		return 0, err
	}
	if err := rd.Remap(); err != nil {
		return 0, err
	}
	if limit <= rd.Size() {
		return limit, nil
	}
	bound := followed
	if cpos != 0 {
		bound = min(bound, cpos)
	}
	if bseg, boff := coord.SplitPosition(bound); bseg == id {
		return max(boff, segment.HeaderSize), nil
	}
	return 0, nil
}

// dropSegment removes a sealed segment that holds nothing to keep. The
// reader is closed and the file removed under layoutMu, so that Usage
// (which scans under it) never scans a closed reader, nor opens the file
// again between the two.
func (db *DB) dropSegment(id uint64) error {
	db.layoutMu.Lock()
	db.mu.Lock()
	rd := db.mu.readers[id]
	delete(db.mu.readers, id)
	db.mu.Unlock()
	if rd != nil {
		rd.Close()
	}
	db.shared.LayoutBegin()
	err := db.opts.FS.Remove(db.segPath(id))
	db.layoutMu.Unlock()
	db.shared.LayoutEnd()
	if err != nil {
		return err
	}
	if err := db.opts.FS.SyncDir(db.dir); err != nil {
		db.poisonWith(err)
		return err
	}
	return nil
}

// rewriteSegment rewrites si without the frames the plan drops, its S2
// frames compressed again with zstd (segment.RewriteOptions.Recode: each
// keeps its identity, so the index's moves, the sessions' frame lists and
// the change feed's cursors find it as a copied frame), switches the
// index, the sessions' frame lists and the reader to it, and returns what
// the rewrite wrote.
//
// Once the new file is built and synced, and before its rename, the
// intent is recorded in the index with the moves the rename makes (the
// old and new offsets of every events frame kept), and the layout counter
// turns odd. From the rename until the intent is finished (its moves
// applied to the index in the transaction that clears it), the index's
// offsets into the segment are stale. So a failure before the rename
// clears the intent (nothing changed; if even that fails, whoever settles
// next clears it: see settleRewriteIntent), and a failure after it
// poisons this process, which serves the old file it still has open, and
// leaves the intent and the odd counter to whoever settles next: any
// writing process that finds the counter odd and coord.LockCompact free, or the
// next first opener, finishes the intent.
func (db *DB) rewriteSegment(p *compactplan.Plan, si *compactplan.Segment) (*segment.RewriteResult, error) {
	rd, err := db.reader(si.ID)
	if err != nil {
		return nil, err
	}
	intent := index.Rewrite{Segment: si.ID, Generation: rd.Header().Generation + 1, HasMoves: true}
	// Every events frame kept may have to move in the index, whoever it
	// belongs to now: the intent's moves apply where the index still
	// holds them at the old offset.
	var ferr error
	at := 0
	var owners []uint64 // the incarnation of each of intent.Moves
	layoutOdd := false
	res, err := segment.RewriteWith(db.opts.FS, db.dir, rd, segment.RewriteOptions{Recode: true, Keep: func(fi *segment.FrameInfo) bool {
		keep, err := p.Stays(si, at, fi)
		if err != nil && ferr == nil {
			ferr = err
		}
		if keep && fi.Kind == segment.KindEvents {
			intent.Moves = append(intent.Moves, index.Move{ID: string(fi.Key), FirstSeq: fi.FirstSeq, From: fi.Offset})
			owners = append(owners, p.Owner(si, at))
		}
		at++
		return keep
	}, BeforeRename: func(res *segment.RewriteResult) error {
		if ferr != nil {
			// The plan recorded every frame of the sealed file; one that is
			// not what it read there means the file changed under it: the
			// new file cannot be trusted.
			err := fmt.Errorf("engine: compact: rewrite segment %d: %w", si.ID, ferr)
			db.poisonWith(err)
			return err
		}
		for i := range intent.Moves {
			m := &intent.Moves[i]
			m.To = res.Moved[m.From]
			m.Size = uint32(res.Sizes[m.From].New) // (0: not recoded, the same size)
		}
		if err := db.keptLive(si.ID, res.Moved); err != nil {
			return err
		}
		if db.index != nil {
			if err := db.index.use(true, func(x *index.Index) error { return x.BeginRewrite(intent) }); err != nil {
				return fmt.Errorf("engine: compact: %w", err)
			}
		}
		// Other processes see the segment's layout change from here until
		// the intent is finished.
		db.shared.LayoutBegin()
		layoutOdd = true
		return nil
	}})
	if err != nil {
		if errors.Is(err, segment.ErrRewriteDir) {
			db.poisonWith(err) // renamed or not: whoever settles next finds out
			return nil, err
		}
		// segment.Rewrite removed its file: nothing was renamed into place,
		// the index is still right.
		err = fmt.Errorf("engine: compact: rewrite segment %d: %w", si.ID, err)
		if layoutOdd && db.index != nil {
			if cerr := db.index.use(true, (*index.Index).ClearRewrite); cerr != nil {
				// The counter stays odd: whoever settles next clears it.
				return nil, errors.Join(err, fmt.Errorf("clearing the rewrite intent (whoever settles next clears it): %w", cerr))
			}
		}
		if layoutOdd {
			db.shared.LayoutEnd()
		}
		return nil, err
	}
	if db.knobs.rewrite != nil {
		if err := db.knobs.rewrite(si.ID); err != nil {
			return nil, err
		}
	}
	nr, err := db.openSegment(si.ID)
	if err != nil {
		db.poisonWith(err) // the segment under its name is not what was just written
		return nil, err
	}
	// checkpoints before layoutMu (the lock order: a checkpoint holds
	// checkpoints then appendMu, the undo of a lost write appendMu then
	// layoutMu).
	db.checkpoints.Lock()
	defer db.checkpoints.Unlock()
	db.layoutMu.Lock()
	defer db.layoutMu.Unlock()
	// The index first: if it cannot learn the new offsets, the old file
	// keeps serving (reads of sessions not loaded yet take their offsets
	// from the index; layoutMu keeps them out until both agree).
	if db.index != nil {
		if err := db.index.use(true, func(x *index.Index) error { return x.FinishRewrite(intent) }); err != nil {
			nr.Close()
			err = fmt.Errorf("engine: compact: index relocation for segment %d (whoever settles next finishes it): %w", si.ID, err)
			db.poisonWith(err)
			return nil, err
		}
	}
	// The frames recoded change size: so do the bytes of the incarnations
	// they are of (a fork's size counts only its own frames), in memory
	// as in the index (FinishRewrite).
	grew := map[uint64]int64{}
	for i, m := range intent.Moves {
		if r, ok := res.Sizes[m.From]; ok && owners[i] != 0 {
			grew[owners[i]] += r.New - r.Old
		}
	}
	db.mu.Lock()
	for _, s := range db.mu.sessions {
		if d := grew[s.uid]; d != 0 && s.uid != 0 {
			s.size += d
			s.idxSize += d
		}
		for i := range s.frames {
			if f := &s.frames[i]; f.seg == si.ID {
				if r, ok := res.Sizes[f.off]; ok {
					f.size = uint32(r.New)
				}
				f.off = res.Moved[f.off]
			}
		}
	}
	old := db.mu.readers[si.ID]
	db.mu.readers[si.ID] = nr
	db.mu.Unlock()
	if old != nil {
		old.Close()
	}
	db.shared.LayoutEnd()
	return res, nil
}

// keptLive checks, before a rewrite of segment seg is renamed into place,
// that it keeps every frame this process's sessions hold there (moved:
// old offset to new). A frame missing is a bug in the plan: never
// silently serve a wrong frame.
func (db *DB) keptLive(seg uint64, moved map[int64]int64) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, s := range db.mu.sessions {
		for _, f := range s.frames {
			if _, ok := moved[f.off]; f.seg == seg && !ok {
				err := &store.CorruptionError{Path: db.segPath(seg), Reason: fmt.Sprintf("compaction dropped a live frame: session %q: frame of seqs %d+%d at %d was not kept", s.id, f.first, f.count, f.off)}
				db.poisonLocked(err)
				return err
			}
		}
	}
	return nil
}

// settleRewriteIntent deals with a rewrite intent that a compaction, of
// this process or of one that died, left in the index. If the segment on
// disk has not reached the intent's generation, the rename never happened
// and the intent is cleared. Otherwise its moves are applied
// (FinishRewrite), after a directory sync: the compaction may have died,
// or failed, before the rename was durable. An intent recorded without
// moves (by an older build) leaves the index stale for that segment until
// the next first opener rebuilds it: this poisons the store.
func (db *DB) settleRewriteIntent() error {
	if db.index == nil {
		return nil
	}
	return db.index.use(true, func(x *index.Index) error { return db.settleRewriteIn(x) })
}

func (db *DB) settleRewriteIn(x *index.Index) error {
	rw, ok, err := x.Rewrite()
	if err != nil || !ok {
		return err
	}
	r, err := db.openSegment(rw.Segment)
	if err != nil {
		err = fmt.Errorf("engine: compact: segment %d of a recorded rewrite intent: %w", rw.Segment, err)
		db.poisonWith(err)
		return err
	}
	landed := r.Header().Generation >= rw.Generation
	r.Close()
	settled, err := db.settleIntent(x, rw, landed)
	if err == nil && !settled {
		err = fmt.Errorf("engine: compact: segment %d was rewritten but the index does not know its offsets (the next first open rebuilds the index)", rw.Segment)
		db.poisonWith(err)
	}
	return err
}

// settleIntent ends the rewrite intent rw recorded in x, whose segment
// has (landed) or has not reached the intent's generation: cleared if not
// (the rename never happened); if so, its moves applied, after a
// directory sync (the compaction may have died, or failed, before the
// rename was durable). It reports false, and changes nothing, for a
// landed intent recorded without moves (by an older build): the index
// can only be rebuilt.
func (db *DB) settleIntent(x *index.Index, rw index.Rewrite, landed bool) (bool, error) {
	switch {
	case !landed:
		if err := x.ClearRewrite(); err != nil {
			return false, fmt.Errorf("engine: clearing the intent of a rewrite that never happened: %w", err)
		}
		return true, nil
	case !rw.HasMoves:
		return false, nil
	}
	if err := db.opts.FS.SyncDir(db.dir); err != nil {
		db.poisonWith(err)
		return false, err
	}
	if err := x.FinishRewrite(rw); err != nil {
		return false, fmt.Errorf("engine: finishing the rewrite of segment %d that a compaction left: %w", rw.Segment, err)
	}
	return true, nil
}

// planFold is the replay fold as compaction's plan attributes frames
// with it (an attributing fold: no frame lists, no index entries).
type planFold struct{ f *fold }

func newPlan(live map[string]uint64) *compactplan.Plan {
	return compactplan.New(live, planFold{newFold(map[string]*session{}, false)})
}

func (a planFold) Frame(r *segment.Reader, seg uint64, fi *segment.FrameInfo) (compactplan.Step, error) {
	st, err := a.f.frame(r, seg, fi)
	return compactplan.Step{Owner: st.owner, Ends: st.ends}, err
}

func (a planFold) ForkOf() map[uint64]uint64 { return a.f.forkOf }

// compactLoop is the background compactor: every CompactInterval, if
// something died since the last compaction or a segment was sealed since
// its plan (whose S2 frames it recodes), it runs Compact (without rolling
// the active segment). Close cancels a run in progress.
func (db *DB) compactLoop(ctx context.Context) {
	defer db.wg.Done()
	t := time.NewTicker(db.opts.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Something died, or a segment was sealed since the last plan
		// (its S2 frames to recode).
		if aseg, _ := coord.SplitPosition(db.durablePos()); !db.compaction.dead.Load() && aseg <= db.compaction.planned.Load() {
			continue
		}
		rep, err := db.Compact(ctx, CompactOptions{})
		switch {
		case errors.Is(err, store.ErrClosed):
			return // (Close began: it cancels ctx next)
		case err != nil && ctx.Err() == nil && db.poisoned():
			// Nothing succeeds on a failed store until it is reopened.
			db.opts.Logger.Warn("engine: background compaction stopped: the store failed", "error", err)
			return
		case errors.Is(err, store.ErrLocked):
			db.compaction.dead.Store(true) // other processes write the store: next time
		case err != nil && ctx.Err() == nil:
			db.compaction.dead.Store(true) // try again next time
			db.opts.Logger.Warn("engine: background compaction failed", "error", err)
		case err == nil && len(rep.Dropped)+len(rep.Rewritten) > 0:
			db.opts.Logger.Info("engine: background compaction", "dropped", len(rep.Dropped), "rewritten", len(rep.Rewritten), "recoded", len(rep.Recoded), "reclaimed_bytes", rep.ReclaimedBytes)
		}
	}
}

// poisoned reports whether the store failed (see poisonWith).
func (db *DB) poisoned() bool { return db.poisonErr() != nil }

// SegmentUsage is how much of one segment file is alive.
type SegmentUsage struct {
	ID         uint64
	Generation uint64 // 0 as written; each compaction rewrite adds one
	Bytes      int64  // file size
	// LiveBytes is the bytes of frames of live incarnations: what a
	// rewrite would keep, tombstones and the file's header and seal aside.
	LiveBytes int64
}

// Usage reports, for every segment, the bytes its live sessions take: the
// live ratio Compact's LiveRatio is compared with. It reads every segment
// up to the active one as of its start (that one up to its durable end;
// one rolled to since is not reported), like Compact's planning, and
// works on a read-only DB. It waits for a compaction in progress, and
// holds the next one back until it is done.
func (db *DB) Usage(ctx context.Context) ([]SegmentUsage, error) {
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	db.compaction.Lock()
	defer db.compaction.Unlock()
	if err := db.lockOpen(ctx); err != nil {
		return nil, err
	}
	live := db.liveIncarnations()
	aid, durable := coord.SplitPosition(db.durablePos())
	db.mu.Unlock()
	ids, err := segment.List(db.opts.FS, db.dir)
	if err != nil {
		return nil, err
	}
	p := newPlan(live)
	var out []SegmentUsage
	for _, id := range ids {
		if aid != 0 && id > aid {
			// Rolled to (or prepared) since durable was read: its frames
			// may continue frames of aid past durable, which its scan
			// leaves out. Like Compact's plan, stop at the active segment.
			break
		}
		var limit int64
		if id == aid {
			limit = durable
		}
		u, err := db.segmentUsage(ctx, p, id, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	// A deleted parent of a live fork is alive too: compaction keeps it
	// (known once the fork's header is read, after the parent's frames).
	for i, n := range p.ForkParentBytes() {
		out[i].LiveBytes += n
	}
	return out, nil
}

// segmentUsage scans segment id into p for Usage, under layoutMu (the
// undo of a lost write cuts the active segment under it). limit is
// the durable end of the segment if it was the active one; if it has been
// sealed since (and maybe rewritten, shorter), it is read whole.
func (db *DB) segmentUsage(ctx context.Context, p *compactplan.Plan, id uint64, limit int64) (SegmentUsage, error) {
	db.layoutMu.RLock()
	defer db.layoutMu.RUnlock()
	if limit > 0 {
		if seg, _ := coord.SplitPosition(db.durablePos()); seg != id {
			limit = 0 // sealed since
		}
	}
	rd, err := db.planSegment(ctx, p, id, limit, false)
	if err != nil {
		return SegmentUsage{}, err
	}
	segs := p.Segments()
	si := segs[len(segs)-1]
	return SegmentUsage{ID: id, Generation: rd.Header().Generation, Bytes: si.Size, LiveBytes: p.LiveBytes(si)}, nil
}

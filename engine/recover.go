package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/internal/vfs"
	"github.com/seglog/seglog/segment"
)

// recover loads the index and replays the segments after its checkpoint.
func (db *DB) recover() error {
	fsys := db.opts.FS
	var cp index.Checkpoint
	if !db.opts.NoIndex {
		if db.opts.ReadOnly {
			if _, err := os.Stat(db.opts.IndexPath); err != nil {
				db.opts.NoIndex = true // none yet: read every segment
			}
		}
	}
	if !db.opts.NoIndex {
		idx, err := index.Open(db.opts.IndexPath, &index.Options{ReadOnly: db.opts.ReadOnly})
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		db.idx = idx
		if err := db.checkRewriteIntent(); err != nil {
			return err
		}
	}
	if !db.opts.NoIndex { // again: a read-only open of a stale index drops it
		idx := db.idx
		var err error
		if cp, err = idx.Checkpoint(); err != nil {
			return err
		}
		err = idx.Sessions(func(is index.Session) error {
			db.sessions[is.ID] = &session{
				id: is.ID, hdrRaw: is.Header, inherited: is.Inherited, uid: is.UID,
				next: is.Events, framed: is.Events, size: is.Size, idxNext: is.Events, idxSize: is.Size,
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if !db.opts.ReadOnly {
		if n, err := segment.RemoveRewrites(fsys, db.dir); err != nil {
			return fmt.Errorf("engine: removing unfinished rewrites: %w", err)
		} else if n > 0 {
			db.opts.Logger.Warn("engine: removed unfinished segment rewrites of a compaction cut short", "files", n)
		}
	}
	ids, err := segment.List(fsys, db.dir)
	if err != nil {
		return fmt.Errorf("engine: list %s: %w", db.dir, err)
	}
	if ids, err = db.dropUnusedTail(ids); err != nil {
		return err
	}
	if cp.Segment != 0 && !slices.Contains(ids, cp.Segment) {
		return &CorruptionError{Path: db.segPath(cp.Segment), Reason: "segment named by the index checkpoint is missing"}
	}
	// Sessions the index knows have their frames in the index; every
	// session first met in the scan has all of them in memory.
	for i, id := range ids {
		last := i == len(ids)-1
		if id < cp.Segment {
			continue
		}
		path := db.segPath(id)
		r, err := db.openSegment(id)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		db.readers[id] = r
		opts := segment.ScanOptions{}
		if id == cp.Segment {
			opts.From, opts.Durable = cp.Offset, cp.Offset
		}
		res, err := r.Scan(opts, func(fi *segment.FrameInfo) error { return db.replayFrame(r, id, fi) })
		if err != nil {
			return err
		}
		if !last && (!res.Sealed || res.Torn) {
			return &CorruptionError{Path: path, Offset: res.End, Reason: "segment before the newest is not sealed: " + res.TornReason}
		}
		if last && db.opts.ReadOnly {
			break // served as it is: a torn tail is simply not read
		}
		if last {
			if res.Torn {
				db.opts.Logger.Warn("engine: recovered a torn tail; incomplete tail bytes were discarded",
					"segment", path, "offset", res.End, "reason", res.TornReason)
			}
			if err := db.resumeActive(id, res); err != nil {
				return err
			}
		}
	}
	for key, o := range db.orphans {
		return &CorruptionError{Path: o.path, Offset: o.off, Reason: fmt.Sprintf("events of session %q before its header", key)}
	}
	db.orphans = nil
	if db.roller == nil && !db.opts.ReadOnly {
		next := uint64(1)
		if len(ids) > 0 {
			next = ids[len(ids)-1] + 1
		}
		w, err := segment.Create(fsys, db.segPath(next), next, db.opts.writerOptions())
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		db.roller = segment.NewRoller(fsys, db.dir, w, db.opts.writerOptions())
	}
	return db.abandonMigrations()
}

// checkRewriteIntent handles a compaction's rewrite that a crash cut
// short (see Compact). If the rewritten segment is in place, the index's
// offsets into it are stale: the index is rebuilt from the segments (read
// only: not used). Otherwise the rewrite changed nothing and its intent is
// cleared.
func (db *DB) checkRewriteIntent() error {
	rw, ok, err := db.idx.Rewrite()
	if err != nil || !ok {
		return err
	}
	landed := true // a segment that cannot be read: rebuild, and let the replay report it
	if r, err := segment.OpenReader(db.opts.FS, db.segPath(rw.Segment)); err == nil {
		landed = r.Header().Generation >= rw.Generation
		r.Close()
	}
	switch {
	case !landed && db.opts.ReadOnly:
		return nil
	case !landed:
		return db.idx.ClearRewrite()
	}
	db.opts.Logger.Warn("engine: a compaction was cut short after rewriting a segment; rebuilding the index from the segments",
		"segment", db.segPath(rw.Segment), "generation", rw.Generation)
	if err := db.idx.Close(); err != nil {
		return err
	}
	db.idx = nil
	if db.opts.ReadOnly {
		db.opts.NoIndex = true // every segment is read instead
		return nil
	}
	if err := index.Remove(db.opts.IndexPath); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	idx, err := index.Open(db.opts.IndexPath, nil)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	db.idx = idx
	return nil
}

// abandonMigrations ends the replay of migrations a crash cut short: their
// new incarnation never took over (the old one is the session), and a
// durable tombstone of it tells later replays so before anything else is
// appended. Read-only, they are just ignored.
func (db *DB) abandonMigrations() error {
	if len(db.replacing) == 0 || db.opts.ReadOnly {
		db.replacing = nil
		return nil
	}
	keys := slices.Sorted(maps.Keys(db.replacing))
	for _, key := range keys {
		rp := db.replacing[key]
		e, err := db.enc.Delete(key, rp.s.uid)
		if err != nil {
			return err
		}
		if _, _, err := db.roller.AppendEncoded(e); err != nil {
			return fmt.Errorf("engine: abandoning the migration of %q: %w", key, err)
		}
		db.opts.Logger.Warn("engine: a migration was cut short; the session stays in its old format", "session", key)
	}
	db.replacing = nil
	if err := db.roller.Sync(); err != nil {
		return fmt.Errorf("engine: abandoning migrations: %w", err)
	}
	return nil
}

// dropUnusedTail removes, from the end of the segment list, segments that
// never held data: a newest segment whose creation did not finish (see
// isUnfinishedSegment), and a newest segment prepared ahead of a roll that
// never came (a valid header, no frame, after an unsealed segment).
// Removing them is safe: no acknowledged frame was ever in them.
func (db *DB) dropUnusedTail(ids []uint64) ([]uint64, error) {
	fsys := db.opts.FS
	remove := func(path string) error {
		if db.opts.ReadOnly {
			return nil // left in place; just not read
		}
		if err := fsys.Remove(path); err != nil {
			return err
		}
		return fsys.SyncDir(db.dir)
	}
	for len(ids) > 0 {
		path := db.segPath(ids[len(ids)-1])
		drop := false
		r, err := segment.OpenReader(fsys, path)
		switch {
		case err != nil:
			drop = isUnfinishedSegment(fsys, path, err)
		case len(ids) > 1:
			empty, err := noFrames(r)
			if err == nil && empty {
				// Torn is allowed: garbage from its unsynced zero fill. The
				// previous segment unsealed proves no roll ever made this
				// one active (a roll syncs the seal first).
				sealed, perr := isSealed(fsys, db.segPath(ids[len(ids)-2]))
				drop = perr == nil && !sealed
			}
		}
		if r != nil {
			r.Close()
		}
		if !drop {
			return ids, nil
		}
		if err := remove(path); err != nil {
			return nil, err
		}
		ids = ids[:len(ids)-1]
	}
	return ids, nil
}

var errStopScan = errors.New("stop")

// noFrames reports whether the segment holds no valid frame (a sealed
// segment holds its seal frame at least).
func noFrames(r *segment.Reader) (bool, error) {
	found := false
	_, err := r.Scan(segment.ScanOptions{}, func(*segment.FrameInfo) error {
		found = true
		return errStopScan // the first frame answers the question
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return false, err
	}
	return !found, nil
}

func isSealed(fsys vfs.FS, path string) (bool, error) {
	r, err := segment.OpenReader(fsys, path)
	if err != nil {
		return false, err
	}
	defer r.Close()
	res, err := r.Scan(segment.ScanOptions{}, nil)
	return res.Sealed, err
}

// isUnfinishedSegment reports whether err from opening the newest segment
// means its creation never completed: the header is bad and the file holds
// no valid frame. Create syncs the header before the first frame is
// appended, and an acknowledged frame is a valid frame, so such a file
// never held acknowledged data. A bad header with a frame after it is
// corruption.
//
// A garbled header may also read as another format version; that counts
// only if the header's checksum does not match (a real header of another
// version is refused, never removed).
func isUnfinishedSegment(fsys vfs.FS, path string, err error) bool {
	var ce *CorruptionError
	var fe *FormatError
	switch {
	case errors.As(err, &ce) && ce.Offset == 0:
	case errors.As(err, &fe):
	default:
		return false
	}
	b, rerr := vfs.ReadFile(fsys, path)
	if rerr != nil {
		return false
	}
	if fe != nil && segment.HeaderChecksumOK(b) {
		return false
	}
	return !segment.MayHoldFrames(b)
}

func (db *DB) resumeActive(id uint64, res segment.ScanResult) error {
	if res.Sealed {
		return nil // a new segment is created after the loop
	}
	w, err := segment.OpenWriter(db.opts.FS, db.segPath(id), res, db.opts.writerOptions())
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	db.roller = segment.NewRoller(db.opts.FS, db.dir, w, db.opts.writerOptions())
	return nil
}

// replayFrame applies one frame found by the open scan.
func (db *DB) replayFrame(r *segment.Reader, seg uint64, fi *segment.FrameInfo) error {
	corrupt := func(reason string) error {
		return &CorruptionError{Path: r.Path(), Offset: fi.Offset, Reason: reason}
	}
	ref := frameRef{first: fi.FirstSeq, count: fi.Count, seg: seg, off: fi.Offset, size: uint32(fi.Size)}
	switch fi.Kind {
	case segment.KindHeader:
		f, err := r.ReadFrame(fi.Offset)
		if err != nil {
			return err
		}
		var rec headerRecord
		if err := json.Unmarshal(f.Payload, &rec); err != nil {
			return corrupt("session header record: " + err.Error())
		}
		if rec.Header.ID != f.Session {
			return corrupt(fmt.Sprintf("header of session %q stored under key %q", rec.Header.ID, f.Session))
		}
		if rec.UID == 0 {
			return corrupt(fmt.Sprintf("header of session %q has no incarnation id", f.Session))
		}
		if db.replacing[f.Session] != nil {
			return corrupt(fmt.Sprintf("header of session %q inside its unfinished migration", f.Session))
		}
		old, exists := db.sessions[f.Session]
		if exists && (rec.Replaces == 0 || old.uid != rec.Replaces) {
			return corrupt(fmt.Sprintf("second header for session %q", f.Session))
		}
		if o := db.orphans[f.Session]; o != nil {
			return &CorruptionError{Path: o.path, Offset: o.off, Reason: fmt.Sprintf("events of session %q without its header", f.Session)}
		}
		s := &session{id: f.Session, hdr: rec.Header, inherited: rec.Inherited, uid: rec.UID, loaded: true, size: fi.Size}
		if rec.Replaces == 0 {
			db.sessions[s.id] = s
			db.pend = append(db.pend, pendFrame{s: s, header: true, ref: ref})
			return nil
		}
		// A migration: the new incarnation takes over once all its events
		// are replayed. (The old one may be gone already: compaction drops
		// a replaced incarnation's segments.)
		rp := &replacement{s: s, old: old, want: rec.Events, start: ref}
		rp.pend = append(rp.pend, pendFrame{s: s, header: true, ref: ref})
		if db.replacing == nil {
			db.replacing = map[string]*replacement{}
		}
		db.replacing[s.id] = rp
		db.replayReplaced(rp)
	case segment.KindDelete:
		f, err := r.ReadFrame(fi.Offset)
		if err != nil {
			return err
		}
		if rp := db.replacing[f.Session]; rp != nil {
			if rp.s.uid != binary.LittleEndian.Uint64(f.Payload) {
				return corrupt(fmt.Sprintf("tombstone of session %q inside its unfinished migration", f.Session))
			}
			// An abandoned migration (cut by a crash): the old incarnation
			// stays.
			delete(db.replacing, f.Session)
			return nil
		}
		s, ok := db.sessions[f.Session]
		if !ok {
			// Its header (and frames) were in segments compaction dropped:
			// the orphaned frames seen since belong to it.
			delete(db.orphans, f.Session)
			return nil
		}
		if s.uid != binary.LittleEndian.Uint64(f.Payload) {
			return corrupt(fmt.Sprintf("tombstone of session %q, which does not exist in that incarnation", f.Session))
		}
		s.erased = true
		delete(db.sessions, s.id)
		db.pend = append(db.pend, pendFrame{s: s, delete: true, ref: ref})
	case segment.KindEvents:
		if rp := db.replacing[string(fi.Key)]; rp != nil {
			s := rp.s
			if fi.FirstSeq != s.next || s.next+uint64(fi.Count) > rp.want {
				return corrupt(fmt.Sprintf("session %q: migrated frame of seqs %d+%d, expected %d of %d", s.id, fi.FirstSeq, fi.Count, s.next, rp.want))
			}
			rp.pend = append(rp.pend, s.addFrame(ref))
			s.next = s.framed
			db.replayReplaced(rp)
			return nil
		}
		s, ok := db.sessions[string(fi.Key)]
		if !ok {
			// Frames of a deleted incarnation whose header compaction
			// dropped are fine if its tombstone follows; the end of the
			// replay checks that one did.
			if db.orphans == nil {
				db.orphans = map[string]*orphan{}
			}
			if db.orphans[string(fi.Key)] == nil {
				db.orphans[string(fi.Key)] = &orphan{path: r.Path(), off: fi.Offset}
			}
			return nil
		}
		if fi.FirstSeq != s.next {
			return corrupt(fmt.Sprintf("session %q: frame starts at seq %d, expected %d", s.id, fi.FirstSeq, s.next))
		}
		db.pend = append(db.pend, s.addFrame(ref)) // s.frames: all of them, or those after the index's
		s.next = s.framed
	}
	return nil
}

// replacement is a migration met during replay whose events are not all
// replayed yet.
type replacement struct {
	s     *session // the new incarnation
	old   *session // the one it replaces; nil if compaction dropped it
	want  uint64   // its events
	start frameRef // its header frame
	pend  []pendFrame
}

// replayReplaced switches to the new incarnation of a migration once all
// its events are replayed.
func (db *DB) replayReplaced(rp *replacement) {
	if rp.s.next < rp.want {
		return
	}
	delete(db.replacing, rp.s.id)
	if rp.old != nil {
		rp.old.erased = true
		db.pend = append(db.pend, pendFrame{s: rp.old, delete: true, ref: rp.start})
	}
	db.sessions[rp.s.id] = rp.s
	db.pend = append(db.pend, rp.pend...)
}


package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/seglog/seglog/segment"
)

// CompactOptions configures Compact.
type CompactOptions struct {
	// Roll seals the active segment first (if it holds any frame), so that
	// the deleted data in it can be reclaimed too. The next append goes to
	// a fresh segment.
	Roll bool
}

// CompactReport says what Compact reclaimed.
type CompactReport struct {
	Dropped        []uint64 // segment IDs removed
	ReclaimedBytes int64
	Scanned        int // sealed segments examined
}

// Compact reclaims the segments that hold nothing alive any more: every
// frame in them belongs to a deleted incarnation, and every tombstone in
// them deletes an incarnation none of whose frames remain elsewhere. Such
// a segment is removed whole (and the directory synced after each one, in
// segment order, so that a crash at any point leaves a store that opens to
// the same sessions). Appends go on meanwhile; only sealed segments are
// touched. Segments that hold some live data are left as they are (the
// rewriting of partly live segments is not implemented).
func (db *DB) Compact(ctx context.Context, opts CompactOptions) (*CompactReport, error) {
	if db.opts.ReadOnly {
		return nil, ErrReadOnlyStore
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil, ErrClosed
	}
	r := db.roller
	db.mu.Unlock()
	db.compactMu.Lock()
	defer db.compactMu.Unlock()
	db.dead.Store(false) // what is deleted from here on waits for the next run
	if opts.Roll && r.Active().Size() > segment.HeaderSize {
		if err := r.Roll(); err != nil {
			db.poisonWith(err)
			return nil, err
		}
	}
	// Tombstones must be in the index before the frames they delete go:
	// the index never points into a removed segment.
	if err := db.sync(); err != nil {
		return nil, err
	}
	if err := db.checkpoint(); err != nil {
		return nil, fmt.Errorf("engine: compact: index checkpoint: %w", err)
	}
	active := r.Active().Header().ID
	ids, err := segment.List(db.opts.FS, db.dir)
	if err != nil {
		return nil, err
	}
	live := map[uint64]bool{}
	db.mu.Lock()
	for _, s := range db.sessions {
		live[s.uid] = true
	}
	db.mu.Unlock()

	type segInfo struct {
		id    uint64
		size  int64
		alive bool           // holds a frame of a live incarnation
		tombs []uint64       // incarnations its tombstones delete
		holds map[uint64]int // frames per incarnation
	}
	var segs []*segInfo
	current := map[string]uint64{} // key -> incarnation of the frames that follow
	rep := &CompactReport{}
	for _, id := range ids {
		if id >= active {
			break
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rd, err := db.reader(id)
		if err != nil {
			return rep, err
		}
		if err := rd.Remap(); err != nil { // it may have grown since it was opened, while active
			return rep, err
		}
		si := &segInfo{id: id, size: rd.Size(), holds: map[uint64]int{}}
		res, err := rd.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			key := string(fi.Key)
			switch fi.Kind {
			case segment.KindHeader:
				f, err := rd.ReadFrame(fi.Offset)
				if err != nil {
					return err
				}
				uid, replaces, err := headerUID(f.Payload)
				if err != nil {
					return &CorruptionError{Path: rd.Path(), Offset: fi.Offset, Reason: err.Error()}
				}
				current[key] = uid
				si.holds[uid]++
				if replaces != 0 {
					// A migration's header deletes the incarnation it
					// replaces, like a tombstone.
					si.tombs = append(si.tombs, replaces)
				}
			case segment.KindEvents:
				si.holds[current[key]]++
			case segment.KindDelete:
				f, err := rd.ReadFrame(fi.Offset)
				if err != nil {
					return err
				}
				si.tombs = append(si.tombs, binary.LittleEndian.Uint64(f.Payload))
			}
			return nil
		})
		if err != nil {
			return rep, err
		}
		if !res.Sealed {
			return rep, &CorruptionError{Path: rd.Path(), Offset: res.End, Reason: "segment before the active one is not sealed"}
		}
		for uid := range si.holds {
			if live[uid] || uid == 0 {
				si.alive = true // uid 0: frames whose header is not in a sealed segment seen here
			}
		}
		segs = append(segs, si)
		rep.Scanned++
	}
	// A dead segment may go unless a tombstone in it deletes an incarnation
	// that still has frames in a segment that stays (replay would meet
	// those frames without their tombstone). Iterate to a fixed point.
	drop := map[uint64]bool{}
	for _, si := range segs {
		drop[si.id] = !si.alive
	}
	for changed := true; changed; {
		changed = false
		for _, si := range segs {
			if !drop[si.id] {
				continue
			}
			// Nor may it take away part of an incarnation whose other frames
			// stay: replay would find them without their header.
			uids := append([]uint64(nil), si.tombs...)
			for uid := range si.holds {
				uids = append(uids, uid)
			}
			for _, uid := range uids {
				for _, other := range segs {
					if drop[si.id] && other != si && !drop[other.id] && other.holds[uid] > 0 {
						drop[si.id], changed = false, true
					}
				}
			}
		}
	}
	for _, si := range segs { // in segment order: frames go before their tombstones
		if !drop[si.id] {
			continue
		}
		db.mu.Lock()
		if rd := db.readers[si.id]; rd != nil {
			delete(db.readers, si.id)
			rd.Close()
		}
		db.mu.Unlock()
		if err := db.opts.FS.Remove(db.segPath(si.id)); err != nil {
			return rep, err
		}
		if err := db.opts.FS.SyncDir(db.dir); err != nil {
			db.poisonWith(err)
			return rep, err
		}
		rep.Dropped = append(rep.Dropped, si.id)
		rep.ReclaimedBytes += si.size
	}
	return rep, nil
}

// headerUID returns the incarnation of a header record, and the one it
// replaces if it is a migration's.
// compactLoop is the background compactor: every CompactInterval, if
// something died since the last compaction, it runs Compact (without
// rolling the active segment). Close cancels a run in progress.
func (db *DB) compactLoop() {
	defer db.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-db.stop
		cancel()
	}()
	t := time.NewTicker(db.opts.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
		}
		if !db.dead.Load() {
			continue
		}
		rep, err := db.Compact(ctx, CompactOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			db.dead.Store(true) // try again next time
			db.opts.Logger.Warn("engine: background compaction failed", "error", err)
		case err == nil && len(rep.Dropped) > 0:
			db.opts.Logger.Info("engine: background compaction", "segments", len(rep.Dropped), "reclaimed_bytes", rep.ReclaimedBytes)
		}
	}
}

func headerUID(payload []byte) (uid, replaces uint64, err error) {
	var rec struct {
		UID      uint64 `json:"uid"`
		Replaces uint64 `json:"replaces"`
	}
	if err := json.Unmarshal(payload, &rec); err != nil || rec.UID == 0 {
		return 0, 0, errors.New("header record without an incarnation id")
	}
	return rec.UID, rec.Replaces, nil
}

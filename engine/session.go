package engine

import (
	"fmt"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// session is the in-memory state of one session. Guarded by DB.mu.
type session struct {
	id string
	// hdr is the header; nil while hdrRaw holds the header record as the
	// index holds it, decoded on first use (see DB.header)
	hdr       *store.Header
	hdrRaw    []byte
	inherited uint64
	// fork: a fork that shares its parent's frames (store.HeaderRecord):
	// its frames before inherited are theirs. Known once the header is
	// decoded: a session loaded from the index holds its
	// header record undecoded until first used.
	fork      []store.ForkLink
	uid       uint64        // location of the header frame; 0 while pending
	next      uint64        // next seq: framed + len(open)
	framed    uint64        // events already in frames
	open      []event.Event // appended, not yet encoded into a frame (the caller's copies)
	openBytes int
	size      int64
	frames    []frameRef // every frame if loaded, else those after the index's
	owner     *Handle    // the write handle holding the lease, if any
	pending   bool       // created here, header frame not yet appended
	loaded    bool       // frames holds every frame
	erased    bool       // a pending session its creator closed
	relisted  bool       // queued in DB.mu.byUpdated (see updatedOrder)

	// broken: a fork whose parent was not in the log before its header
	// (see fold.forkHeader)
	broken *orphan

	// checked: the first events, verified against a catalog with
	// fingerprint checkedCat and the seed rules (see opencheck.go)
	checked    uint64
	checkedCat uint64

	// turnFrom: the seq, plus one, of a stored turn/start or turn/end,
	// where a fold of the open turn may start (0: none known, from seq
	// 0); idxTurnFrom: the one its index record holds (see turn.go)
	turnFrom    uint64
	idxTurnFrom uint64

	idxNext uint64 // events the index holds (frames in pend are not counted)
	idxSize int64

	// What List shows of the log (Snapshot.Title, UpdatedAt), as of its
	// first metaAt events (see listing.go): the title of the latest
	// session/title among them, and the time of event metaAt-1.
	title     string
	updatedAt int64
	metaAt    uint64
}

type frameRef struct {
	first uint64
	count uint32
	seg   uint64
	off   int64
	size  uint32
}

// pos is the frame's position in the log (see position).
func (r frameRef) pos() uint64 { return coord.Position(r.seg, r.off) }

// addFrame records a frame of s's events, which continue its framed seqs,
// and returns its entry for the index. Called with db.mu held (or during
// replay).
func (s *session) addFrame(ref frameRef) pendFrame {
	s.framed += uint64(ref.count)
	s.size += int64(ref.size)
	s.frames = append(s.frames, ref)
	return pendFrame{s: s, ref: ref}
}

type pendFrame struct {
	s      *session
	header bool
	delete bool // a tombstone of s
	ref    frameRef
	// groupEnd, on the first entry of a migration or a fork, is its last
	// frame: the index takes the group whole or not at all.
	groupEnd  *frameRef
	migration bool // an entry of a migration's group
	// metaAt, if not 0, is the frame's end, and title and updatedAt the
	// session's listing as of it (noteFrame), for the index record.
	metaAt    uint64
	title     string
	updatedAt int64
}

// header returns the session header, decoding the index's copy on first
// use (Open of a store with many sessions does not parse every header).
// Called with db.mu held.
func (db *DB) header(s *session) (store.Header, error) {
	if s.hdr == nil {
		rec, err := store.DecodeHeaderRecord(s.hdrRaw, s.id)
		if err != nil {
			return store.Header{}, &store.CorruptionError{Path: db.opts.IndexPath, Offset: -1, Reason: fmt.Sprintf("index record of session %q has a bad header (seglog check --repair rebuilds the index)", s.id), Err: err}
		}
		s.hdr, s.hdrRaw, s.fork = &rec.Header, nil, rec.Fork
	}
	return *s.hdr, nil
}

func (db *DB) snapshotOf(s *session) (store.Snapshot, error) {
	if _, err := db.header(s); err != nil {
		return store.Snapshot{}, err
	}
	return s.snapshot(), nil
}

// listedAt is s's Snapshot.UpdatedAt: the time of its last event the
// listing knows of, its header's CreatedAt if none. Called with db.mu held
// and the header decoded.
func (s *session) listedAt() int64 {
	if s.metaAt == 0 {
		return s.hdr.CreatedAt
	}
	return s.updatedAt
}

func (s *session) snapshot() store.Snapshot {
	snap := store.Snapshot{
		Header:              *s.hdr,
		Revision:            store.Revision(s.uid, s.next),
		EventCount:          s.next,
		SizeBytes:           s.size,
		InheritedEventCount: s.inherited,
		Title:               s.title,
		UpdatedAt:           s.listedAt(),
	}
	if s.hdr.Version < store.FormatVersion {
		snap.FormatStatus = store.FormatMigrationRequired
	}
	return snap
}

package engine

import (
	"context"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
)

// Resume and Inspect read the open turn, not the log (docs/DESIGN.md,
// "Resume reads the open turn"). A session keeps turnFrom, the seq plus
// one of a turn/start or turn/end of its stored log: a fold of the log
// from there is the fold of the whole log (recovery.FoldFrom), and
// storekit.OpenTurn checks the event at the hint before it trusts it
// (else it folds from seq 0). Where it comes from:
//
//   - a write handle's frame moves it to the frame's last turn boundary
//     as the frame is placed (noteTurnBoundary, a type compare per event);
//   - a fold (Resume, Inspect, TurnState) that found a later boundary, or
//     found the hint wrong, records what it found (noteTurn), and queues
//     the session's index record;
//   - a fork takes its parent's if it is before the cut;
//   - the index's session record keeps it (version 4: index.Session.
//     TurnFrom), as of the events the record holds, so an open starts
//     from it. A record an older build wrote has none: the first fold
//     after the open reads the log whole, and records what it found.
//
// Frames of other processes, or replayed past the checkpoint, leave it
// where it is: still a boundary of the log, only an earlier one.

// noteTurnBoundary moves s's hint to the last turn boundary of evs, a
// frame of its events just placed. Called with db.mu held.
func (s *session) noteTurnBoundary(evs []event.Event) {
	if b := recovery.LastTurnBoundary(evs); b > s.turnFrom {
		s.turnFrom = b
	}
}

// indexTurnFrom is the hint s's index record keeps, which holds its first
// s.idxNext events: s's own if it is among them, else the one the record
// had. Called with db.mu held.
func (s *session) indexTurnFrom() uint64 {
	if s.turnFrom <= s.idxNext {
		s.idxTurnFrom = s.turnFrom
	}
	if s.idxTurnFrom > s.idxNext {
		s.idxTurnFrom = 0
	}
	return s.idxTurnFrom
}

// turnHint is where a fold of s's open turn starts (storekit.OpenTurn).
func (db *DB) turnHint(s *session) uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return s.turnFrom
}

// noteTurn records what a fold of s's open turn from hint used found:
// found, the last boundary of the events it folded. A later boundary of
// the framed events moves the hint on; a hint the log did not confirm
// (the fold read the log from seq 0) is replaced. The index record is
// queued for the next checkpoint.
func (db *DB) noteTurn(s *session, used uint64, st recovery.State) {
	db.metrics.turnEvents.Add(uint64(st.Len) - st.From)
	found := st.TurnFrom
	if found == used {
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if found > s.framed || (found < used && s.turnFrom != used) {
		// (A boundary not yet placed is noted as it is; a hint another
		// fold or frame moved meanwhile is theirs.)
		return
	}
	if found > s.turnFrom || s.turnFrom == used {
		s.turnFrom = found
		if db.mu.sessions[s.id] == s {
			db.noteChecked(s)
		}
	}
}

// Resume opens session id for write and closes a turn that a crash left
// open: it appends the closers of recovery.Closers as one ordinary batch,
// flushes, and returns the handle with the closers it wrote (none if the
// log was balanced). It reads the open turn, not the log (see turn.go):
// after a restart a session of any length resumes in what its open
// turn's events cost. Repair happens only under the write lease: while
// another handle owns the session, Resume fails with ErrAlreadyOwned and
// writes nothing. ResumeMany resumes many sessions with one flush.
func (db *DB) Resume(ctx context.Context, id string) (*Handle, []event.Event, error) {
	return db.turns().Resume(ctx, id)
}

// ResumeMany resumes each of ids as Resume does, with one flush for all
// (a host's start-up: the sessions it had open, in one fdatasync instead
// of one each): one store.Resumed per ID, in order; a session that cannot
// be resumed has its error there, and the others go on. If the flush
// fails, no handle stays open and the flush's error is returned.
func (db *DB) ResumeMany(ctx context.Context, ids []string) ([]store.Resumed[*Handle], error) {
	return db.turns().ResumeMany(ctx, ids)
}

// TurnState is the turn state of the log as the handle sees it (its own
// enqueued events count): store.TurnState, from the open turn.
func (h *Handle) TurnState(ctx context.Context) (store.TurnState, error) {
	return h.db.turns().TurnState(ctx, h)
}

// Inspect returns session id's log (the window InspectEvents asks for,
// by default the whole log), its turn state and the closers Resume would
// append to it (nil if its last turn is closed), without the write lease
// and writing nothing: the read-only balanced view of an observer, also
// of a session another handle or process writes. The turn state and the
// closers read the open turn, not the log. Holder names a live writer (a
// write handle of this process, or another process: its pid, host and
// since, from the lease holder files) that held the session's write lease
// when Inspect looked, nil if none did: its turn is then in progress, and
// the closers are what a resume would append if it died. It fails as
// Open(id, Read) does.
func (db *DB) Inspect(ctx context.Context, id string, opts ...store.InspectOption) (store.Inspection, error) {
	return db.turns().Inspect(ctx, id, opts...)
}

// turns is the store's rules of Resume, ResumeMany, Inspect and
// TurnState (storekit.Turns, shared with the JetStream backend) over this
// DB: its open, its turn hint, its lease holders, its Flush.
func (db *DB) turns() storekit.Turns[*Handle] {
	return storekit.Turns[*Handle]{
		Open:   db.Open,
		Hint:   func(h *Handle) uint64 { return db.turnHint(h.s) },
		Note:   func(h *Handle, used uint64, st recovery.State) { db.noteTurn(h.s, used, st) },
		Holder: func(_ context.Context, id string) *store.OwnedError { return db.liveHolder(id) },
		Flush:  db.Flush,
	}
}

package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/seglog/seglog/event"
)

// The session rules every backend of the store contract applies the same
// way (this engine, and backend/jetstream): what a new header must be,
// what an appended batch must be, what a write open checks in a stored
// log, and how a revision is spelled.

// PrepareHeader applies Create's defaults and rules to the header of a new
// session: Version 0 means FormatVersion; CreatedAt 0 means now (the
// time of the call, milliseconds since the Unix epoch; any other value is
// kept as given); a seeded header needs an Inherited count and an
// unseeded one allows only 0. It returns the header
// as it will be stored and the inherited count, or an error wrapping
// ErrInvalidHeader that names what is wrong.
func PrepareHeader(h Header, opts ...CreateOption) (Header, uint64, error) {
	var co createOptions
	for _, f := range opts {
		f(&co)
	}
	if h.Version == 0 {
		h.Version = FormatVersion
	}
	if h.CreatedAt == 0 {
		h.CreatedAt = time.Now().UnixMilli()
	}
	if h.IsSeeded && !co.hasInherited {
		return h, 0, fmt.Errorf("%w: session %q: seeded session header requires an inherited event count", ErrInvalidHeader, h.ID)
	}
	if err := h.validate(co.inherited); err != nil {
		return h, 0, err
	}
	return h, co.inherited, nil
}

// CheckBatch checks a batch appended to session id whose next seq is next:
// contiguous seqs from next (*SeqError) and valid events (an
// *event.InvalidError naming the index, wrapped in a *SessionError).
func CheckBatch(id string, evs []event.Event, next uint64) error {
	return checkBatch(id, "append", evs, next, true)
}

// checkBatch is CheckBatch for operation op (named in errors).
func checkBatch(id, op string, evs []event.Event, next uint64, validate bool) error {
	for i := range evs {
		if evs[i].Seq != next+uint64(i) {
			return &SeqError{ID: id, Index: i, Expected: next + uint64(i), Got: evs[i].Seq}
		}
		if !validate {
			continue
		}
		if err := evs[i].Validate(i); err != nil {
			return sessionErr(id, op, err)
		}
	}
	return nil
}

// checkSeeds applies the seed marker rules (docs/EVENTS.md, Seeded
// sessions) to stored events of a session (any contiguous part of its
// log), for operation op (a write open, a read; named in its errors): a
// seeded session has the inherited end-seed marker at seq inherited and
// none after it (the markers before it are its parent's, a fork of a
// fork inherits them: the reference takes the last one as the cut), an
// unseeded one has none. It returns an error wrapping ErrSeed.
func checkSeeds(id, op string, seeded bool, inherited uint64, evs []event.Event) error {
	for i := range evs {
		seq := evs[i].Seq
		if seeded && seq < inherited {
			continue
		}
		if marker := isInheritedMarker(&evs[i]); marker && (!seeded || seq != inherited) {
			what := "unseeded session contains"
			if seeded {
				what = fmt.Sprintf("seeded session (inherited count %d) contains another", inherited)
			}
			return sessionErr(id, op, fmt.Errorf("%w: %s inherited end-seed marker at seq %d", ErrSeed, what, seq))
		} else if seeded && seq == inherited && !marker {
			return sessionErr(id, op, fmt.Errorf("%w: seeded session lacks an inherited end-seed marker at seq %d", ErrSeed, inherited))
		}
	}
	return nil
}

// SeedsKept reports whether stored or appended events of a session (any
// contiguous part of its log) keep the seed marker rules, as a write open
// checks them (checkSeeds): a backend that counts its appended events as
// checked counts only those it keeps.
func SeedsKept(seeded bool, inherited uint64, evs []event.Event) bool {
	return checkSeeds("", "", seeded, inherited, evs) == nil
}

// ReadRange is the window of a Read(offset, limit) (offset >= 0; limit < 0
// means to the end) over a log of n events: the seqs [lo, hi), empty when
// lo >= hi. Any offset and limit are safe (math.MaxInt included): nothing
// is added before it is known to fit.
func ReadRange(n uint64, offset, limit int) (lo, hi uint64) {
	lo, hi = uint64(offset), n
	if limit >= 0 && lo < hi && uint64(limit) < hi-lo {
		hi = lo + uint64(limit)
	}
	return lo, hi
}

// CheckLog is a write open's check of the stored events [from, n) of a
// session: read (a handle's Read, which applies the event catalog) takes
// them in chunks, and each chunk must keep the seed marker rules
// (checkSeeds). The caller may skip events it knows were checked: by an
// earlier write open under the same catalog, or appended through a write
// handle (whose catalog check they passed) and keeping the seed rules
// (SeedsKept).
func CheckLog(ctx context.Context, id string, seeded bool, inherited, from, n uint64, read func(ctx context.Context, offset, limit int) ([]event.Event, error)) error {
	const chunk = 8192
	for off := from; off < n; off += chunk {
		evs, err := read(ctx, int(off), chunk)
		if err != nil {
			return err
		}
		if err := checkSeeds(id, "open", seeded, inherited, evs); err != nil {
			return err
		}
	}
	return nil
}

// Revision spells the revision of a session's log: its incarnation and its
// event count. Equal revisions mean an unchanged log.
func Revision(uid, events uint64) string { return revision(uid, events) }

// NewIncarnation returns a random incarnation id (never 0), so that the
// revisions of a session created again never repeat those of an earlier
// one.
func NewIncarnation() uint64 { return newUID() }

// MarshalHeaderRecord encodes a header record as header frames hold it.
func MarshalHeaderRecord(r HeaderRecord) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a header record has only plain fields
	}
	return b
}

// UnmarshalHeaderRecord decodes the payload of a session's first header
// frame; a record of a migration, or without an incarnation, is an error.
func UnmarshalHeaderRecord(b []byte) (HeaderRecord, error) {
	var rec HeaderRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return HeaderRecord{}, fmt.Errorf("session header record: %w", err)
	}
	if rec.UID == 0 || rec.Replaces != 0 {
		return HeaderRecord{}, fmt.Errorf("session header record of %q: no incarnation, or a migration's", rec.Header.ID)
	}
	return rec, nil
}

func newUID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

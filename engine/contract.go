package engine

import (
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// The store contract (package store) as this engine serves it: its types,
// constants and errors under the names engine has always had, so that a
// host needs one import.

// Event is one event of a session's log.
type Event = event.Event

// Header is the metadata stored with a session; see store.Header.
type Header = store.Header

// Snapshot describes a session as Stat and List see it.
type Snapshot = store.Snapshot

// ListOptions selects and pages ListPage.
type ListOptions = store.ListOptions

// ListOrder is the order of ListPage: OrderID or OrderUpdated.
type ListOrder = store.ListOrder

// Inspection is a session's log and the closers of its open turn, as
// Inspect sees them.
type Inspection = store.Inspection

// FormatStatus tells whether a session is stored in the current format.
type FormatStatus = store.FormatStatus

// Access is what a handle may do: Read or Write.
type Access = store.Access

// CreateOption configures Create.
type CreateOption = store.CreateOption

// ForkOption configures Fork (MarkerTime).
type ForkOption = store.ForkOption

// DeleteOption configures Delete (IfRevision).
type DeleteOption = store.DeleteOption

const (
	// FormatVersion is the session format version this build writes.
	FormatVersion = store.FormatVersion
	// OldestFormatVersion is the oldest session format version it reads.
	OldestFormatVersion = store.OldestFormatVersion
	// MaxIDLen is the longest session ID, in bytes.
	MaxIDLen = store.MaxIDLen

	FormatCurrent           = store.FormatCurrent
	FormatMigrationRequired = store.FormatMigrationRequired

	// OrderID lists sessions by ID; OrderUpdated most recently updated
	// first (see store.ListOrder).
	OrderID      = store.OrderID
	OrderUpdated = store.OrderUpdated

	// Read handles read; they take no ownership and coexist with a writer.
	Read = store.Read
	// Write handles also append and flush; one per session at a time.
	Write = store.Write
)

// Inherited declares a seeded session's inherited prefix (see
// store.Inherited).
func Inherited(n uint64) CreateOption { return store.Inherited(n) }

// MarkerTime stamps a fork's marker with time ms (see store.MarkerTime).
func MarkerTime(ms int64) ForkOption { return store.MarkerTime(ms) }

// IfRevision makes Delete delete the session only if its revision is
// still rev once Delete holds its lease (see store.IfRevision).
func IfRevision(rev string) DeleteOption { return store.IfRevision(rev) }

// ForkRangeError is a Fork past the end of its parent (see
// store.ForkRangeError); it matches ErrInvalidArgument.
type ForkRangeError = store.ForkRangeError

// IsInheritedMarker reports whether e is a seeded session's inherited
// end-seed marker: session/end-seed with data {"inherited": true}.
func IsInheritedMarker(e *event.Event) bool { return store.IsInheritedMarker(e) }

// Errors: see package store for what each means.
var (
	ErrSessionExists     = store.ErrSessionExists
	ErrSessionNotFound   = store.ErrSessionNotFound
	ErrAlreadyOwned      = store.ErrAlreadyOwned
	ErrOwnershipLost     = store.ErrOwnershipLost
	ErrReadOnly          = store.ErrReadOnly
	ErrHandleClosed      = store.ErrHandleClosed
	ErrClosed            = store.ErrClosed
	ErrSeqMismatch       = store.ErrSeqMismatch
	ErrInvalidEvent      = store.ErrInvalidEvent
	ErrInvalidHeader     = store.ErrInvalidHeader
	ErrInvalidArgument   = store.ErrInvalidArgument
	ErrLocked            = store.ErrLocked
	ErrUnsupportedEvent  = store.ErrUnsupportedEvent
	ErrSeed              = store.ErrSeed
	ErrMigrationRequired = store.ErrMigrationRequired
	ErrRevisionMismatch  = store.ErrRevisionMismatch
	ErrReadOnlyStore     = store.ErrReadOnlyStore
	ErrWriteLost         = store.ErrWriteLost
	ErrNoStore           = store.ErrNoStore
	ErrCorrupt           = store.ErrCorrupt
	ErrFormat            = store.ErrFormat
	ErrCoordinationLost  = store.ErrCoordinationLost
	// ErrSurface is the kind of a *SurfaceError (Options.SurfaceRules).
	ErrSurface = recovery.ErrSurface
)

// Error types: see package store.
type (
	CorruptionError       = store.CorruptionError
	FormatError           = store.FormatError
	UnsupportedEventError = store.UnsupportedEventError
	LockError             = store.LockError
	SessionError          = store.SessionError
	SeqError              = store.SeqError
	DroppedError          = store.DroppedError
	CoordinationError     = store.CoordinationError
	// SurfaceError names the event that breaks a v3 surface rule
	// (Options.SurfaceRules), by seq; see recovery.SurfaceError.
	SurfaceError = recovery.SurfaceError
)

func sessionErr(id, op string, err error) error { return &SessionError{ID: id, Op: op, Err: err} }

// marshalHeader encodes s's header record; called with db.mu held (or by
// the session's owner, whose header is decoded).
func marshalHeader(s *session) []byte {
	if s.hdrRaw != nil {
		return s.hdrRaw // still the index's copy, unchanged
	}
	rec := store.HeaderRecord{Header: *s.hdr, UID: s.uid, Inherited: s.inherited, Fork: s.fork}
	if s.fork != nil {
		rec.Events = s.inherited + 1
	}
	return store.MarshalHeaderRecord(rec)
}

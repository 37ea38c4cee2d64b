package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/vfs"
)

// Errors returned by DB and Handle methods. Test with errors.Is; the
// returned errors carry the session and operation (*SessionError,
// *SeqError) around these kinds.
var (
	// ErrSessionExists: Create of an id that is pending, owned or stored.
	ErrSessionExists = errors.New("already exists")
	// ErrSessionNotFound: Open, Stat, Delete or Resume of an id that does
	// not exist (or was deleted), a read of a pending session its creator
	// erased, and a read or Wait through a handle of a session deleted
	// since it was opened.
	ErrSessionNotFound = errors.New("not found")
	// ErrAlreadyOwned: Open(id, Write), Resume or Delete while a write
	// handle (or the creator), of this store or another, holds the
	// session; the error is then a *OwnedError naming the holder where
	// the backend knows it.
	ErrAlreadyOwned = handle.ErrAlreadyOwned
	// ErrOwnershipLost: a write through a handle whose lease was revoked
	// (the store was closed). A stale handle can never write; its Close
	// returns a *DroppedError if it held events it had not written.
	ErrOwnershipLost = handle.ErrOwnershipLost
	// ErrReadOnly: Append, Enqueue or Flush on a read handle.
	ErrReadOnly = errors.New("is not available on a read handle")
	// ErrHandleClosed: any operation on a closed handle.
	ErrHandleClosed = errors.New("on a closed handle")
	// ErrClosed: an operation on a closed DB.
	ErrClosed = base.ErrClosed
	// ErrSeqMismatch: Append whose first seq is not the session's next seq,
	// or whose seqs are not contiguous. See *SeqError.
	ErrSeqMismatch = errors.New("append seq mismatch")
	// ErrInvalidEvent: an event that fails validation (missing type, data
	// not a JSON object, oversized, ...). See *event.InvalidError.
	ErrInvalidEvent = event.ErrInvalid
	// ErrInvalidHeader: Create with a header that fails validation, or
	// with an inherited event count that does not fit it.
	ErrInvalidHeader = errors.New("invalid session header")
	// ErrLocked: Open of a directory another process owns. See *LockError.
	ErrLocked = vfs.ErrLocked
	// ErrUnsupportedEvent: a read (or a write open) of a stored event whose
	// type is not in the catalog and that is not ignorable, or of a retired
	// shape; and an Append or Enqueue of such an event, which stores
	// nothing. See *UnsupportedEventError, which names the seq and the type.
	ErrUnsupportedEvent = event.ErrUnsupported
	// ErrSeed: a stored seeded session without its inherited end-seed
	// marker at the inherited count, or an unseeded one with such a marker.
	ErrSeed = errors.New("bad seed marker")
	// ErrMigrationRequired: Copy of a session stored in an older
	// supported format (Snapshot.FormatStatus is FormatMigrationRequired),
	// which it copies only as stored. DB.Migrate upgrades it, and so does
	// a write open (Open(id, Write), Resume), which migrates such a
	// session in place by itself; read handles see it migrated, in memory.
	ErrMigrationRequired = errors.New("is stored in an older format: migrate it first (DB.Migrate, seglog migrate)")
	// ErrRevisionMismatch: Delete with IfRevision of a session whose
	// revision is no longer the one named (a host wrote it since, or it
	// was created again); nothing was deleted.
	ErrRevisionMismatch = errors.New("revision changed")
	// ErrNoStore: RebuildIndex of a directory that holds no store (no
	// segment and no index).
	ErrNoStore = errors.New("no store here (no segment, no index)")
	// ErrCorrupt is the kind of every *CorruptionError.
	ErrCorrupt = base.ErrCorrupt
	// ErrFormat is the kind of every *FormatError.
	ErrFormat = base.ErrFormat
)

// CorruptionError reports damaged stored data with its file and offset.
type CorruptionError = base.CorruptionError

// FormatError reports data written in a format this build does not read;
// Newer tells the direction.
type FormatError = base.FormatError

// UnsupportedEventError names the event a read, or an Append or Enqueue,
// refused.
type UnsupportedEventError = event.UnsupportedError

// LockError reports the directory lock held by another process, with its pid.
type LockError = vfs.LockError

// SessionError is an error about one session and operation.
type SessionError struct {
	ID  string
	Op  string // "create", "open", "read", "append", "flush", "close", "stat", "delete", "resume", "wait"
	Err error  // the kind: ErrSessionNotFound, ErrReadOnly, ...
}

func (e *SessionError) Error() string {
	if _, ok := e.Err.(*OwnedError); ok {
		return fmt.Sprintf("engine: session %q %v", e.ID, e.Err)
	}
	switch e.Err {
	case ErrSessionExists, ErrSessionNotFound, ErrAlreadyOwned:
		return fmt.Sprintf("engine: session %q %v", e.ID, e.Err)
	case ErrReadOnly:
		return fmt.Sprintf("engine: session %q: %s is not available on a read handle", e.ID, e.Op)
	case ErrHandleClosed:
		return fmt.Sprintf("engine: session %q: %s on a closed handle", e.ID, e.Op)
	}
	return fmt.Sprintf("engine: session %q: %s: %v", e.ID, e.Op, e.Err)
}

func (e *SessionError) Unwrap() error { return e.Err }

func sessionErr(id, op string, err error) error { return &SessionError{ID: id, Op: op, Err: err} }

// OwnedError is the ErrAlreadyOwned of a session whose write lease
// another write handle holds, of this process or another
// (errors.Is(err, ErrAlreadyOwned); Open(id, Write), Resume, Delete and
// Migrate return it in a *SessionError naming the session), with what the
// holder recorded of itself when it took the lease. A field the store
// does not know is zero: a holder that took the lease a moment ago may
// not have recorded itself yet, and a backend may record less (a
// JetStream lease names its holding store's Host, as Host, and nothing
// else).
type OwnedError struct {
	PID   int       // the holding process's id; 0 if not known
	Host  string    // the machine it runs on (os.Hostname; JetStream: the store's Host option); "" if not known
	Since time.Time // when it took the lease; zero if not known
}

func (e *OwnedError) Error() string {
	msg := strings.TrimPrefix(ErrAlreadyOwned.Error(), "handle: ")
	var who []string
	if e.PID > 0 {
		who = append(who, fmt.Sprintf("process %d", e.PID))
	}
	if e.Host != "" {
		who = append(who, "on host "+strconv.Quote(e.Host))
	}
	if !e.Since.IsZero() {
		who = append(who, "since "+e.Since.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if len(who) == 0 {
		return msg + " (its holder is not recorded)"
	}
	return msg + " (" + strings.Join(who, " ") + ")"
}

// Unwrap returns ErrAlreadyOwned.
func (e *OwnedError) Unwrap() error { return ErrAlreadyOwned }

// DroppedError is what Close of a write handle returns (in a
// *SessionError naming the session, op "close") when the handle had lost
// its ownership (its store closed, or, on a replicated backend, its lease
// lapsed or was taken) while it held events it had not written: appended
// or enqueued, and not yet written out. They are dropped; what the session
// held before them stays. errors.Is(err, ErrOwnershipLost) holds.
type DroppedError struct {
	Dropped int // the events dropped
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("%v: %d appended or enqueued events were never written and are dropped", ErrOwnershipLost, e.Dropped)
}

// Unwrap returns ErrOwnershipLost.
func (e *DroppedError) Unwrap() error { return ErrOwnershipLost }

// SeqError reports an Append whose seqs do not continue the session.
type SeqError struct {
	ID       string
	Index    int    // position in the batch
	Expected uint64 // the seq that had to be there
	Got      uint64
}

func (e *SeqError) Error() string {
	return fmt.Sprintf("engine: append seq mismatch for %q: expected %d at index %d, got %d", e.ID, e.Expected, e.Index, e.Got)
}

// Is reports whether target is ErrSeqMismatch.
func (e *SeqError) Is(target error) bool { return target == ErrSeqMismatch }

// ErrCoordinationLost: a file the processes that share a local store
// coordinate through (LOCK, locks, shm) was removed, replaced or cut
// short while processes had the store open (docs/MULTIPROCESS.md, Many
// processes, "When the coordination files are removed or cut"). An open
// beside those processes fails with it and changes nothing; they go on
// (they still hold the files they share), and once every one of them has
// closed the store, it opens as usual. A DB whose shm was cut under it
// fails every later write, flush, read and wait with it, as a poisoned
// one does: close it. See *CoordinationError, which names the file.
var ErrCoordinationLost = base.ErrCoordinationLost

// CoordinationError names the coordination file that was removed,
// replaced or cut (Path: DIR/LOCK, DIR/locks or DIR/shm), and what was
// found (Reason). errors.Is(err, ErrCoordinationLost) holds.
type CoordinationError = base.CoordinationError

// ErrReadOnlyStore: a write (Create, Open for write, Resume, Flush) on a
// DB opened with Options.ReadOnly.
var ErrReadOnlyStore = errors.New("engine: store opened read-only")

// ErrInvalidArgument: an argument outside its range (a negative offset
// given to Read, a compaction live ratio over 1); the error says which.
var ErrInvalidArgument = errors.New("engine: invalid argument")

// ErrWriteLost: events that a write failed to store before it was synced.
// The local engine no longer returns it: since several processes share a
// store, a write that fails (a full disk) places nothing, its events stay
// with their handles, and the flush fails with the cause itself (see
// docs/DURABILITY.md, "Failing storage"). It stays for callers that test for it.
var ErrWriteLost = errors.New("not stored: a write failed before it was synced")

// ErrNotDurable is the kind of every *NotDurableError: events a write
// handle took are not durable, and the store knows why.
var ErrNotDurable = errors.New("not durable")

// NotDurableError is what a write handle's Append and Enqueue return (in
// a *SessionError naming the session and the operation) once a write-out
// or flush of its events failed without the host being there to see it:
// a durability window's flush, the write-behind buffer's background
// write, a full batch's write-out (a full disk: ENOSPC, with the path),
// or the handle's own Flush. Until a Flush of the handle succeeds (the
// host's, or the window's retry in the background), every Append and
// Enqueue fails with it and takes nothing; the events handed over before
// stay the handle's, in order, and the next successful flush writes them.
// A failure that nothing can repair (an fdatasync error poisoning the
// store, a lost lease, coordination files cut) is returned the same way
// by every later call on the handle, Flush and Close too, while the
// handle holds events not known durable. errors.Is(err, ErrNotDurable)
// holds, and so does errors.Is(err, cause) for the cause (ENOSPC,
// ErrSyncFailed, ErrOwnershipLost, ErrCoordinationLost, ...).
type NotDurableError struct {
	// Seq is the first seq the store cannot vouch for: every event
	// before it was made durable by a flush of the handle; it and the
	// events after it are held by the handle (a recoverable failure) or
	// may be lost (a poisoned store, a lost lease).
	Seq uint64
	// Err is the cause: the failed write-out's or flush's error.
	Err error
}

func (e *NotDurableError) Error() string {
	return fmt.Sprintf("events from seq %d on are not durable: %v", e.Seq, e.Err)
}

// Unwrap returns ErrNotDurable and the cause.
func (e *NotDurableError) Unwrap() []error { return []error{ErrNotDurable, e.Err} }

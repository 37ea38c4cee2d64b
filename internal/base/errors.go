package base

import (
	"errors"
	"fmt"
)

// ErrCorrupt is the kind of every corruption error: stored bytes that fail a
// checksum or a structural check where the writer guaranteed valid data.
// Test for it with errors.Is; use errors.As with *CorruptionError for the
// location.
var ErrCorrupt = errors.New("seglog: corrupt")

// ErrClosed is returned by operations on a closed store, writer or reader.
var ErrClosed = errors.New("seglog: closed")

// ErrFormat is the kind of every *FormatError.
var ErrFormat = errors.New("seglog: unsupported format")

// CorruptionError reports where stored data failed validation.
// errors.Is(err, ErrCorrupt) is true for every CorruptionError.
type CorruptionError struct {
	Path   string // file that holds the damage
	Offset int64  // byte offset of the damaged record (frame or header) in Path
	Reason string // what failed, e.g. "checksum mismatch"
	Err    error  // optional underlying cause
}

func (e *CorruptionError) Error() string {
	msg := fmt.Sprintf("seglog: corruption in %s at offset %d: %s", e.Path, e.Offset, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the underlying cause, if any.
func (e *CorruptionError) Unwrap() error { return e.Err }

// FormatError reports a file written in a format version this build does not
// read. errors.Is(err, ErrFormat) is true for every FormatError.
type FormatError struct {
	Path      string // file whose header carries the version
	What      string // which format, e.g. "segment"
	Version   int    // version found in the file
	Supported int    // newest version this build reads
	Oldest    int    // oldest version this build reads
}

// Newer reports whether the file was written by a newer build than this one.
func (e *FormatError) Newer() bool { return e.Version > e.Supported }

func (e *FormatError) Error() string {
	if e.Newer() {
		return fmt.Sprintf("seglog: %s %s uses format v%d, newer than this build reads (v%d..v%d): upgrade seglog",
			e.What, e.Path, e.Version, e.Oldest, e.Supported)
	}
	return fmt.Sprintf("seglog: %s %s uses format v%d, older than this build reads (v%d..v%d), and this build ships no upgrade path",
		e.What, e.Path, e.Version, e.Oldest, e.Supported)
}

// Is reports whether target is ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// ErrCoordinationLost is the kind of every *CoordinationError (store
// documents it: a coordination file of a local store removed, replaced or
// cut under the processes that have it open).
var ErrCoordinationLost = errors.New("the store's coordination files changed under the processes that have it open")

// CoordinationError names the coordination file that was removed,
// replaced or cut, and what was found. errors.Is(err, ErrCoordinationLost)
// holds.
type CoordinationError struct {
	Path   string // the file (DIR/LOCK, DIR/locks or DIR/shm)
	Reason string // what happened to it, as far as this process can tell
}

func (e *CoordinationError) Error() string {
	return fmt.Sprintf("engine: coordination file %s %s; close every process that has the store open, then open it again", e.Path, e.Reason)
}

// Is reports whether target is ErrCoordinationLost.
func (e *CoordinationError) Is(target error) bool { return target == ErrCoordinationLost }

package index

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/seglog/seglog/internal/base"
)

// ErrDamaged is the kind of every *DamageError: the index file cannot be
// used as an index of this build (damaged, truncated, not a bbolt file, a
// bbolt file of another layout, another index format version). The index
// is a cache of the segments: set the file aside and rebuild it. Test with
// errors.Is(err, ErrDamaged).
var ErrDamaged = errors.New("index: damaged")

// DamageError reports an index file that cannot be used, and where.
// errors.Is(err, ErrDamaged) holds for every DamageError. Its cause (Err)
// is a *base.CorruptionError for damage (so errors.Is(err, base.ErrCorrupt)
// holds too, and errors.As finds the location), or a *base.FormatError for
// an index of another format version (errors.Is(err, base.ErrFormat)).
type DamageError struct {
	Path   string // the index file
	Offset int64  // byte offset of the damage in Path; -1 if it has no single place
	Reason string // what is wrong, e.g. "page 7 identifies itself as page 0"
	Err    error  // the cause, see above
}

func (e *DamageError) Error() string {
	msg := "index: " + e.Path + " is damaged"
	if e.Offset >= 0 {
		msg += fmt.Sprintf(" at offset %d", e.Offset)
	}
	return msg + ": " + e.Reason
}

// Is reports whether target is ErrDamaged.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// Unwrap returns the cause.
func (e *DamageError) Unwrap() error { return e.Err }

// newDamage returns a *DamageError whose cause is cause if that is a
// *base.FormatError, else a *base.CorruptionError wrapping cause.
func newDamage(path string, off int64, reason string, cause error) *DamageError {
	var fe *base.FormatError
	if !errors.As(cause, &fe) {
		cause = &base.CorruptionError{Path: path, Offset: off, Reason: "index " + reason, Err: cause}
	}
	return &DamageError{Path: path, Offset: off, Reason: reason, Err: cause}
}

// panicError is a recovered panic as an error.
type panicError struct{ v any }

func (p panicError) Error() string { return fmt.Sprint(p.v) }

// Unwrap returns the panic value if it is an error (a runtime.Error for a
// memory fault).
func (p panicError) Unwrap() error {
	err, _ := p.v.(error)
	return err
}

// protect runs fn with memory faults turned into panics, and turns a panic
// into a *DamageError naming op: bbolt panics or faults on a page that is
// damaged (or that changed under it). A panic raised while *user is true
// (the caller's callback runs) is not bbolt's and is raised again.
func protect(path, op string, user *bool, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		r := recover()
		debug.SetPanicOnFault(old)
		if r == nil {
			return
		}
		if user != nil && *user {
			panic(r)
		}
		err = newDamage(path, -1, fmt.Sprintf("%s: reading the file failed: %v", op, r), panicError{r})
	}()
	return fn()
}

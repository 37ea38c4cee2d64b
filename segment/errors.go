package segment

import (
	"errors"

	"github.com/seglog/seglog/internal/base"
)

// ErrCorrupt is the kind of every *CorruptionError; it is base.ErrCorrupt,
// so errors.Is works across layers.
var ErrCorrupt = base.ErrCorrupt

// CorruptionError reports damaged data with its file and offset.
type CorruptionError = base.CorruptionError

// FormatError reports a segment written in a format version this build does
// not read; Newer tells the direction.
type FormatError = base.FormatError

// Errors of the write side.
var (
	// ErrSealed is returned for a segment that carries a seal frame where
	// one that does not was wanted (a tail to append to).
	ErrSealed = errors.New("segment: sealed")
	// ErrTooLarge is returned by an Encoder for a batch whose encoding
	// exceeds MaxFrameRaw, or a session key longer than MaxKeyLen.
	ErrTooLarge = errors.New("segment: frame too large")
	// ErrClosed is returned after Close.
	ErrClosed = base.ErrClosed
	// ErrSyncFailed marks the failure of an fsync (of a file or of a
	// directory): what it covered may be lost, and a retry that succeeds
	// proves nothing, so nothing may be acknowledged after it. Errors
	// without it (a failed write, a full disk while creating a segment)
	// left nothing that was promised.
	ErrSyncFailed = errors.New("segment: fsync failed")
)

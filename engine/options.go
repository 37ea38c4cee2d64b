package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// Options configures Open. A nil *Options means every default. Open copies
// the value; changing it afterwards has no effect.
type Options struct {
	// FS is the file system of the store; default the OS (vfs.Default).
	// Tests pass vfs.MemFS (crashable: MemFS.CrashClone) or vfs.FaultFS.
	FS vfs.FS
	// SegmentSize is the size at which a segment is sealed and the next one
	// started; default 64 MiB. The store's first segments are smaller (see
	// InitialSegmentSize).
	SegmentSize int64
	// InitialSegmentSize is the size of a store's first segment; each
	// next one doubles, up to SegmentSize (segment k holds at most
	// InitialSegmentSize << (k-1)). So a store that holds little is
	// compacted in small pieces. At least 4096; 0 (the default) or a
	// value at or above SegmentSize makes every segment SegmentSize: on a
	// fresh store the early rolls cost durable flushes about 1.15x at p50
	// (docs/DURABILITY.md, Preallocation). (What keeps a small store small on
	// disk is PreallocateStart.) The size is computed from the segment
	// ID; processes of one store that use other values only seal
	// segments at other sizes.
	InitialSegmentSize int64
	// NoPreallocate turns off zero-filling segments ahead of their
	// appends. Preallocation makes a durable flush cheaper (no file-size
	// commit).
	NoPreallocate bool
	// PreallocateStart is how much of a new segment is zero-filled when
	// it is created; the engine then grows the active segment in place
	// ahead of its tail, each step doubling what it has, up to the
	// segment's size (docs/DURABILITY.md, Preallocation). So a store that
	// holds little takes little disk. Default 1 MiB (a sixteenth of a
	// SegmentSize under 16 MiB, at least 4096); SegmentSize (or more)
	// fills every segment whole at creation.
	PreallocateStart int64
	// Uncompressed stores frames without compression.
	Uncompressed bool
	// Dense compresses every events frame with zstd (and the store's
	// dictionary), as a bulk load wants: the fewest bytes. By default the
	// frame a flush writes (a turn's, which the host waits for) is an S2
	// block (with the dictionary's S2 form): a fifth to a third of the
	// CPU for 1.3-1.4 times the bytes (docs/FORMAT.md, Codecs), and only
	// an append of more than FrameBytes, written in several frames, is
	// zstd. `seglog import` and `copy` write with Dense.
	Dense bool
	// NoDict compresses without dictionaries: events frames under 1 KiB
	// (segment.DefaultMinCompress) are then always stored as they are.
	// By default a writing process trains a zstd dictionary from the
	// events it writes once it has written 128 KiB of them in small
	// frames, stores it with the store, and compresses events frames with
	// it: those of 1 KiB and more always, smaller ones while within a
	// CPU budget of a tenth of a core (docs/FORMAT.md, Dictionaries). Other
	// processes read such frames whether or not they use dictionaries
	// themselves.
	NoDict bool
	// FrameBytes is the target raw size of one frame: larger appends are
	// split, so a random read decodes little. Default 32 KiB.
	FrameBytes int
	// IndexPath is the bbolt index file. Default <dir>/index.db when FS is
	// the OS; with another FS the default is no persistent index.
	IndexPath string
	// NoIndex keeps no persistent index: every Open re-reads all segments.
	NoIndex bool
	// IndexInterval is how often durable frames are checkpointed into the
	// index (off the flush path). Default 1s.
	IndexInterval time.Duration
	// WriteBehindWindow is the batching window of Handle.Enqueue and the
	// durability window of every write handle; default
	// handle.DefaultWindow (200ms). An event handed to Append or Enqueue
	// is durable at most this long (plus one group-commit fdatasync)
	// after it was handed over, Flush or not: the first event after a
	// window ended opens the next, at whose end the handle flushes in
	// the background (Metrics.WindowFlushes).
	WriteBehindWindow time.Duration
	// FlushOnly is the weaker promise: events are durable only once a
	// Flush (or the handle's Close) returns, and a crash loses everything
	// appended or enqueued since. Appends then stay in memory until a
	// Flush or FrameBytes of them, with no background flush.
	FlushOnly bool
	// Logger receives warnings (background write failures, recovered torn
	// tails); default discards.
	Logger *slog.Logger
	// ReadOnly opens the store for reading only: no directory lock, no
	// recovery writes (a torn tail is left in place and not read), no
	// background work; writes fail with ErrReadOnlyStore. For inspecting a
	// store at rest (the CLI).
	ReadOnly bool
	// Catalog is the set of event types the store accepts: a stored event
	// of another type that is not ignorable fails the read (and a write
	// open) with an *UnsupportedEventError, and so does an Append or
	// Enqueue of one, which stores nothing. Default event.NewCatalog()
	// (the v3 catalog); register a host's extension types on it.
	// event.AnyCatalog() accepts everything: for inspectors. The types the
	// store records (DB.RegisterTypes) are registered on it at open, and
	// again when an event of a type it does not know turns up.
	Catalog *event.Catalog
	// SurfaceRules makes every write handle check the v3 surface rules
	// (docs/EVENTS.md, "Surface rules"; recovery.SurfaceChecker) on what
	// it appends: a write open reads the stored log once and fails if it
	// breaks them, and an Append or Enqueue of a batch with an event that
	// breaks them fails whole with a *SurfaceError (in a *SessionError)
	// naming the event by seq, storing nothing. Off by default: the store
	// also serves hosts whose events follow other schemas. Types the
	// Catalog does not know are opaque when ignorable. The catalog check
	// stays on either way.
	SurfaceRules bool
	// CompactInterval is how often the background compactor runs when
	// something was deleted (or migrated) since its last run: it runs
	// Compact with the default live ratio (removing dead segments and
	// rewriting mostly dead ones) without blocking appends. Default 1
	// minute; negative turns it off (Compact still works by hand).
	CompactInterval time.Duration
	// AfterFunc arms write-behind windows; default time.AfterFunc. Tests
	// pass a fake clock.
	AfterFunc func(d time.Duration, f func()) handle.Timer

	// bound, set by Check on a store another process writes, is the
	// durable position a read-only open reads up to (both of Check's
	// opens read the same prefix); 0: what the writer published.
	bound uint64
	// checking, set by Check, makes a read-only open load every session's
	// frames from the index while its recovery holds it open (no
	// checkpoint commits meanwhile), so that the sessions, the checkpoint
	// and the frames it serves are all the index as of one moment; a
	// read-only open otherwise loads a session's frames on its first read,
	// from the index as it is then.
	checking bool
	// keepCompactionsOut, set by Check after compactions spoiled its first
	// tries, makes a read-only open hold coord.LockCompact until it closes
	// (keepCompactionsOut, in check.go).
	keepCompactionsOut bool
	// testing are the test hooks and overrides of the DB (knobs.go); set
	// by package engine's tests only
	testing testingKnobs
}

const (
	defaultFrameBytes    = 32 << 10
	defaultIndexInterval = time.Second
	defaultCompactEvery  = time.Minute
	// defaultPreallocateStart: a new segment's first zero fill
	defaultPreallocateStart = 1 << 20
)

func (o *Options) withDefaults(dir string) (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	osFS := c.FS == nil
	if osFS {
		c.FS = vfs.Default
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = 64 << 20
	}
	if c.InitialSegmentSize == 0 {
		c.InitialSegmentSize = c.SegmentSize
	}
	if c.PreallocateStart == 0 {
		// (a sixteenth of a small segment: it grows in place too)
		c.PreallocateStart = min(defaultPreallocateStart, max(4096, c.SegmentSize/16))
	}
	if c.FrameBytes == 0 {
		c.FrameBytes = defaultFrameBytes
	}
	if c.IndexInterval == 0 {
		c.IndexInterval = defaultIndexInterval
	}
	if c.CompactInterval == 0 {
		c.CompactInterval = defaultCompactEvery
	}
	if c.WriteBehindWindow == 0 {
		c.WriteBehindWindow = handle.DefaultWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Catalog == nil {
		c.Catalog = event.NewCatalog()
	}
	if c.IndexPath == "" && !c.NoIndex {
		if osFS {
			c.IndexPath = defaultIndexPath(dir)
		} else {
			c.NoIndex = true
		}
	}
	var errs []error
	if c.SegmentSize < 4096 || c.SegmentSize > segment.MaxSegmentSize {
		errs = append(errs, fmt.Errorf("engine: SegmentSize %d outside [4096, %d]", c.SegmentSize, segment.MaxSegmentSize))
	}
	if c.InitialSegmentSize < 4096 {
		errs = append(errs, fmt.Errorf("engine: InitialSegmentSize %d under 4096", c.InitialSegmentSize))
	}
	if c.PreallocateStart < 4096 {
		errs = append(errs, fmt.Errorf("engine: PreallocateStart %d under 4096", c.PreallocateStart))
	}
	if c.FrameBytes < 0 || c.FrameBytes > segment.DefaultMaxFrameRaw/2 {
		errs = append(errs, fmt.Errorf("engine: FrameBytes %d outside [0, %d]", c.FrameBytes, segment.DefaultMaxFrameRaw/2))
	}
	if c.IndexInterval < 0 || c.WriteBehindWindow < 0 {
		errs = append(errs, errors.New("engine: negative IndexInterval or WriteBehindWindow"))
	}
	return c, errors.Join(errs...)
}

// segmentSize is the size at which segment id is sealed: InitialSegmentSize
// doubled for each segment before it, at most SegmentSize.
func (o *Options) segmentSize(id uint64) int64 {
	size := o.InitialSegmentSize
	for k := uint64(1); k < id && size < o.SegmentSize; k++ {
		size *= 2
	}
	return min(size, o.SegmentSize)
}

// createOptions are the options of the creation of segment id.
func (o *Options) createOptions(id uint64) segment.CreateOptions {
	return segment.CreateOptions{Size: o.segmentSize(id), Preallocate: !o.NoPreallocate, PreallocSize: o.PreallocateStart}
}

// defaultIndexPath is where a store in dir keeps its index unless
// Options.IndexPath says otherwise.
func defaultIndexPath(dir string) string { return dir + "/index.db" }

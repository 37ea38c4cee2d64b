package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/bufpool"
	"github.com/seglog/seglog/vfs"
)

// WriterOptions configures a Writer. The zero value is valid: 64 MiB
// segments, zstd, no preallocation, 1 MiB write buffer.
type WriterOptions struct {
	// Size is the soft size limit: Append returns ErrFull rather than start
	// a frame that would end past it (unless the segment holds no frame
	// yet). Default 64 MiB, at most MaxSegmentSize.
	Size int64
	// Codec is how payloads are stored. With CodecZstd a payload that does
	// not shrink is stored uncompressed. Default CodecZstd; set Uncompressed
	// to store everything as is.
	Codec        Codec
	Uncompressed bool
	// MinCompress is the raw payload size under which a frame is stored
	// uncompressed (see Encoder.MinCompress); default DefaultMinCompress.
	MinCompress int
	// Preallocate fills the file with zeros up to Size when it is created
	// (and synced), so that later data syncs overwrite allocated blocks and
	// need not commit a new file size. Seal trims the unused tail. If the
	// file system has no room for the whole segment (ENOSPC), the segment
	// is created without it and grows as it is written.
	Preallocate bool
	// PreallocSize, with Preallocate, is how far the zero fill goes at
	// creation, if less than Size: the owner grows the file ahead of its
	// appends (as the engine does). Default Size.
	PreallocSize int64
	// BufferSize is how many bytes of frames Append gathers before it
	// writes them without waiting for Sync. Default 1 MiB.
	BufferSize int
	// MaxFrameRaw caps the encoded payload of one frame. Default and upper
	// bound DefaultMaxFrameRaw.
	MaxFrameRaw int
	// Now is the clock for the header's creation time; default time.Now.
	Now func() time.Time
}

const (
	defaultSegmentSize = 64 << 20
	defaultBufferSize  = 1 << 20
	zeroChunk          = 1 << 20
)

func (o WriterOptions) withDefaults() (WriterOptions, error) {
	if o.Size == 0 {
		o.Size = defaultSegmentSize
	}
	if o.PreallocSize <= 0 || o.PreallocSize > o.Size {
		o.PreallocSize = o.Size
	}
	if o.Uncompressed {
		o.Codec = CodecNone
	} else if o.Codec == CodecNone {
		o.Codec = CodecZstd
	}
	if o.BufferSize == 0 {
		o.BufferSize = defaultBufferSize
	}
	if o.MaxFrameRaw == 0 {
		o.MaxFrameRaw = DefaultMaxFrameRaw
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	if o.Size < HeaderSize+frameHeaderSize || o.Size > MaxSegmentSize {
		errs = append(errs, fmt.Errorf("segment: Size %d outside [%d, %d]", o.Size, HeaderSize+frameHeaderSize, MaxSegmentSize))
	}
	if o.Codec != CodecNone && o.Codec != CodecZstd {
		errs = append(errs, fmt.Errorf("segment: unknown Codec %d", o.Codec))
	}
	if o.BufferSize < 0 {
		errs = append(errs, fmt.Errorf("segment: negative BufferSize %d", o.BufferSize))
	}
	if o.MaxFrameRaw < 0 || o.MaxFrameRaw > DefaultMaxFrameRaw {
		errs = append(errs, fmt.Errorf("segment: MaxFrameRaw %d outside [0, %d]", o.MaxFrameRaw, DefaultMaxFrameRaw))
	}
	return o, errors.Join(errs...)
}

// Writer appends frames to one segment file.
//
// Append only encodes into memory (and, past BufferSize, writes without
// syncing); Sync is the durability barrier. A Writer is safe for concurrent
// use, and concurrent Syncs share work: a Sync that finds its frames already
// made durable by another returns at once, which is group commit.
//
// Write discipline, on which Scan's torn-tail rule rests: a write of
// buffered frames is issued only after every earlier write of the file has
// been fdatasynced, and every frame records the offset of the write it is
// part of (its base). So at most one write is ever in flight unsynced.
//
// After a write or sync error the Writer is failed: every later Append and
// Sync returns that error, and the caller must treat the segment's unsynced
// tail as lost (an fsync error is never retried).
type Writer struct {
	path string
	f    vfs.File
	opts WriterOptions
	hdr  Header

	mu            sync.Mutex
	ioBusy        bool       // one goroutine owns the file for a write or sync
	ioDone        *sync.Cond // signalled (on mu) when ioBusy clears
	waiting       int        // goroutines waiting on ioDone
	released      int        // waiters the last write or sync woke
	buf           []byte     // encoded frames at [bufStart, end) not yet written
	spare         []byte
	bufStart      int64
	end           int64
	inflight      []byte // frames at [inflightStart, ...) being written by the file's owner
	inflightStart int64
	frames        uint32 // event frames appended
	bufFrames     uint32 // event frames in buf
	sealed        bool
	sealAt        int64 // offset of the seal frame, once appended
	closed        bool
	err           error // sticky I/O error: an fsync failed, or a loss could not be undone

	// A write that failed before its fdatasync lost the frames from its
	// start on (lost.From); appends and syncs fail with lost until Recover.
	lost           *LostError
	lostEnd        int64        // how far the failed write may have reached
	lostFrames     uint32       // event frames in the failed write
	losses         []*LostError // every loss so far, by epoch
	inflightFrames uint32

	written atomic.Int64 // bytes [0, written) issued to the file
	durable atomic.Int64 // bytes [0, durable) fdatasynced
}

// Create creates the segment file path with the given ID: it builds the
// file under TempName, writes and syncs its header (and the zero fill,
// with Preallocate), renames it into place and syncs the directory. So a
// file under a segment's name always starts with a valid header, and
// what a crash or a failure (a full disk) leaves of an unfinished
// creation is a temporary file, removed on failure and by the engine's
// next open. It fails with an error satisfying errors.Is(err,
// fs.ErrExist) if path exists. A nil fsys means the operating system's
// file system.
func Create(fsys vfs.FS, path string, id uint64, opts WriterOptions) (*Writer, error) {
	fsys = orDefault(fsys)
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if f, err := fsys.Open(path); err == nil {
		f.Close()
		return nil, fmt.Errorf("segment: create %s: %w", path, fs.ErrExist)
	}
	tmp := path + createSuffix
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("segment: create %s: %w", path, err)
	}
	f, err := fsys.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", path, err)
	}
	hdr := Header{Version: Version, ID: id, CreatedNs: o.Now().UnixNano()}
	w := newWriter(path, f, o, hdr, HeaderSize, 0)
	if err := w.initFile(fsys, tmp); err != nil {
		w.f.Close()
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("segment: create %s: %w", path, err)
	}
	return w, nil
}

// createSuffix names the file a segment is created in before it is
// renamed into place (see Create).
const createSuffix = ".create"

// TempName returns the name under which Create builds segment id.
func TempName(id uint64) string { return Name(id) + createSuffix }

// IsTemporary reports whether name is a file that Create, Rewrite or
// WriteDict builds before renaming it into place (TempName, RewriteName):
// one that a crash left behind never held anything acknowledged.
func IsTemporary(name string) bool {
	for _, suffix := range []string{createSuffix, rewriteSuffix} {
		if seg, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := ParseName(seg); ok {
				return true
			}
		}
	}
	if dict, ok := strings.CutSuffix(name, dictTempSuffix); ok {
		_, ok = ParseDictName(dict)
		return ok
	}
	return false
}

func orDefault(fsys vfs.FS) vfs.FS {
	if fsys == nil {
		return vfs.Default
	}
	return fsys
}

func newWriter(path string, f vfs.File, o WriterOptions, hdr Header, end int64, frames uint32) *Writer {
	w := &Writer{path: path, f: f, opts: o, hdr: hdr, bufStart: end, end: end, frames: frames}
	w.ioDone = sync.NewCond(&w.mu)
	return w
}

// initFile writes the new segment's header (and zero fill) into tmp,
// syncs it and renames it to w.path.
func (w *Writer) initFile(fsys vfs.FS, tmp string) error {
	if _, err := w.f.WriteAt(appendHeader(nil, w.hdr), 0); err != nil {
		return err
	}
	if w.opts.Preallocate {
		if err := zeroFill(w.f, HeaderSize, w.opts.PreallocSize); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			// No room for the whole segment: this one grows as it is
			// written (slower flushes, but the store goes on).
			if err := w.f.Truncate(HeaderSize); err != nil {
				return err
			}
			w.opts.Preallocate = false
		}
	}
	if err := w.f.Sync(); err != nil {
		return err // only the temporary file is affected
	}
	if err := fsys.Rename(tmp, w.path); err != nil {
		return err
	}
	// The same file under its own name (errors then name it).
	if f, err := fsys.OpenReadWrite(w.path); err == nil {
		w.f.Close()
		w.f = f
	}
	w.written.Store(HeaderSize)
	w.durable.Store(HeaderSize)
	if err := fsys.SyncDir(filepath.Dir(w.path)); err != nil {
		return fmt.Errorf("%w: %w", ErrSyncFailed, err)
	}
	return nil
}

func zeroFill(f vfs.File, from, to int64) error {
	zeros := make([]byte, min(zeroChunk, max(to-from, 0)))
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// OpenWriter reopens an unsealed segment to append after the end found by a
// Scan of it (res). Bytes past res.End are zeroed (up to res.DirtyEnd) or
// cut off, and the file is synced before the Writer is returned, so that
// what Scan saw counts as durable. It returns ErrSealed for a sealed segment.
// A nil fsys means the operating system's file system.
func OpenWriter(fsys vfs.FS, path string, res ScanResult, opts WriterOptions) (*Writer, error) {
	fsys = orDefault(fsys)
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if res.Sealed {
		return nil, fmt.Errorf("segment: open %s for append: %w", path, ErrSealed)
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		return nil, err
	}
	w, err := resume(f, path, res, o)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("segment: open %s for append: %w", path, err)
	}
	return w, nil
}

func resume(f vfs.File, path string, res ScanResult, o WriterOptions) (*Writer, error) {
	var hb [HeaderSize]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return nil, err
	}
	hdr, err := DecodeHeader(path, hb[:])
	if err != nil {
		return nil, err
	}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if res.End < HeaderSize || res.End > size || res.End%frameAlign != 0 {
		return nil, fmt.Errorf("scan end %d invalid for a file of %d bytes", res.End, size)
	}
	if size > res.End {
		if o.Preallocate {
			// (grown in place or not: the zeros past the frames stay)
			if err := zeroFill(f, res.End, min(max(res.DirtyEnd, res.End), size)); err != nil {
				return nil, err
			}
		} else if err := f.Truncate(res.End); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	w := newWriter(path, f, o, hdr, res.End, res.Frames)
	w.written.Store(res.End)
	w.durable.Store(res.End)
	return w, nil
}

// Path returns the segment's file name.
func (w *Writer) Path() string { return w.path }

// Header returns the segment header.
func (w *Writer) Header() Header { return w.hdr }

// Size returns the offset just past the last appended frame.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// Durable returns the offset below which every byte has been fdatasynced.
func (w *Writer) Durable() int64 { return w.durable.Load() }

// Written returns the offset below which every byte has been written to
// the file (synced or not). Readers of the file may read up to it.
func (w *Writer) Written() int64 { return w.written.Load() }

// Err returns the error that failed the Writer, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// ReadBuffered copies the n bytes at off into dst if they are still in the
// Writer's memory (appended but not yet written, or being written), and
// reports whether they were. If not, they are in the file: every byte below
// Written() may be read from it.
func (w *Writer) ReadBuffered(dst []byte, off int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int64(len(dst))
	if off >= w.bufStart && off+n <= w.bufStart+int64(len(w.buf)) {
		copy(dst, w.buf[off-w.bufStart:])
		return true
	}
	if w.inflight != nil && off >= w.inflightStart && off+n <= w.inflightStart+int64(len(w.inflight)) {
		copy(dst, w.inflight[off-w.inflightStart:])
		return true
	}
	return false
}

// Location is where an appended frame lives.
type Location struct {
	Offset int64 // frame start in the segment
	Size   int64 // frame bytes on disk
}

// Encoded is a frame encoded and compressed, ready for AppendEncoded.
// Encoding is the CPU-heavy part of an append and needs no lock, so callers
// encode concurrently and append in the order they choose.
type Encoded struct {
	kind     Kind
	codec    Codec
	key      []byte
	stored   []byte
	raw      []byte // the payload before compression
	rawLen   int
	firstSeq uint64
	count    uint32
	dict     uint32 // CodecZstdDict: the dictionary's ID
	// ownRaw, ownStored: raw and stored came from payloadBufs (stored
	// only when it is not raw), for Release to return
	ownRaw, ownStored bool
}

// Release returns e's buffers for the encoding of later frames: a bulk
// load then reuses a few buffers instead of making garbage of every
// payload. Neither e nor anything Raw returned may be used after; a
// caller that keeps neither need not call it.
func (e *Encoded) Release() {
	if e.ownStored {
		payloadBufs.Put(e.stored)
	}
	if e.ownRaw {
		payloadBufs.Put(e.raw)
	}
	e.stored, e.raw, e.ownRaw, e.ownStored = nil, nil, false, false
}

// payloadBufs keeps the buffers of released payloads.
var payloadBufs = bufpool.Pool{Max: 1 << 20}

// Size returns the bytes the frame takes on disk.
func (e *Encoded) Size() int64 { return frameSize(len(e.key), len(e.stored)) }

// Raw returns the payload before compression; the caller must not change
// it.
func (e *Encoded) Raw() []byte { return e.raw }

// StoredLen returns the payload's size as stored.
func (e *Encoded) StoredLen() int { return len(e.stored) }

// RawLen returns the payload's size before compression.
func (e *Encoded) RawLen() int { return e.rawLen }

// Codec returns how the payload is stored.
func (e *Encoded) Codec() Codec { return e.codec }

// Count returns the number of events in an events frame (0 for the other
// kinds).
func (e *Encoded) Count() uint32 {
	if e.kind != KindEvents {
		return 0
	}
	return e.count
}

// Dict returns the ID of the dictionary the frame is compressed with, 0 if
// none.
func (e *Encoded) Dict() uint32 { return e.dict }

// WithoutDict returns e compressed without its dictionary, as the zero
// Encoder would (e itself if it names none): for a segment of a version
// before DictVersion.
func (e *Encoded) WithoutDict() *Encoded {
	if e.dict == 0 {
		return e
	}
	return Encoder{}.encode(e.kind, CodecZstd, string(e.key), e.raw, e.firstSeq, e.count)
}

// Encoder encodes frames with a writer's codec and limits. The zero value
// encodes with the defaults. It is safe for concurrent use.
type Encoder struct {
	Codec        Codec // default CodecZstd
	Uncompressed bool  // store as is
	MaxFrameRaw  int   // default and upper bound DefaultMaxFrameRaw
	// MinCompress is the raw size under which a frame is stored as is:
	// zero means DefaultMinCompress, a negative value compresses every
	// frame (when that makes it smaller). It does not apply with Dict.
	MinCompress int
	// Dict, if set (and compressing), compresses every events frame of at
	// least MinDictCompress raw bytes with this dictionary (CodecZstdDict)
	// when that makes it smaller. (Header frames are compressed without:
	// a store's open reads them, and a dictionary it cannot read must cost
	// only the reads of the events that name it.) Such frames may go only into segments of
	// version DictVersion or later, and only once the dictionary is
	// durable in the store's directory (WriteDict).
	Dict *Dict
}

// MinDictCompress is the raw size under which a frame is stored as is
// even with a dictionary: the dictionary's ID and zstd's frame header take
// about 10 bytes.
const MinDictCompress = 64

// DefaultMinCompress is the default Encoder.MinCompress. Frames this small
// are what a flush of one or a few events cuts; zstd saves only a fifth of
// such a frame and costs ~10 µs of CPU on the flush path (more than the
// write and half the fdatasync), so they are stored as is.
const DefaultMinCompress = 1024

// Encoder returns the Encoder matching w's options.
func (w *Writer) Encoder() Encoder {
	return Encoder{Codec: w.opts.Codec, Uncompressed: w.opts.Codec == CodecNone, MaxFrameRaw: w.opts.MaxFrameRaw, MinCompress: w.opts.MinCompress}
}

func (c Encoder) limits() (Codec, int) {
	codec := c.Codec
	if c.Uncompressed {
		codec = CodecNone
	} else if codec == CodecNone {
		codec = CodecZstd
	}
	maxRaw := c.MaxFrameRaw
	if maxRaw <= 0 || maxRaw > DefaultMaxFrameRaw {
		maxRaw = DefaultMaxFrameRaw
	}
	return codec, maxRaw
}

func checkKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: session key of %d bytes (want 1..%d)", ErrTooLarge, len(key), MaxKeyLen)
	}
	return nil
}

// Events encodes the events (seqs firstSeq, firstSeq+1, ...) of session key
// as one frame. It does not validate the events beyond what the format
// needs (see event.Event.Validate). It returns ErrTooLarge if the key or
// the encoded batch exceeds the format's limits.
func (c Encoder) Events(key string, firstSeq uint64, evs []event.Event) (*Encoded, error) {
	codec, maxRaw := c.limits()
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, errors.New("segment: empty batch")
	}
	if uint64(len(evs)) > 1<<31 {
		return nil, fmt.Errorf("%w: %d events in one frame", ErrTooLarge, len(evs))
	}
	if firstSeq > math.MaxUint64-uint64(len(evs)) {
		return nil, fmt.Errorf("%w: seq range overflows", ErrTooLarge)
	}
	if encodedLen(evs) > 2*maxRaw+1<<20 {
		return nil, fmt.Errorf("%w: batch encodes to more than %d bytes", ErrTooLarge, maxRaw)
	}
	raw := appendEvents(payloadBufs.Get(encodedLen(evs)), evs)
	if len(raw) > maxRaw {
		payloadBufs.Put(raw)
		return nil, fmt.Errorf("%w: batch encodes to %d bytes, limit %d", ErrTooLarge, len(raw), maxRaw)
	}
	e := c.encode(KindEvents, codec, key, raw, firstSeq, uint32(len(evs)))
	e.ownRaw = true
	return e, nil
}

// EventsFrames encodes each of cuts, consecutive batches of session key's
// events (the first of seq first), as one frame, as Events does: on up to
// GOMAXPROCS goroutines, so that a bulk append compresses on every core.
// It returns the frames in order, or the first cut's error.
func (c Encoder) EventsFrames(key string, first uint64, cuts [][]event.Event) ([]*Encoded, error) {
	out := make([]*Encoded, len(cuts))
	errs := make([]error, len(cuts))
	firsts := make([]uint64, len(cuts))
	for i, evs := range cuts {
		firsts[i] = first
		first += uint64(len(evs))
	}
	encode := func(i int) { out[i], errs[i] = c.Events(key, firsts[i], cuts[i]) }
	if workers := min(runtime.GOMAXPROCS(0), len(cuts)); workers > 1 {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(cuts); i = int(next.Add(1) - 1) {
					encode(i)
				}
			})
		}
		wg.Wait()
	} else {
		for i := range cuts {
			encode(i)
		}
	}
	for _, err := range errs {
		if err != nil {
			for _, e := range out {
				if e != nil {
					e.Release()
				}
			}
			return nil, err
		}
	}
	return out, nil
}

// Header encodes a header record of session key: an opaque, non-empty
// payload the engine defines.
func (c Encoder) Header(key string, payload []byte) (*Encoded, error) {
	codec, maxRaw := c.limits()
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if len(payload) == 0 || len(payload) > maxRaw {
		return nil, fmt.Errorf("%w: header payload of %d bytes (want 1..%d)", ErrTooLarge, len(payload), maxRaw)
	}
	return c.encode(KindHeader, codec, key, payload, 0, 0), nil
}

// Delete encodes a tombstone for incarnation uid of session key.
func (c Encoder) Delete(key string, uid uint64) (*Encoded, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], uid)
	return &Encoded{kind: KindDelete, codec: CodecNone, key: []byte(key), stored: p[:], rawLen: 8}, nil
}

func (c Encoder) encode(kind Kind, codec Codec, key string, raw []byte, firstSeq uint64, count uint32) *Encoded {
	e := &Encoded{kind: kind, codec: CodecNone, key: []byte(key), stored: raw, raw: raw, rawLen: len(raw), firstSeq: firstSeq, count: count}
	if codec == CodecZstd && c.Dict != nil && kind == KindEvents && len(raw) >= MinDictCompress {
		z, err := c.Dict.compress(payloadBufs.Get(len(raw)), raw)
		if err == nil && len(z) < len(raw) {
			e.stored, e.codec, e.dict, e.ownStored = z, CodecZstdDict, c.Dict.ID, true
			return e
		}
		payloadBufs.Put(z)
	}
	minc := c.MinCompress
	if minc == 0 {
		minc = DefaultMinCompress
	}
	if codec == CodecZstd && len(raw) >= minc {
		// (A buffer of len(raw) bytes: zstd grows one its result does not fit.)
		if z := compress(payloadBufs.Get(len(raw)), raw); len(z) < len(raw) {
			e.stored, e.codec, e.ownStored = z, CodecZstd, true
		} else {
			payloadBufs.Put(z)
		}
	}
	return e
}

// Append encodes the events of session key into one frame and appends it;
// see Encoder.Events and AppendEncoded.
func (w *Writer) Append(key string, firstSeq uint64, evs []event.Event) (Location, error) {
	e, err := w.Encoder().Events(key, firstSeq, evs)
	if err != nil {
		return Location{}, err
	}
	return w.AppendEncoded(e)
}

// AppendEncoded appends an encoded frame. The frame is durable once a later
// Sync returns nil. It returns ErrFull if the frame does not fit the size
// limit (a segment always takes its first frame), ErrSealed after Seal,
// ErrClosed after Close, and the sticky I/O error once one happened.
func (w *Writer) AppendEncoded(e *Encoded) (Location, error) {
	return w.appendFrame(e.kind, e.codec, e.key, e.stored, e.rawLen, e.firstSeq, e.count)
}

func (w *Writer) appendFrame(kind Kind, codec Codec, key, stored []byte, rawLen int, firstSeq uint64, count uint32) (Location, error) {
	size := frameSize(len(key), len(stored))
	w.mu.Lock()
	switch {
	case w.err != nil:
		err := w.err
		w.mu.Unlock()
		return Location{}, err
	case w.lost != nil:
		err := w.lost
		w.mu.Unlock()
		return Location{}, err
	case w.sealed:
		w.mu.Unlock()
		return Location{}, ErrSealed
	case w.closed:
		w.mu.Unlock()
		return Location{}, ErrClosed
	case kind != KindSeal && w.end > HeaderSize && w.end+size > w.opts.Size:
		w.mu.Unlock()
		return Location{}, ErrFull
	case w.end+size > MaxSegmentSize:
		w.mu.Unlock()
		return Location{}, fmt.Errorf("%w: segment would exceed %d bytes", ErrTooLarge, MaxSegmentSize)
	}
	if kind == KindSeal {
		w.sealed = true
		w.sealAt = w.end
		count = w.frames
	}
	off := w.end
	n := len(w.buf)
	w.buf = append(w.buf, make([]byte, size)...)
	putFrame(w.buf[n:], kind, codec, key, stored, rawLen, firstSeq, count, w.bufStart)
	w.end += size
	if kind == KindEvents {
		w.frames++
		w.bufFrames++
	}
	spill := len(w.buf) >= w.opts.BufferSize
	w.mu.Unlock()
	if spill {
		if err := w.writeOut(false); err != nil {
			return Location{}, err
		}
	}
	return Location{Offset: off, Size: size}, nil
}

// Sync writes every frame appended so far and fdatasyncs the file. When it
// returns nil, those frames survive a crash. Concurrent callers share one
// write and one fdatasync.
func (w *Writer) Sync() error { return w.writeOut(true) }

// writeOut hands the buffer to the file. With sync it also fdatasyncs, so
// that every frame appended before the call is durable.
//
// Group commit: one goroutine at a time owns the file (ioBusy). A caller
// that finds it busy waits for the owner to finish, then either finds its
// frames already durable (another sync covered them) or becomes the owner
// and writes everything appended so far, for all waiters at once.
func (w *Writer) writeOut(sync bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := w.end
	epoch := len(w.losses)
	for {
		switch {
		case w.err != nil:
			return w.err
		case w.lostSince(epoch, target) != nil:
			return w.lostSince(epoch, target)
		case sync && w.durable.Load() >= target:
			return nil // durable already, even if the writer was sealed and closed since
		case !sync && w.bufStart >= target:
			return nil // another owner already wrote these frames out
		case w.closed:
			return ErrClosed
		}
		if !w.ioBusy {
			break
		}
		w.waiting++
		w.ioDone.Wait()
		w.waiting--
	}
	w.ioBusy = true
	if sync && w.released > 1 {
		// Group commit under load: the last sync released several
		// waiters, which are likely runnable and about to append again.
		// Yield once before taking the buffer so that their frames share
		// this fdatasync instead of waiting a whole round for the next.
		// (A lone flusher never yields: its latency is the write and the
		// fdatasync alone.)
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	buf, start := w.buf, w.bufStart
	w.buf, w.spare = w.spare[:0], nil
	w.bufStart = w.end
	w.inflight, w.inflightStart = buf, start
	w.inflightFrames, w.bufFrames = w.bufFrames, 0
	w.mu.Unlock()

	err := w.write(buf, start, sync)

	w.mu.Lock()
	w.inflight = nil
	w.ioBusy = false
	w.released = w.waiting
	w.ioDone.Broadcast()
	var we *writeError
	switch {
	case err == nil:
	case errors.As(err, &we) && w.err == nil:
		// Nothing from start on was synced, nor acknowledged: the frames
		// of this write and those appended since are lost, and the
		// writer waits for Recover to undo them.
		w.lost = &LostError{Path: w.path, From: start, Err: we.err}
		w.lostEnd = start + int64(len(buf))
		w.lostFrames = w.inflightFrames
		w.losses = append(w.losses, w.lost)
		return w.lost
	case w.err == nil:
		w.err = fmt.Errorf("segment: %s: %w: %w", w.path, ErrSyncFailed, err)
	}
	if w.spare == nil && cap(buf) <= 4*w.opts.BufferSize {
		w.spare = buf[:0]
	}
	return w.err
}

// lostSince returns the loss that took frames below target, appended at
// epoch: the loss not yet undone, or one since epoch; nil if none. Called
// with mu held.
func (w *Writer) lostSince(epoch int, target int64) *LostError {
	if w.lost != nil && w.lost.From < target {
		return w.lost // not undone yet: frames appended since are gone too
	}
	for _, l := range w.losses[epoch:] {
		if l.From < target {
			return l
		}
	}
	return nil
}

// writeError marks a failed write (not an fdatasync): it promised nothing.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// LostError reports frames lost by a write that failed before it was
// synced (a full disk, say): every frame the writer held from offset From
// on, in this write and appended after it, is gone and was never
// acknowledged; the frames before From are durable. The Writer refuses
// appends and syncs with it until Recover undoes the failed write. It
// wraps the write's error.
type LostError struct {
	Path string
	From int64
	Err  error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("segment: %s: frames from offset %d were not written: %v", e.Path, e.From, e.Err)
}

func (e *LostError) Unwrap() error { return e.Err }

// Lost returns the loss the Writer waits to have undone by Recover, or
// nil.
func (w *Writer) Lost() *LostError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Recover undoes a failed write (see LostError): what it may have written
// is zeroed (a preallocated file) or cut off, the file is fdatasynced, and
// appending resumes at the loss's offset. The caller must have forgotten
// every frame it appended from there and must not append meanwhile. If
// the undo fails, the writer fails for good (that error is returned from
// then on).
func (w *Writer) Recover() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.lost == nil {
		return nil
	}
	w.acquireIO()
	from, end := w.lost.From, max(w.lostEnd, w.end)
	w.mu.Unlock()
	var err error
	size, err := w.f.Size()
	if err == nil {
		if w.opts.Preallocate {
			err = zeroFill(w.f, from, min(end, size))
		} else if size > from {
			err = w.f.Truncate(from)
		}
	}
	if err == nil {
		if err = w.f.Sync(); err != nil {
			err = fmt.Errorf("%w: %w", ErrSyncFailed, err)
		}
	}
	w.mu.Lock()
	w.releaseIO()
	if err != nil {
		w.err = fmt.Errorf("segment: %s: undoing a failed write: %w", w.path, err)
		return w.err
	}
	w.frames -= w.lostFrames + w.bufFrames
	w.lostFrames, w.bufFrames = 0, 0
	w.buf = w.buf[:0]
	w.bufStart, w.end = from, from
	w.written.Store(from)
	if w.sealed && w.sealAt >= from {
		w.sealed = false
	}
	w.lost = nil
	return nil
}

// acquireIO waits until no goroutine owns the file and takes ownership.
// Called and returns with mu held.
func (w *Writer) acquireIO() {
	for w.ioBusy {
		w.waiting++
		w.ioDone.Wait()
		w.waiting--
	}
	w.ioBusy = true
}

func (w *Writer) releaseIO() {
	w.ioBusy = false
	w.ioDone.Broadcast()
}

// write is called by the owner of the file (ioBusy), without mu.
func (w *Writer) write(buf []byte, start int64, sync bool) error {
	if len(buf) > 0 {
		// The discipline: no write while an earlier one is unsynced.
		if w.written.Load() > w.durable.Load() {
			if err := w.f.Sync(); err != nil {
				return err
			}
			w.durable.Store(w.written.Load())
		}
		if _, err := w.f.WriteAt(buf, start); err != nil {
			return &writeError{err}
		}
		w.written.Store(start + int64(len(buf)))
	}
	if sync && w.written.Load() > w.durable.Load() {
		if err := w.f.Sync(); err != nil {
			return err
		}
		w.durable.Store(w.written.Load())
	}
	return nil
}

// Seal makes the segment immutable: it syncs every frame, appends and syncs
// a seal frame, and trims a preallocated file to its used length. After
// Seal, Append returns ErrSealed; the Writer still has to be closed.
func (w *Writer) Seal() error {
	w.mu.Lock()
	sealed := w.sealed
	w.mu.Unlock()
	if sealed {
		return nil
	}
	loc, err := w.appendFrame(KindSeal, CodecNone, nil, nil, 0, 0, 0)
	if err != nil {
		return err
	}
	end := loc.Offset + loc.Size
	if err := w.Sync(); err != nil {
		return err
	}
	if !w.opts.Preallocate {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	w.acquireIO()
	w.mu.Unlock()
	err = w.f.Truncate(end)
	if err == nil {
		err = w.f.Sync()
	}
	w.mu.Lock()
	w.releaseIO()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("segment: %s: trim after seal: %w: %w", w.path, ErrSyncFailed, err)
	}
	return w.err
}

// Close closes the file without syncing: frames not yet synced may be
// lost. It is idempotent.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.acquireIO() // wait for a write or sync in flight
	defer w.releaseIO()
	w.closed = true
	w.buf = nil
	return w.f.Close()
}

// AppendFrame appends e to dst as the bytes of a frame that is part of a
// write starting at offset base (see the frame's base field): every byte
// of the segment before base must be durable by the time the frame is
// written. It is for writers that place frames themselves (the engine's
// shared log, where several processes append to one segment).
func (e *Encoded) AppendFrame(dst []byte, base int64) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, e.Size())...)
	putFrame(dst[n:], e.kind, e.codec, e.key, e.stored, e.rawLen, e.firstSeq, e.count, base)
	return dst
}

// Events reports whether e is an events frame (the ones a seal counts).
func (e *Encoded) Events() bool { return e.kind == KindEvents }

// SealSize is the size of a seal frame.
const SealSize = frameHeaderSize

// AppendSeal appends to dst a seal frame for a segment holding events
// event frames, part of a write starting at base (see AppendFrame).
func AppendSeal(dst []byte, events uint32, base int64) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, SealSize)...)
	putFrame(dst[n:], KindSeal, CodecNone, nil, nil, 0, 0, events, base)
	return dst
}

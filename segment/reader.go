package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

// ScanOptions configures Scan.
type ScanOptions struct {
	// From is the offset of the first frame to read; default HeaderSize.
	// It must be a frame boundary.
	From int64
	// Durable is an offset known, by other means (an index checkpoint, a
	// later segment), to have been synced: damage below it is corruption,
	// never a torn tail.
	Durable int64
	// MaxFrameRaw caps the decoded size a frame may claim; default and
	// upper bound DefaultMaxFrameRaw.
	MaxFrameRaw int
	// Limit, if positive, ends the scan there, as if the file ended: a
	// frame boundary up to which a segment still being written is durable
	// (the durable position), so that frames being written past it are not read.
	Limit int64
}

// ScanResult is what Scan found.
type ScanResult struct {
	// End is the offset just past the last valid frame: where the next
	// frame goes, and the length to cut a torn segment back to.
	End int64
	// Frames counts the event frames from From to End.
	Frames uint32
	// Sealed reports that a seal frame ends the segment.
	Sealed bool
	// Torn reports bytes past End that are not zero and hold no frame
	// written after End was durable: the remains of an unsynced write.
	// TornReason says what was wrong at End.
	Torn       bool
	TornReason string
	// DirtyEnd is the offset just past the last non-zero byte of the file
	// (at least End): the range to zero when a preallocated file is reused.
	DirtyEnd int64
}

// Scan walks the frames of a segment's bytes (data, starting with the
// header) and calls fn, if not nil, for each valid frame; fn's FrameInfo
// aliases data and is valid only during the call. An error from fn stops
// the scan and is returned as is.
//
// Scan verifies every frame's checksum but does not decode payloads. It
// stops at the first frame that is incomplete, fails its checksum or is an
// all-zero header, and classifies what follows:
//
//   - Only zeros follow: the clean end of the log.
//   - No valid frame follows that was written after the bad offset had been
//     synced (its base is past the bad offset), and opts.Durable does not
//     reach it: a torn tail. ScanResult.Torn is set and End is the offset to
//     cut back to. Nothing before End is lost.
//   - Otherwise: the damage is in synced data, in the middle of the log.
//     Scan returns a *CorruptionError with the offset; it never truncates
//     past acknowledged data.
//
// A frame whose checksum matches but whose content is invalid is always a
// *CorruptionError, as is anything but zeros after a seal frame.
func Scan(path string, data []byte, opts ScanOptions, fn func(*FrameInfo) error) (ScanResult, error) {
	maxRaw := opts.MaxFrameRaw
	if maxRaw <= 0 || maxRaw > DefaultMaxFrameRaw {
		maxRaw = DefaultMaxFrameRaw
	}
	off := opts.From
	if off == 0 {
		off = HeaderSize
	}
	var res ScanResult
	if off < HeaderSize || off%frameAlign != 0 {
		return res, fmt.Errorf("segment: scan %s: start offset %d is not a frame boundary", path, off)
	}
	corrupt := func(at int64, reason string) (ScanResult, error) {
		res.End = at
		return res, &CorruptionError{Path: path, Offset: at, Reason: reason}
	}
	if off > int64(len(data)) {
		return corrupt(int64(len(data)), fmt.Sprintf("segment of %d bytes ends before offset %d", len(data), off))
	}
	for {
		fi, st, reason := parseFrame(data, off, maxRaw)
		switch st {
		case frameOK:
			if fn != nil {
				if err := fn(&fi); err != nil {
					res.End = off
					return res, err
				}
			}
			off = fi.End()
			if fi.Kind == KindSeal {
				res.Sealed = true
				res.End, res.DirtyEnd = off, off
				if !allZero(data[off:]) {
					return corrupt(off, "data after the seal frame")
				}
				return res, nil
			}
			res.Frames++
			continue
		case frameWrong:
			return corrupt(off, reason)
		case frameZero:
			if allZero(data[off:]) {
				if off < opts.Durable {
					return corrupt(off, fmt.Sprintf("log ends at %d, before the durable offset %d", off, opts.Durable))
				}
				res.End, res.DirtyEnd = off, off
				return res, nil
			}
			reason = "zeroed frame header with data after it"
		}
		// A bad frame at off: torn tail or damage in synced data?
		if opts.Durable > off {
			return corrupt(off, fmt.Sprintf("%s, below the durable offset %d", reason, opts.Durable))
		}
		dirty := dirtyEnd(data, off)
		if y, ok := laterWrite(data, off, dirty, maxRaw); ok {
			return corrupt(off, fmt.Sprintf("%s, and the valid frame at %d was written after this offset had been synced", reason, y))
		} else if y < 0 {
			return corrupt(off, reason+", and the bytes after it are too dense with frame headers to tell a torn write from damage")
		}
		res.End, res.DirtyEnd = off, dirty
		res.Torn, res.TornReason = true, reason
		return res, nil
	}
}

// laterWrite looks in data[bad+8:dirty] for a valid frame that was part of
// a write issued after bad had been synced (base > bad). It returns its
// offset and true if there is one. The search hashes each candidate, so it
// has a budget proportional to the range searched: a file crafted to be
// dense with plausible headers makes it give up and return -1, false, which
// the caller reports as corruption (refuse, never truncate on a guess).
func laterWrite(data []byte, bad, dirty int64, maxRaw int) (int64, bool) {
	budget := 4*(dirty-bad) + 1<<20
	for y := bad + frameAlign; y+frameHeaderSize <= dirty; y += frameAlign {
		h := data[y : y+frameHeaderSize]
		if binary.LittleEndian.Uint32(h) != frameMagic {
			continue
		}
		base := int64(binary.LittleEndian.Uint32(h[28:]))
		if base <= bad || base > y {
			continue // not from a later write: proves nothing
		}
		size := frameSize(int(binary.LittleEndian.Uint16(h[6:])), int(binary.LittleEndian.Uint32(h[8:])))
		if size > dirty-y+frameAlign {
			continue
		}
		if budget -= size; budget < 0 {
			return -1, false
		}
		if _, st, _ := parseFrame(data, y, maxRaw); st == frameOK {
			return y, true
		}
	}
	return 0, false
}

// MayHoldFrames reports whether data (a whole segment file, whose header
// may be damaged) could hold a valid frame: it looks for one at every frame
// boundary. A segment whose header is bad and that holds no frame never
// held acknowledged data (its creation did not finish). If the search
// cannot decide within its budget it answers true, the safe answer.
func MayHoldFrames(data []byte) bool {
	if int64(len(data)) <= HeaderSize {
		return false
	}
	y, ok := laterWrite(data, 0, dirtyEnd(data, HeaderSize), DefaultMaxFrameRaw)
	return ok || y < 0
}

// dirtyEnd returns the offset just past the last non-zero byte at or after
// from, or from if there is none.
func dirtyEnd(data []byte, from int64) int64 {
	end := int64(len(data))
	for end > from && data[end-1] == 0 {
		end--
	}
	return end
}

// Frame is one decoded frame. It shares no memory with the segment.
type Frame struct {
	Offset   int64
	Size     int64
	Kind     Kind // KindEvents, KindHeader or KindDelete
	Session  string
	FirstSeq uint64
	Codec    Codec
	RawLen   int
	Events   []event.Event // KindEvents
	Payload  []byte        // KindHeader: the record the engine wrote; KindDelete: the uid, uint64 LE
	Deletes  uint64        // KindDelete: the incarnation the tombstone ends (Payload decoded)
}

// DecodeFrame decodes and verifies the events or header frame at off in
// data (the whole segment, header first), finding the dictionary a frame
// names in dicts (nil: none). Any failure is a *CorruptionError (the
// caller was told a frame is there), but for a failure to read a
// dictionary's file other than its absence.
func DecodeFrame(path string, data []byte, off int64, maxRaw int, dicts *Dicts) (*Frame, error) {
	if off < HeaderSize || off%frameAlign != 0 || off >= int64(len(data)) {
		return nil, &CorruptionError{Path: path, Offset: off, Reason: fmt.Sprintf("no frame boundary at offset %d of %d bytes", off, len(data))}
	}
	return DecodeFrameAt(path, data[off:], off, maxRaw, dicts)
}

// DecodeFrameAt is DecodeFrame on buf, which holds the frame that starts at
// offset off of the segment (a copy of it read from the file).
func DecodeFrameAt(path string, buf []byte, off int64, maxRaw int, dicts *Dicts) (*Frame, error) {
	if maxRaw <= 0 || maxRaw > DefaultMaxFrameRaw {
		maxRaw = DefaultMaxFrameRaw
	}
	bad := func(reason string) (*Frame, error) {
		return nil, &CorruptionError{Path: path, Offset: off, Reason: reason}
	}
	if off < HeaderSize || off%frameAlign != 0 {
		return bad(fmt.Sprintf("no frame boundary at offset %d", off))
	}
	fi, st, reason := parseFrameAt(buf, off, maxRaw)
	switch {
	case st == frameZero:
		return bad("no frame here (zero bytes)")
	case st != frameOK:
		return bad(reason)
	case fi.Kind != KindEvents && fi.Kind != KindHeader && fi.Kind != KindDelete:
		return bad(fmt.Sprintf("expected an events, header or delete frame, found %s", fi.Kind))
	}
	stored := buf[frameHeaderSize+int64(len(fi.Key)):][:fi.StoredLen]
	raw, err := decodePayload(path, off, &fi, stored, dicts)
	if err != nil {
		return nil, err
	}
	f := &Frame{
		Offset:   off,
		Size:     fi.Size,
		Kind:     fi.Kind,
		Session:  string(fi.Key),
		FirstSeq: fi.FirstSeq,
		Codec:    fi.Codec,
		RawLen:   int(fi.RawLen),
	}
	if fi.Kind == KindDelete {
		if len(raw) != 8 {
			return bad(fmt.Sprintf("tombstone payload of %d bytes, want 8", len(raw)))
		}
		f.Deletes = binary.LittleEndian.Uint64(raw)
	}
	if fi.Kind != KindEvents {
		f.Payload = raw
		return f, nil
	}
	evs, reason := decodeEvents(raw, fi.FirstSeq, fi.Count)
	if reason != "" {
		return bad(reason)
	}
	f.Events = evs
	return f, nil
}

// decodePayload returns the payload of the frame fi (at off of the
// segment at path), stored as stored, decoded: a new buffer. A payload
// that does not decode is a *CorruptionError; so is a dictionary that is
// missing or damaged (a failure to read its file otherwise is returned
// as it is).
func decodePayload(path string, off int64, fi *FrameInfo, stored []byte, dicts *Dicts) ([]byte, error) {
	bad := func(reason string) ([]byte, error) {
		return nil, &CorruptionError{Path: path, Offset: off, Reason: reason}
	}
	var raw []byte
	switch fi.Codec {
	case CodecZstd:
		var err error
		if raw, err = decompress(stored, int(fi.RawLen)); err != nil {
			return bad("zstd: " + err.Error())
		}
	case CodecS2:
		var err error
		if raw, err = s2Decompress(nil, stored, int(fi.RawLen)); err != nil {
			return bad("s2: " + err.Error())
		}
	case CodecZstdDict, CodecS2Dict:
		if dicts == nil {
			return bad(fmt.Sprintf("frame compressed with dictionary %08x, where there are none", fi.Dict))
		}
		d, err := dicts.Get(fi.Dict)
		if errors.Is(err, ErrCorrupt) {
			return nil, &CorruptionError{Path: path, Offset: off, Reason: fmt.Sprintf("frame compressed with dictionary %08x", fi.Dict), Err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("segment: %s: frame at %d: dictionary %08x: %w", path, off, fi.Dict, err)
		}
		if fi.Codec == CodecZstdDict {
			if raw, err = d.decompress(stored[4:], int(fi.RawLen)); err != nil {
				return bad(fmt.Sprintf("zstd with dictionary %08x: %v", fi.Dict, err))
			}
			break
		}
		sd := d.s2Form()
		if sd == nil {
			return bad(fmt.Sprintf("s2 with dictionary %08x, which has no S2 form (content under %d bytes)", fi.Dict, s2.MinDictSize))
		}
		if raw, err = s2Decompress(sd, stored[4:], int(fi.RawLen)); err != nil {
			return bad(fmt.Sprintf("s2 with dictionary %08x: %v", fi.Dict, err))
		}
	default:
		raw = bytes.Clone(stored)
	}
	return raw, nil
}

// Reader reads a segment file through a read-only mmap of it.
//
// A Reader is safe for concurrent use, except that Close must not run
// while other calls are in progress. Frames and events it returns are
// copies: they stay valid after Close.
type Reader struct {
	path   string
	f      vfs.File
	hdr    Header
	dicts  *Dicts
	closed atomic.Bool

	mu   sync.RWMutex
	m    *vfs.Mapping
	data []byte
	old  []*vfs.Mapping // replaced by Remap; unmapped at Close
}

// OpenReader opens and maps the segment file path and validates its
// header. It returns a *FormatError for a version this build does not read
// and a *CorruptionError for a damaged header. A nil fsys means the
// operating system's file system. Frames compressed with a dictionary
// find it in the segment's directory (see OpenReaderDicts).
func OpenReader(fsys vfs.FS, path string) (*Reader, error) {
	return OpenReaderDicts(fsys, path, nil)
}

// OpenReaderDicts is OpenReader with the dictionaries frames name found
// in dicts, which readers of one store share (nil: the dictionaries of the
// segment's directory, read for this reader).
func OpenReaderDicts(fsys vfs.FS, path string, dicts *Dicts) (*Reader, error) {
	fsys = orDefault(fsys)
	if dicts == nil {
		dicts = NewDicts(fsys, filepath.Dir(path))
	}
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := mapWhole(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &Reader{path: path, f: f, dicts: dicts, m: m, data: m.Bytes()}
	if r.hdr, err = DecodeHeader(path, r.data); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// mapWhole maps f as long as it is. A segment being written may be
// trimmed meanwhile (Seal cuts a preallocated tail at a roll): if it is
// shorter once mapped, or the map failed because it shrank after its size
// was read, it is mapped again at its new size, so that no mapping reaches
// past the end of the file (touching that faults).
func mapWhole(f vfs.File) (*vfs.Mapping, error) {
	for try := 0; ; try++ {
		size, err := f.Size()
		if err != nil {
			return nil, err
		}
		m, err := f.Map(size)
		now, serr := f.Size()
		if serr != nil || now >= size || try == 3 {
			return m, err // (after three shrinks in a row, the last try stands)
		}
		if err == nil {
			m.Close()
		}
	}
}

// Path returns the file name.
func (r *Reader) Path() string { return r.path }

// Header returns the segment header.
func (r *Reader) Header() Header { return r.hdr }

// Size returns the number of mapped bytes.
func (r *Reader) Size() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return int64(len(r.data))
}

// Remap maps the file again if its size changed: grown past the mapping (a
// segment still being written without preallocation) or trimmed by Seal (a
// preallocated one). Earlier mappings stay mapped until Close, so
// concurrent readers of frames are never cut off.
func (r *Reader) Remap() error {
	if r.closed.Load() {
		return ErrClosed
	}
	size, err := r.f.Size()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if size == int64(len(r.data)) {
		return nil
	}
	// Shrunk too: Seal trims a preallocated segment's tail, and touching
	// the mapping past the file's end faults (SIGBUS).
	m, err := mapWhole(r.f)
	if err != nil {
		return err
	}
	r.old = append(r.old, r.m)
	r.m, r.data = m, m.Bytes()
	return nil
}

// Scan runs Scan over the mapped file.
func (r *Reader) Scan(opts ScanOptions, fn func(*FrameInfo) error) (ScanResult, error) {
	if r.closed.Load() {
		return ScanResult{}, ErrClosed
	}
	r.mu.RLock()
	data := r.data
	r.mu.RUnlock()
	if opts.Limit > 0 {
		if opts.Limit > int64(len(data)) {
			return ScanResult{}, fmt.Errorf("segment: scan %s: limit %d past the %d mapped bytes", r.path, opts.Limit, len(data))
		}
		data = data[:opts.Limit]
	}
	return Scan(r.path, data, opts, fn)
}

// NextFrame returns the offset of the first valid frame at or after from
// (rounded up to a frame boundary), for tools that resynchronize past
// damage to report what follows it. It reports false if there is none.
func (r *Reader) NextFrame(from int64) (int64, bool) {
	r.mu.RLock()
	data := r.data
	r.mu.RUnlock()
	for y := max(alignUp(from), HeaderSize); y+frameHeaderSize <= int64(len(data)); y += frameAlign {
		if binary.LittleEndian.Uint32(data[y:]) != frameMagic {
			continue
		}
		if _, st, _ := parseFrame(data, y, DefaultMaxFrameRaw); st == frameOK {
			return y, true
		}
	}
	return 0, false
}

// ReadFrame decodes the events or header frame at off. See DecodeFrame. If
// off is past the mapping it remaps once (the file may have grown).
func (r *Reader) ReadFrame(off int64) (*Frame, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	r.mu.RLock()
	data := r.data
	r.mu.RUnlock()
	if off+frameHeaderSize > int64(len(data)) {
		if err := r.Remap(); err != nil {
			return nil, err
		}
		r.mu.RLock()
		data = r.data
		r.mu.RUnlock()
	}
	f, err := DecodeFrame(r.path, data, off, DefaultMaxFrameRaw, r.dicts)
	if err != nil && !r.closed.Load() {
		// The frame may end past the mapping of a growing file.
		if size, serr := r.f.Size(); serr == nil && size > int64(len(data)) {
			if err := r.Remap(); err != nil {
				return nil, err
			}
			r.mu.RLock()
			data = r.data
			r.mu.RUnlock()
			return DecodeFrame(r.path, data, off, DefaultMaxFrameRaw, r.dicts)
		}
	}
	return f, err
}

// Close unmaps and closes the file. It is idempotent.
func (r *Reader) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = nil
	err := r.m.Close()
	for _, m := range r.old {
		if cerr := m.Close(); err == nil {
			err = cerr
		}
	}
	r.old = nil
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CheckSealed verifies, cheaply, that the segment at path still ends with
// its seal frame, as every segment before the active one does: it reads
// the last frame header's worth of bytes, and scans the whole file only
// if they are not a seal (a seal followed by the zeros of a trim that a
// crash cut short is accepted). A sealed segment cut short, or one that
// grew, fails with a *CorruptionError at the point the scan stopped.
func CheckSealed(fsys vfs.FS, path string) error {
	fsys = orDefault(fsys)
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	size, err := f.Size()
	if err == nil && size >= HeaderSize+frameHeaderSize && size%frameAlign == 0 {
		buf := make([]byte, frameHeaderSize)
		if _, err := f.ReadAt(buf, size-frameHeaderSize); err == nil {
			fi, st, _ := parseFrameAt(buf, size-frameHeaderSize, DefaultMaxFrameRaw)
			if st == frameOK && fi.Kind == KindSeal {
				f.Close()
				return nil
			}
		}
	}
	f.Close()
	r, err := OpenReader(fsys, path)
	if err != nil {
		return err
	}
	defer r.Close()
	res, err := r.Scan(ScanOptions{}, nil)
	if err != nil {
		return err
	}
	if !res.Sealed || res.Torn {
		reason := "sealed segment does not end with its seal frame (cut short?)"
		if res.TornReason != "" {
			reason += ": " + res.TornReason
		}
		return &CorruptionError{Path: path, Offset: res.End, Reason: reason}
	}
	return nil
}

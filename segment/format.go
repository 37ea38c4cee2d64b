package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/seglog/seglog/event"
)

// A segment file is a 64-byte header followed by 8-byte-aligned frames.
// Everything is little-endian. docs/FORMAT.md#segment-file has the full
// description; this is the summary kept next to the code.
//
// Segment header (HeaderSize bytes):
//
//	0        8        10       12       16          24          32          40           56         64
//	+--------+--------+--------+--------+-----------+-----------+-----------+------------+----------+
//	| magic  | version| hdrlen | rsvd=0 | segment ID| created ns| generation| rsvd, zero | xxh64    |
//	+--------+--------+--------+--------+-----------+-----------+-----------+------------+----------+
//
// generation is zero in version 1 (a segment as its writer created it), at
// least 1 in version 2 (a version 1 or 2 segment rewritten by compaction;
// see Rewrite), and zero as created, more after each rewrite, in versions 3
// (whose frames may also be compressed with a dictionary: CodecZstdDict)
// and 4 (whose frames may also be S2 blocks: CodecS2, CodecS2Dict).
//
// Frame (frameHeaderSize bytes, then key, payload and zero padding to 8):
//
//	0       4      5      6        8          12        16          24      28       32        40
//	+-------+------+------+--------+----------+---------+-----------+-------+--------+---------+
//	| magic | kind | codec| keylen | storedlen| rawlen  | first seq | count | base   | xxh64   | key | payload | pad
//	+-------+------+------+--------+----------+---------+-----------+-------+--------+---------+
//
// The frame checksum is xxh64 over header bytes [0,32), the key, the stored
// payload and the padding. base is the offset of the first byte of the write
// the frame was part of: every byte before it had been fdatasynced when the
// frame was written (see Scan).

// Part of the on-disk format; never change.
const (
	HeaderSize      = 64
	frameHeaderSize = 40
	frameAlign      = 8

	// Version is the segment format version Create creates segments
	// with: S2Version.
	Version = S2Version
	// RewriteVersion is the version of a version 1 or 2 segment rewritten
	// by compaction: version 1 plus a generation (>= 1) in header bytes
	// [32, 40). A rewritten version 3 segment stays version 3.
	RewriteVersion = 2
	// DictVersion is the first version whose frames may use CodecZstdDict:
	// version 2's layout, the generation 0 as created. Builds before it
	// refuse such a segment with a *FormatError instead of meeting an
	// unknown codec in it.
	DictVersion = 3
	// S2Version is the first version whose frames may use CodecS2 and
	// CodecS2Dict: version 3's layout. Builds before it refuse such a
	// segment with a *FormatError.
	S2Version = 4
	// NewestVersion is the newest segment format version this build reads.
	NewestVersion = S2Version
	// OldestVersion is the oldest segment format version this build reads.
	OldestVersion = 1

	frameMagic uint32 = 0x5EA75246 // bytes 46 52 A7 5E: "FR" and two non-ASCII bytes
)

// magic starts every segment file. Part of the on-disk format.
var magic = [8]byte{0x89, 'S', 'E', 'G', 'L', 'O', 'G', '\n'}

// Limits of the format.
const (
	// MaxKeyLen is the longest session key a frame may carry.
	MaxKeyLen = 1024
	// DefaultMaxFrameRaw is the default cap on the decoded payload of one
	// frame. A reader refuses frames that claim more, so a hostile file
	// cannot make it allocate without bound.
	DefaultMaxFrameRaw = 32 << 20
	// MaxSegmentSize bounds a segment file so that offsets fit the format's
	// 32-bit fields.
	MaxSegmentSize = 1 << 30
	// minEventLen is the fewest payload bytes one event can take: flags,
	// time, type length, one type byte, data length, and "{}".
	minEventLen = 7
)

// Kind is the type of a frame. Part of the on-disk format.
type Kind uint8

// Frame kinds.
const (
	KindEvents Kind = 1 // a batch of events of one session
	KindSeal   Kind = 2 // the last frame of a sealed segment
	KindHeader Kind = 3 // a session's header record (the engine's JSON), written once per incarnation
	KindDelete Kind = 4 // a tombstone: the incarnation (uint64 LE payload) of the session key is deleted
)

func (k Kind) String() string {
	switch k {
	case KindEvents:
		return "events"
	case KindSeal:
		return "seal"
	case KindHeader:
		return "header"
	case KindDelete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Codec says how a frame's payload is stored. Part of the on-disk format.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = 0 // stored as encoded
	CodecZstd Codec = 1 // one zstd frame, without zstd's own checksum
	// CodecZstdDict: the ID of a store dictionary (uint32 LE, not 0), then
	// one zstd frame made with that dictionary, without zstd's checksum.
	// Only in segments of version DictVersion and later.
	CodecZstdDict Codec = 2
	// CodecS2: one S2 block (klauspost/compress/s2's block format: the
	// raw length as a uvarint, then the block). A fifth of zstd's CPU
	// for about 1.4 times its bytes: what a turn's flush writes (see
	// Encoder.Fast). Only in segments of version S2Version and later.
	CodecS2 Codec = 3
	// CodecS2Dict: the ID of a store dictionary (uint32 LE, not 0), then
	// one S2 block made with the dictionary's S2 form (Dict.S2: the last
	// 64 KiB of its zstd content, first repeat offset 0). Only in
	// segments of version S2Version and later.
	CodecS2Dict Codec = 4
)

// Dicted reports whether a payload of codec c starts with the ID of the
// dictionary it was compressed with.
func (c Codec) Dicted() bool { return c == CodecZstdDict || c == CodecS2Dict }

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecZstdDict:
		return "zstd+dict"
	case CodecS2:
		return "s2"
	case CodecS2Dict:
		return "s2+dict"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Header is the decoded segment file header.
type Header struct {
	Version    int
	ID         uint64
	CreatedNs  int64  // creation time, Unix nanoseconds
	Generation uint64 // 0 as created; incremented by each rewrite (versions 2 and 3)
}

func appendHeader(dst []byte, h Header) []byte {
	var b [HeaderSize]byte
	copy(b[0:8], magic[:])
	binary.LittleEndian.PutUint16(b[8:], uint16(h.Version))
	binary.LittleEndian.PutUint16(b[10:], HeaderSize)
	binary.LittleEndian.PutUint64(b[16:], h.ID)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.CreatedNs))
	binary.LittleEndian.PutUint64(b[32:], h.Generation)
	binary.LittleEndian.PutUint64(b[56:], xxhash.Sum64(b[:56]))
	return append(dst, b[:]...)
}

// DecodeHeader parses and validates a segment header. path only labels
// errors. It returns a *FormatError for a version this build does not read
// (checked before anything else past the magic, since another version may
// lay out its header differently) and a *CorruptionError for anything else.
func DecodeHeader(path string, b []byte) (Header, error) {
	bad := func(reason string) (Header, error) {
		return Header{}, &CorruptionError{Path: path, Offset: 0, Reason: reason}
	}
	if len(b) < 10 {
		return bad(fmt.Sprintf("file of %d bytes is shorter than a segment header", len(b)))
	}
	if [8]byte(b[0:8]) != magic {
		return bad("bad magic: not a seglog segment")
	}
	v := int(binary.LittleEndian.Uint16(b[8:]))
	if v < OldestVersion || v > NewestVersion {
		return Header{}, &FormatError{Path: path, What: "segment", Version: v, Supported: NewestVersion, Oldest: OldestVersion}
	}
	if len(b) < HeaderSize {
		return bad(fmt.Sprintf("file of %d bytes is shorter than a segment header", len(b)))
	}
	if n := binary.LittleEndian.Uint16(b[10:]); n != HeaderSize {
		return bad(fmt.Sprintf("header length %d, want %d", n, HeaderSize))
	}
	if sum := binary.LittleEndian.Uint64(b[56:]); sum != xxhash.Sum64(b[:56]) {
		return bad("header checksum mismatch")
	}
	if !allZero(b[12:16]) || !allZero(b[40:56]) {
		return bad("reserved header bytes are not zero")
	}
	gen := binary.LittleEndian.Uint64(b[32:])
	switch {
	case v == 1 && gen != 0:
		return bad("reserved header bytes are not zero")
	case v == RewriteVersion && gen == 0:
		return bad("rewritten segment with generation 0")
	}
	return Header{
		Version:    v,
		ID:         binary.LittleEndian.Uint64(b[16:]),
		CreatedNs:  int64(binary.LittleEndian.Uint64(b[24:])),
		Generation: gen,
	}, nil
}

// HeaderChecksumOK reports whether b starts with a header whose checksum
// (in this version's layout) matches.
func HeaderChecksumOK(b []byte) bool {
	return len(b) >= HeaderSize && binary.LittleEndian.Uint64(b[56:]) == xxhash.Sum64(b[:56])
}

// FrameInfo describes one frame as found in a segment.
type FrameInfo struct {
	Offset    int64  // where the frame starts in the segment file
	Size      int64  // bytes the frame takes on disk, padding included
	Kind      Kind   //
	Codec     Codec  //
	Key       []byte // session key; aliases the segment data, valid only while it is
	FirstSeq  uint64 // seq of the first event
	Count     uint32 // events in the frame (for a seal frame: event frames in the segment)
	RawLen    uint32 // payload bytes after decoding
	StoredLen uint32 // payload bytes as stored
	Base      int64  // offset of the write the frame was part of
	Dict      uint32 // CodecZstdDict, CodecS2Dict: the dictionary the payload was compressed with
}

// End returns the offset just past the frame.
func (fi *FrameInfo) End() int64 { return fi.Offset + fi.Size }

func alignUp(n int64) int64 { return (n + frameAlign - 1) &^ (frameAlign - 1) }

// frameSize is the on-disk size of a frame with the given key and payload.
func frameSize(keyLen, storedLen int) int64 {
	return alignUp(int64(frameHeaderSize + keyLen + storedLen))
}

// putFrame writes a complete frame at dst[0:frameSize(...)], which must be
// zeroed. base is the offset of the write the frame will be part of.
func putFrame(dst []byte, kind Kind, codec Codec, key []byte, stored []byte, rawLen int, firstSeq uint64, count uint32, base int64) {
	binary.LittleEndian.PutUint32(dst[0:], frameMagic)
	dst[4] = byte(kind)
	dst[5] = byte(codec)
	binary.LittleEndian.PutUint16(dst[6:], uint16(len(key)))
	binary.LittleEndian.PutUint32(dst[8:], uint32(len(stored)))
	binary.LittleEndian.PutUint32(dst[12:], uint32(rawLen))
	binary.LittleEndian.PutUint64(dst[16:], firstSeq)
	binary.LittleEndian.PutUint32(dst[24:], count)
	binary.LittleEndian.PutUint32(dst[28:], uint32(base))
	n := copy(dst[frameHeaderSize:], key)
	copy(dst[frameHeaderSize+n:], stored)
	binary.LittleEndian.PutUint64(dst[32:], frameSum(dst))
}

// frameSum is the checksum of a whole frame (header, key, payload, padding)
// with the checksum field itself left out.
func frameSum(frame []byte) uint64 {
	d := xxhash.New()
	_, _ = d.Write(frame[:32])
	_, _ = d.Write(frame[frameHeaderSize:])
	return d.Sum64()
}

// frameStatus classifies what parseFrame found at an offset.
type frameStatus uint8

const (
	frameOK    frameStatus = iota
	frameZero              // an all-zero header: the unwritten tail, if all that follows is zero too
	frameBad               // incomplete, bad magic, impossible lengths or checksum mismatch
	frameWrong             // checksum matches but the content is invalid: the writer never wrote it
)

// parseFrame reads the frame header at off and verifies the checksum. For
// frameBad and frameWrong it returns the reason.
func parseFrame(data []byte, off int64, maxRaw int) (FrameInfo, frameStatus, string) {
	return parseFrameAt(data[off:], off, maxRaw)
}

// parseFrameAt is parseFrame on buf, which starts at the frame's offset off
// in its segment.
func parseFrameAt(buf []byte, off int64, maxRaw int) (FrameInfo, frameStatus, string) {
	rest := int64(len(buf))
	if rest < frameHeaderSize {
		if allZero(buf) {
			return FrameInfo{}, frameZero, ""
		}
		return FrameInfo{}, frameBad, "incomplete frame header"
	}
	h := buf[:frameHeaderSize]
	if binary.LittleEndian.Uint32(h) != frameMagic {
		if allZero(h) {
			return FrameInfo{}, frameZero, ""
		}
		return FrameInfo{}, frameBad, "bad frame magic"
	}
	fi := FrameInfo{
		Offset:    off,
		Kind:      Kind(h[4]),
		Codec:     Codec(h[5]),
		StoredLen: binary.LittleEndian.Uint32(h[8:]),
		RawLen:    binary.LittleEndian.Uint32(h[12:]),
		FirstSeq:  binary.LittleEndian.Uint64(h[16:]),
		Count:     binary.LittleEndian.Uint32(h[24:]),
		Base:      int64(binary.LittleEndian.Uint32(h[28:])),
	}
	keyLen := int(binary.LittleEndian.Uint16(h[6:]))
	if keyLen > MaxKeyLen {
		return fi, frameBad, fmt.Sprintf("key length %d exceeds %d", keyLen, MaxKeyLen)
	}
	fi.Size = frameSize(keyLen, int(fi.StoredLen))
	if fi.Size > rest {
		return fi, frameBad, fmt.Sprintf("incomplete frame: %d bytes, %d left in file", fi.Size, rest)
	}
	frame := buf[:fi.Size]
	if binary.LittleEndian.Uint64(h[32:]) != frameSum(frame) {
		return fi, frameBad, "frame checksum mismatch"
	}
	fi.Key = frame[frameHeaderSize : frameHeaderSize+keyLen : frameHeaderSize+keyLen]
	// The checksum matched, so these bytes are what some writer produced.
	// Anything invalid from here on is damage no torn write can explain.
	wrong := func(format string, args ...any) (FrameInfo, frameStatus, string) {
		return fi, frameWrong, fmt.Sprintf(format, args...)
	}
	switch {
	case fi.Base > off || fi.Base < HeaderSize:
		return wrong("write base %d outside [%d, %d]", fi.Base, HeaderSize, off)
	case int(fi.RawLen) > maxRaw:
		return wrong("decoded length %d exceeds the limit %d", fi.RawLen, maxRaw)
	}
	switch fi.Codec {
	case CodecNone:
		if fi.RawLen != fi.StoredLen {
			return wrong("uncompressed frame with raw length %d != stored length %d", fi.RawLen, fi.StoredLen)
		}
	case CodecZstd, CodecS2:
	case CodecZstdDict, CodecS2Dict:
		if fi.StoredLen <= 4 {
			return wrong("dictionary frame of %d stored bytes", fi.StoredLen)
		}
		if fi.Dict = binary.LittleEndian.Uint32(frame[frameHeaderSize+keyLen:]); fi.Dict == 0 {
			return wrong("frame names dictionary 0")
		}
	default:
		return wrong("unknown codec %d", fi.Codec)
	}
	switch fi.Kind {
	case KindEvents:
		if keyLen == 0 {
			return wrong("events frame without a session key")
		}
		if fi.Count == 0 || uint64(fi.Count)*minEventLen > uint64(fi.RawLen) {
			return wrong("event count %d impossible for %d payload bytes", fi.Count, fi.RawLen)
		}
		if fi.FirstSeq > math.MaxUint64-uint64(fi.Count) {
			return wrong("seq range overflows")
		}
	case KindSeal:
		if keyLen != 0 || fi.StoredLen != 0 || fi.FirstSeq != 0 || fi.Codec != CodecNone {
			return wrong("malformed seal frame")
		}
	case KindHeader:
		if keyLen == 0 || fi.Count != 0 || fi.FirstSeq != 0 || fi.RawLen == 0 {
			return wrong("malformed header frame")
		}
	case KindDelete:
		if keyLen == 0 || fi.Count != 0 || fi.FirstSeq != 0 || fi.RawLen != 8 || fi.Codec != CodecNone {
			return wrong("malformed delete frame")
		}
	default:
		return wrong("unknown frame kind %d", fi.Kind)
	}
	return fi, frameOK, ""
}

var zeroBlock [4096]byte

// allZero reports whether b holds only zero bytes. It compares whole blocks
// with the vectorized bytes.Equal: the zero tail of a preallocated segment
// is tens of megabytes.
func allZero(b []byte) bool {
	for len(b) >= len(zeroBlock) {
		if !bytes.Equal(b[:len(zeroBlock)], zeroBlock[:]) {
			return false
		}
		b = b[len(zeroBlock):]
	}
	return bytes.Equal(b, zeroBlock[:len(b)])
}

// Event payload encoding (before compression), one record per event:
//
//	uvarint flags      bit 0 ignorable, bit 1 sourceEventSeqs, bit 2 surfaceOp; others zero
//	varint  time delta from the previous event's time (the first: from 0), zigzag
//	uvarint len(type), type bytes (len >= 1)
//	uvarint len(data), data bytes (len >= 2: data is a JSON object)
//	[flags&2] uvarint n (>= 1), then n uvarints: the seqs
//	[flags&4] uvarint len (>= 1), surfaceOp bytes
//
// Seqs are implicit: the frame's first seq plus the record's index. Varints
// must be minimal. Part of the on-disk format.
const (
	flagIgnorable = 1 << iota
	flagSources
	flagSurfaceOp
	flagsKnown = flagIgnorable | flagSources | flagSurfaceOp
)

// encodedLen returns an upper bound on appendEvents' output for evs.
func encodedLen(evs []event.Event) int {
	n := 0
	for i := range evs {
		n += RecordBound(&evs[i])
	}
	return n
}

// RecordBound is the most bytes event e takes in an events frame's
// payload. A frame stores its payload compressed only when that is
// smaller, so a frame of events evs of a session key of k bytes takes at
// most FrameOverhead(k) plus the sum of their RecordBound.
func RecordBound(e *event.Event) int {
	n := 1 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + len(e.Type) + len(e.Data)
	if len(e.SourceEventSeqs) > 0 {
		n += binary.MaxVarintLen32 + len(e.SourceEventSeqs)*binary.MaxVarintLen64
	}
	if len(e.SurfaceOp) > 0 {
		n += binary.MaxVarintLen32 + len(e.SurfaceOp)
	}
	return n
}

// FrameOverhead is the most bytes a frame of a session key of keyLen
// bytes takes besides its payload: its header, the key and the padding.
func FrameOverhead(keyLen int) int { return frameHeaderSize + keyLen + frameAlign - 1 }

func appendEvents(dst []byte, evs []event.Event) []byte {
	var prev int64
	for i := range evs {
		e := &evs[i]
		flags := uint64(0)
		if e.Ignorable {
			flags |= flagIgnorable
		}
		if len(e.SourceEventSeqs) > 0 {
			flags |= flagSources
		}
		if len(e.SurfaceOp) > 0 {
			flags |= flagSurfaceOp
		}
		dst = binary.AppendUvarint(dst, flags)
		dst = binary.AppendVarint(dst, e.Time-prev)
		prev = e.Time
		dst = binary.AppendUvarint(dst, uint64(len(e.Type)))
		dst = append(dst, e.Type...)
		dst = binary.AppendUvarint(dst, uint64(len(e.Data)))
		dst = append(dst, e.Data...)
		if flags&flagSources != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(e.SourceEventSeqs)))
			for _, s := range e.SourceEventSeqs {
				dst = binary.AppendUvarint(dst, s)
			}
		}
		if flags&flagSurfaceOp != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(e.SurfaceOp)))
			dst = append(dst, e.SurfaceOp...)
		}
	}
	return dst
}

// payloadDecoder reads event records from a decoded payload.
type payloadDecoder struct {
	b   []byte
	err string
}

func (d *payloadDecoder) uvarint() uint64 {
	if d.err != "" {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n <= 0:
		d.err = "truncated or overlong varint"
		return 0
	case n > 1 && d.b[n-1] == 0:
		d.err = "non-minimal varint"
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *payloadDecoder) bytes(what string, min int) []byte {
	n := d.uvarint()
	if d.err != "" {
		return nil
	}
	if n < uint64(min) || n > uint64(len(d.b)) {
		d.err = fmt.Sprintf("%s length %d out of range", what, n)
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// decodeEvents decodes count events starting at firstSeq from payload.
// The events alias payload. It returns a reason on failure.
func decodeEvents(payload []byte, firstSeq uint64, count uint32) ([]event.Event, string) {
	// count was checked against the payload length; still grow the slice
	// as records really decode, so a forged count costs nothing up front.
	evs := make([]event.Event, 0, min(int(count), 1024))
	d := payloadDecoder{b: payload}
	var types typeCache
	var prev int64
	for i := range int(count) {
		evs = append(evs, event.Event{})
		e := &evs[i]
		e.Seq = firstSeq + uint64(i)
		flags := d.uvarint()
		if flags&^flagsKnown != 0 {
			return nil, fmt.Sprintf("event %d: unknown flags %#x", i, flags)
		}
		zz := d.uvarint()
		delta := int64(zz>>1) ^ -int64(zz&1)
		t, overflow := addInt64(prev, delta)
		if overflow {
			return nil, fmt.Sprintf("event %d: time overflows", i)
		}
		e.Time, prev = t, t
		e.Type = types.intern(d.bytes("type", 1))
		e.Data = d.bytes("data", 2)
		e.Ignorable = flags&flagIgnorable != 0
		if flags&flagSources != 0 {
			n := d.uvarint()
			if d.err == "" && (n == 0 || n > uint64(len(d.b))) {
				return nil, fmt.Sprintf("event %d: %d source seqs out of range", i, n)
			}
			if d.err == "" {
				e.SourceEventSeqs = make([]uint64, n)
				for j := range e.SourceEventSeqs {
					e.SourceEventSeqs[j] = d.uvarint()
				}
			}
		}
		if flags&flagSurfaceOp != 0 {
			e.SurfaceOp = d.bytes("surfaceOp", 1)
		}
		if d.err != "" {
			return nil, fmt.Sprintf("event %d: %s", i, d.err)
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Sprintf("%d bytes after the last event", len(d.b))
	}
	return evs, ""
}

// typeCache reuses the strings of the few event types a frame repeats, so
// decoding allocates one string per distinct type, not per event.
type typeCache struct {
	s [8]string
	n int
}

func (c *typeCache) intern(b []byte) string {
	for i := range min(c.n, len(c.s)) {
		if c.s[i] == string(b) { // no allocation for the comparison
			return c.s[i]
		}
	}
	t := string(b)
	c.s[c.n%len(c.s)] = t
	c.n++
	return t
}

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0)
}

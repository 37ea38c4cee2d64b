package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/bufpool"
)

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
	dict     uint32 // CodecZstdDict, CodecS2Dict: the dictionary's ID
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

// Fit returns e as a segment of format version ver may hold it: e itself
// if its codec is of that version, else compressed again as the zero
// Encoder would (zstd, without a dictionary). Only a segment of an older
// build (the active segment it created) needs it.
func (e *Encoded) Fit(ver int) *Encoded {
	switch {
	case (e.codec == CodecS2 || e.codec == CodecS2Dict) && ver < S2Version,
		e.codec == CodecZstdDict && ver < DictVersion:
		return Encoder{}.encode(e.kind, CodecZstd, string(e.key), e.raw, e.firstSeq, e.count)
	}
	return e
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
	// Fast, if set (and compressing), stores events frames as S2 blocks,
	// with Dict's S2 form when Dict is set (CodecS2Dict: frames of at
	// least MinDictCompress raw bytes), else without (CodecS2: frames of
	// at least MinCompress), when that makes them smaller: a fifth to a third of zstd's CPU for 1.3 to 1.4 times
	// its bytes (docs/FORMAT.md "Codecs"). For the frames a caller waits for (a
	// turn's flush); compaction may compress them again. Such frames may
	// go only into segments of version S2Version or later.
	Fast bool
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

func (c Encoder) minCompress() int {
	if c.MinCompress == 0 {
		return DefaultMinCompress
	}
	return c.MinCompress
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
	if codec == CodecZstd && c.Fast && kind == KindEvents {
		var sd *s2.Dict
		if c.Dict != nil {
			sd = c.Dict.s2Form()
		}
		// Without a dictionary a small frame saves too little to pay for
		// its decoding, as with zstd (MinCompress).
		if len(raw) < MinDictCompress || sd == nil && len(raw) < c.minCompress() {
			return e
		}
		z := payloadBufs.Get(4 + s2.MaxEncodedLen(len(raw)))
		if sd != nil {
			z = s2Compress(sd, binary.LittleEndian.AppendUint32(z, c.Dict.ID), raw)
		} else {
			z = s2Compress(nil, z, raw)
		}
		if len(z) >= len(raw) {
			payloadBufs.Put(z)
			return e
		}
		e.stored, e.codec, e.ownStored = z, CodecS2, true
		if sd != nil {
			e.codec, e.dict = CodecS2Dict, c.Dict.ID
		}
		return e
	}
	if codec == CodecZstd && c.Dict != nil && kind == KindEvents && len(raw) >= MinDictCompress {
		z, err := c.Dict.compress(payloadBufs.Get(len(raw)), raw)
		if err == nil && len(z) < len(raw) {
			e.stored, e.codec, e.dict, e.ownStored = z, CodecZstdDict, c.Dict.ID, true
			return e
		}
		payloadBufs.Put(z)
	}
	if codec == CodecZstd && len(raw) >= c.minCompress() {
		// (A buffer of len(raw) bytes: zstd grows one its result does not fit.)
		if z := compress(payloadBufs.Get(len(raw)), raw); len(z) < len(raw) {
			e.stored, e.codec, e.ownStored = z, CodecZstd, true
		} else {
			payloadBufs.Put(z)
		}
	}
	return e
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

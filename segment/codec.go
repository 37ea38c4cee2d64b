package segment

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// The zstd encoder and decoder are shared: EncodeAll and DecodeAll are safe
// for concurrent use and keep their own pools of per-goroutine state, sized
// to GOMAXPROCS.
var (
	encOnce sync.Once
	enc     *zstd.Encoder

	decOnce sync.Once
	dec     *zstd.Decoder
)

func encoder() *zstd.Encoder {
	encOnce.Do(func() {
		var err error
		enc, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false), // the frame checksum covers the payload
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithLowerEncoderMem(true),
		)
		if err != nil {
			panic(fmt.Sprintf("segment: zstd encoder: %v", err)) // only on bad options
		}
	})
	return enc
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		var err error
		dec, err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			// DecodeAll never grows dst past its capacity, which the caller
			// sets to the frame's declared raw length: no decompression bomb.
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(DefaultMaxFrameRaw),
		)
		if err != nil {
			panic(fmt.Sprintf("segment: zstd decoder: %v", err))
		}
	})
	return dec
}

// decodeSlack is extra output capacity for the zstd decoder's fast path.
const decodeSlack = 64

// compress appends the zstd encoding of src to dst.
func compress(dst, src []byte) []byte { return encoder().EncodeAll(src, dst) }

// decompress decodes src, which must decode to exactly rawLen bytes, into a
// new buffer.
func decompress(src []byte, rawLen int) ([]byte, error) {
	// The slack lets the decoder use its fast block copies (it needs room
	// to overrun a literal or match by a few bytes); output past rawLen is
	// still refused below and bounded by the capacity.
	out, err := decoder().DecodeAll(src, make([]byte, 0, rawLen+decodeSlack))
	if err != nil {
		return nil, err
	}
	if len(out) != rawLen {
		return nil, fmt.Errorf("decoded %d bytes, header says %d", len(out), rawLen)
	}
	return out, nil
}

// s2Compress appends the S2 block encoding of src (made with d's S2 form,
// if d is not nil) to dst.
func s2Compress(d *s2.Dict, dst, src []byte) []byte {
	n, max := len(dst), s2.MaxEncodedLen(len(src))
	dst = slices.Grow(dst, max)
	room := dst[n : n+max]
	var out []byte
	if d != nil {
		out = d.Encode(room, src)
	} else {
		out = s2.Encode(room, src)
	}
	return dst[:n+len(out)] // (out is room's start: it had room enough)
}

// s2Decompress decodes the S2 block src (made with d's S2 form, if d is
// not nil), which must decode to exactly rawLen bytes. The length the
// block declares is checked before anything is allocated.
func s2Decompress(d *s2.Dict, src []byte, rawLen int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n != rawLen {
		return nil, fmt.Errorf("block declares %d bytes, header says %d", n, rawLen)
	}
	out := make([]byte, rawLen)
	if d != nil {
		out, err = d.Decode(out, src)
	} else {
		out, err = s2.Decode(out, src)
	}
	if err != nil {
		return nil, err
	}
	if len(out) != rawLen {
		return nil, fmt.Errorf("decoded %d bytes, header says %d", len(out), rawLen)
	}
	return out, nil
}

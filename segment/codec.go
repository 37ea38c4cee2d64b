package segment

import (
	"fmt"
	"runtime"
	"sync"

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

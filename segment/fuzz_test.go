package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

var segHeader = appendHeader(nil, Header{Version: Version, ID: 1, CreatedNs: 1})

// fuzzDict is the dictionary the fuzz targets' frames may name: trained
// from fixed samples, so the same in every run.
var fuzzDict = sync.OnceValue(func() *Dict {
	var samples [][]byte
	for i := range 200 {
		samples = append(samples, appendEvents(nil, makeEvents(uint64(i), 1+i%3, 100+i%500)))
	}
	d, err := TrainDict(0x5eed, 1, samples, 8<<10)
	if err != nil {
		panic(err)
	}
	return d
})

// fuzzDicts holds fuzzDict.
func fuzzDicts() *Dicts {
	ds := NewDicts(vfs.NewMem(), "dicts")
	ds.Add(fuzzDict())
	return ds
}

// seedFrames returns a few valid frames (without the segment header), of
// every codec.
func seedFrames() [][]byte {
	var out [][]byte
	d := fuzzDict()
	for i, evs := range [][]event.Event{makeEvents(0, 1, 40), makeEvents(5, 4, 300), makeEvents(9, 2, 3000)} {
		for _, codec := range []Codec{CodecNone, CodecZstd, CodecS2, CodecS2Dict, CodecZstdDict} {
			raw := appendEvents(nil, evs)
			stored := raw
			switch codec {
			case CodecZstd:
				stored = compress(nil, raw)
			case CodecS2:
				stored = s2Compress(nil, nil, raw)
			case CodecS2Dict:
				stored = s2Compress(d.s2Form(), binary.LittleEndian.AppendUint32(nil, d.ID), raw)
			case CodecZstdDict:
				var err error
				if stored, err = d.compress(nil, raw); err != nil {
					panic(err)
				}
			}
			key := []byte{'s', byte('0' + i)}
			b := make([]byte, frameSize(len(key), len(stored)))
			putFrame(b, KindEvents, codec, key, stored, len(raw), evs[0].Seq, uint32(len(evs)), HeaderSize)
			out = append(out, b)
		}
	}
	return out
}

// FuzzDecodeFrame: decoding arbitrary bytes never panics, fails only with
// corruption, and whatever decodes re-encodes to the same payload.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range seedFrames() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		data := append(bytes.Clone(segHeader), frame...)
		got, err := DecodeFrame("f.seg", data, HeaderSize, 1<<20, fuzzDicts())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("non-corruption error: %v", err)
			}
			if got != nil {
				t.Fatal("frame returned with an error")
			}
			return
		}
		if got.Size > int64(len(frame)) || len(got.Events) == 0 {
			t.Fatalf("decoded frame of %d bytes from %d, %d events", got.Size, len(frame), len(got.Events))
		}
		raw := appendEvents(nil, got.Events)
		if len(raw) != got.RawLen {
			t.Fatalf("re-encoded payload is %d bytes, frame says %d", len(raw), got.RawLen)
		}
		if got.Codec == CodecNone {
			keyLen := len(got.Session)
			if !bytes.Equal(raw, frame[frameHeaderSize+keyLen:frameHeaderSize+keyLen+len(raw)]) {
				t.Fatal("decode/encode of an uncompressed payload is not canonical")
			}
		}
		again, reason := decodeEvents(raw, got.FirstSeq, uint32(len(got.Events)))
		if reason != "" || !equalEvents(again, got.Events) {
			t.Fatalf("round trip changed the events: %s", reason)
		}
	})
}

// FuzzScan: scanning arbitrary segment bytes never panics, fails only with
// corruption, reports only frames below End, and a writer can always
// continue after the End it reports.
func FuzzScan(f *testing.F) {
	var all []byte
	for _, fr := range seedFrames() {
		all = append(all, fr...)
	}
	f.Add(all, uint16(0))
	f.Add(all[:len(all)-5], uint16(0))
	f.Add(append(bytes.Clone(all), make([]byte, 64)...), uint16(len(all)))
	f.Fuzz(func(t *testing.T, body []byte, durable uint16) {
		data := append(bytes.Clone(segHeader), body...)
		var last int64 = HeaderSize
		res, err := Scan("f.seg", data, ScanOptions{Durable: int64(durable)}, func(fi *FrameInfo) error {
			if fi.Offset < last || fi.End() > int64(len(data)) {
				t.Fatalf("frame [%d,%d) out of order or out of the file", fi.Offset, fi.End())
			}
			last = fi.End()
			if fi.Kind == KindEvents {
				if _, err := DecodeFrame("f.seg", data, fi.Offset, 0, nil); err != nil && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decode of scanned frame: %v", err)
				}
			}
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("non-corruption error: %v", err)
			}
			return
		}
		if res.End != last || res.End%frameAlign != 0 || res.DirtyEnd < res.End || res.DirtyEnd > int64(len(data)) {
			t.Fatalf("inconsistent result %+v (last frame end %d, %d bytes)", res, last, len(data))
		}
		if res.Torn && res.Sealed {
			t.Fatal("torn and sealed")
		}
		if res.Sealed || res.End >= MaxSegmentSize-1<<20 {
			return
		}
		// Resume: cut at End, append a frame whose write starts there.
		resumed := append(bytes.Clone(data[:res.End]), seedFrameAt(res.End)...)
		res2, err := Scan("f.seg", resumed, ScanOptions{}, nil)
		if err != nil || res2.Torn || res2.Frames != res.Frames+1 {
			t.Fatalf("after resume at %d: %+v, %v", res.End, res2, err)
		}
	})
}

// seedFrameAt returns a valid one-event frame whose write base is base.
func seedFrameAt(base int64) []byte {
	evs := makeEvents(0, 1, 40)
	raw := appendEvents(nil, evs)
	b := make([]byte, frameSize(1, len(raw)))
	putFrame(b, KindEvents, CodecNone, []byte("r"), raw, len(raw), 0, 1, base)
	return b
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the generated seeds under testdata/fuzz")

// TestFuzzCorpus checks that the generated seeds under testdata/fuzz are
// what the current encoder produces (so the corpus follows the format);
// -update-corpus rewrites them.
func TestFuzzCorpus(t *testing.T) {
	write := func(target, name string, vals ...any) {
		dir := filepath.Join("testdata", "fuzz", target)
		os.MkdirAll(dir, 0o755)
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				b.WriteString("[]byte(" + strconv.Quote(string(v)) + ")\n")
			case uint16:
				b.WriteString("uint16(" + strconv.Itoa(int(v)) + ")\n")
			}
		}
		path := filepath.Join(dir, name)
		if *updateCorpus {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		old, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(old, b.Bytes()) {
			t.Errorf("%s is stale or missing (%v): run go test ./segment -run TestFuzzCorpus -update-corpus", path, err)
		}
	}
	frames := seedFrames()
	for i, fr := range frames {
		write("FuzzDecodeFrame", "seed-frame-"+strconv.Itoa(i), fr)
	}
	sep, _ := fixture(t, true)
	one, _ := fixture(t, false)
	write("FuzzScan", "seed-separate-writes", sep[HeaderSize:], uint16(0))
	write("FuzzScan", "seed-one-write", one[HeaderSize:], uint16(0))
	write("FuzzScan", "seed-torn", sep[HeaderSize:len(sep)-30], uint16(0))
	flipped := bytes.Clone(sep[HeaderSize:])
	flipped[300] ^= 4
	write("FuzzScan", "seed-mid-flip", flipped, uint16(0))
	write("FuzzScan", "seed-durable", one[HeaderSize:len(one)-30], uint16(len(one)))
}

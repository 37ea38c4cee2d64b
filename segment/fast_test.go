package segment

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/event"
)

// TestFastCodec: Encoder.Fast stores events frames as S2 blocks (with the
// dictionary's S2 form when it has one), smaller than raw, and every such
// frame decodes to its events, from a few bytes to several MiB; frames
// under MinDictCompress (MinCompress without a dictionary) and frames S2
// does not shrink stay as they are; headers keep zstd.
func TestFastCodec(t *testing.T) {
	d := testDict(t, 0x5eed)
	dicts := NewDicts(nil, t.TempDir())
	dicts.Add(d)
	for _, n := range []int{1, 4, 40, 400, 4000} {
		for _, size := range []int{30, 300, 3000} {
			evs := makeEvents(7, n, size)
			for _, withDict := range []bool{false, true} {
				t.Run(fmt.Sprintf("events=%d,size=%d,dict=%v", n, size, withDict), func(t *testing.T) {
					enc := Encoder{Fast: true}
					if withDict {
						enc.Dict = d
					}
					e, err := enc.Events("session-1", 7, evs)
					if err != nil {
						t.Fatal(err)
					}
					raw := appendEvents(nil, evs)
					want := CodecS2
					if withDict {
						want = CodecS2Dict
					}
					switch {
					case len(raw) < MinDictCompress, !withDict && len(raw) < DefaultMinCompress:
						want = CodecNone
					case e.Codec() == CodecNone && e.StoredLen() == len(raw):
						t.Fatalf("a frame of %d raw bytes stored as is", len(raw))
					}
					if e.Codec() != want {
						t.Fatalf("codec %v, want %v", e.Codec(), want)
					}
					if want != CodecNone && e.StoredLen() >= len(raw) {
						t.Fatalf("stored %d bytes of %d raw", e.StoredLen(), len(raw))
					}
					if withDict && want != CodecNone && e.Dict() != d.ID {
						t.Fatalf("frame names dictionary %08x, want %08x", e.Dict(), d.ID)
					}
					checkDecodes(t, e, dicts, evs)
				})
			}
		}
	}
	// Incompressible (random bytes in the data) is stored as is.
	evs := []event.Event{{Seq: 0, Type: "x", Time: 1, Data: []byte(`{"b":"` + randomASCII(5000) + `"}`)}}
	if e, err := (Encoder{Fast: true}).Events("k", 0, evs); err != nil || e.Codec() == CodecS2 && e.StoredLen() >= e.RawLen() {
		t.Fatalf("incompressible frame: %v, %v", e.Codec(), err)
	}
	// A large frame: several MiB, beyond the 64 KiB an S2 dictionary
	// reaches.
	big := makeEvents(0, 3000, 2000)
	e, err := Encoder{Fast: true, Dict: d}.Events("big", 0, big)
	if err != nil || e.Codec() != CodecS2Dict {
		t.Fatalf("large frame: %v, %v", e.Codec(), err)
	}
	checkDecodes(t, e, dicts, big)
	// Headers are never S2: a store's open reads them first.
	h, err := Encoder{Fast: true, Dict: d}.Header("k", bytes.Repeat([]byte(`{"a":1}`), 500))
	if err != nil || h.Codec() != CodecZstd {
		t.Fatalf("header: %v, %v", h.Codec(), err)
	}
}

func randomASCII(n int) string {
	b := make([]byte, n)
	x := uint64(88172645463325252)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = 'a' + byte(x%26)
		if x&0x100 != 0 {
			b[i] = '0' + byte(x%10)
		}
	}
	return string(b)
}

// checkDecodes writes e into a segment and reads it back as evs.
func checkDecodes(t *testing.T, e *Encoded, dicts *Dicts, evs []event.Event) {
	t.Helper()
	data := e.AppendFrame(appendHeader(nil, Header{Version: Version, ID: 1, CreatedNs: 1}), HeaderSize)
	f, err := DecodeFrame("x.seg", data, HeaderSize, DefaultMaxFrameRaw, dicts)
	if err != nil {
		t.Fatal(err)
	}
	if f.Codec != e.Codec() || !equalEvents(f.Events, evs) {
		t.Fatalf("decoded %d events (codec %v), want %d (codec %v)", len(f.Events), f.Codec, len(evs), e.Codec())
	}
}

// TestFastFit: an S2 frame placed into a segment of a version before
// S2Version is compressed again with zstd (an older build reads it);
// zstd frames with a dictionary lose it before DictVersion; frames of
// the segment's own version stay as they are.
func TestFastFit(t *testing.T) {
	d := testDict(t, 0x5eed)
	evs := makeEvents(3, 20, 300)
	for _, c := range []struct {
		enc  Encoder
		ver  int
		want Codec
	}{
		{Encoder{Fast: true, Dict: d}, S2Version, CodecS2Dict},
		{Encoder{Fast: true, Dict: d}, DictVersion, CodecZstd},
		{Encoder{Fast: true}, DictVersion, CodecZstd},
		{Encoder{Fast: true}, RewriteVersion, CodecZstd},
		{Encoder{Fast: true}, 1, CodecZstd},
		{Encoder{Dict: d}, DictVersion, CodecZstdDict},
		{Encoder{Dict: d}, RewriteVersion, CodecZstd},
		{Encoder{}, 1, CodecZstd},
	} {
		e, err := c.enc.Events("k", 3, evs)
		if err != nil {
			t.Fatal(err)
		}
		f := e.Fit(c.ver)
		if f.Codec() != c.want {
			t.Errorf("%v fitted to version %d: %v, want %v", e.Codec(), c.ver, f.Codec(), c.want)
		}
		if (f == e) != (f.Codec() == e.Codec()) {
			t.Errorf("%v fitted to version %d: a copy %v, codec changed %v", e.Codec(), c.ver, f != e, f.Codec() != e.Codec())
		}
		if f.Dict() != 0 && c.ver < DictVersion {
			t.Errorf("version %d frame names dictionary %08x", c.ver, f.Dict())
		}
		checkDecodes(t, f, func() *Dicts { ds := NewDicts(nil, t.TempDir()); ds.Add(d); return ds }(), evs)
	}
}

// TestS2FormFromFile: the S2 form of a dictionary read from its file is
// the writer's: another process decodes the writer's CodecS2Dict frames.
func TestS2FormFromFile(t *testing.T) {
	d := testDict(t, 0x77)
	dir := t.TempDir()
	if err := WriteDict(nil, dir, d); err != nil {
		t.Fatal(err)
	}
	evs := makeEvents(0, 30, 250)
	e, err := Encoder{Fast: true, Dict: d}.Events("k", 0, evs)
	if err != nil || e.Codec() != CodecS2Dict {
		t.Fatalf("%v, %v", e.Codec(), err)
	}
	checkDecodes(t, e, NewDicts(nil, dir), evs) // (reads the file)
	if _, err := ReadDict(nil, filepath.Join(dir, DictName(0x77))); err != nil {
		t.Fatal(err)
	}
}

// TestS2Damage: an S2 payload that does not decode, or decodes to another
// length than the frame's header says, under a checksum that matches
// (written so), is corruption at the frame, never a panic or a frame.
func TestS2Damage(t *testing.T) {
	d := testDict(t, 0x5eed)
	dicts := NewDicts(nil, t.TempDir())
	dicts.Add(d)
	evs := makeEvents(0, 10, 300)
	raw := appendEvents(nil, evs)
	for _, codec := range []Codec{CodecS2, CodecS2Dict} {
		var stored []byte
		if codec == CodecS2 {
			stored = s2Compress(nil, nil, raw)
		} else {
			stored = s2Compress(d.s2Form(), []byte{0xed, 0x5e, 0, 0}, raw)
		}
		body := len(stored) - 20
		for name, c := range map[string]struct {
			stored []byte
			rawLen int
		}{
			"rawlen":  {stored, len(raw) + 1},
			"short":   {stored[:len(stored)-3], len(raw)},
			"garbage": {append(bytes.Clone(stored[:body]), bytes.Repeat([]byte{0xff}, 20)...), len(raw)},
		} {
			key := []byte("k")
			b := make([]byte, frameSize(len(key), len(c.stored)))
			putFrame(b, KindEvents, codec, key, c.stored, c.rawLen, 0, uint32(len(evs)), HeaderSize)
			data := append(appendHeader(nil, Header{Version: Version, ID: 1, CreatedNs: 1}), b...)
			f, err := DecodeFrame("x.seg", data, HeaderSize, DefaultMaxFrameRaw, dicts)
			var ce *CorruptionError
			if f != nil || !errors.As(err, &ce) || ce.Offset != HeaderSize {
				t.Errorf("%v %s: frame %v, error %v; want corruption at %d", codec, name, f != nil, err, HeaderSize)
			}
		}
	}
	// A dictionary whose content is under what an S2 dictionary holds
	// has no S2 form: the encoder goes without it, a frame that names it
	// anyway is corruption.
	if small := (&Dict{ID: 9, data: []byte{1, 2, 3}}); small.s2Form() != nil {
		t.Fatal("a dictionary that is no zstd dictionary has an S2 form")
	}
}

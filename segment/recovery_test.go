package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

// fixture writes four frames. With separateWrites every frame is synced on
// its own; otherwise frames 1..3 share one write. It returns the file bytes
// and the frame offsets (plus the end as a fifth entry).
func fixture(t *testing.T, separateWrites bool) ([]byte, []int64) {
	t.Helper()
	mem := vfs.NewMem()
	// Compressed frames even though they are small: the scan seeds cover
	// both codecs.
	w := mustCreate(t, mem, "/1.seg", writerOpts{Size: 1 << 20, MinCompress: -1})
	var offs []int64
	for i := range 4 {
		loc := mustAppend(t, w, fmt.Sprintf("s-%d", i%2), makeEvents(uint64(i*3), 3, 120))
		offs = append(offs, loc.Offset)
		if separateWrites || i == 0 {
			mustSync(t, w)
		}
	}
	mustSync(t, w)
	return readAll(t, mem, "/1.seg"), append(offs, w.Size())
}

type scanWant struct {
	corruptAt int64 // -1: no corruption expected
	end       int64
	torn      bool
	frames    int
}

func checkScan(t *testing.T, name string, data []byte, opts ScanOptions, offs []int64, want scanWant) {
	t.Helper()
	var got []int64
	res, err := Scan("1.seg", data, opts, func(fi *FrameInfo) error {
		got = append(got, fi.Offset)
		return nil
	})
	if want.corruptAt >= 0 {
		var ce *CorruptionError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Offset != want.corruptAt {
			t.Fatalf("%s: Scan err = %v, want *CorruptionError at %d (result %+v)", name, err, want.corruptAt, res)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: Scan: %v", name, err)
	}
	if res.End != want.end || res.Torn != want.torn || int(res.Frames) != want.frames {
		t.Fatalf("%s: Scan = %+v, want end %d torn %v frames %d", name, res, want.end, want.torn, want.frames)
	}
	// No valid frame before the tear is lost, and none after it is returned.
	if diff := cmp.Diff(offs[:want.frames], got); diff != "" {
		t.Fatalf("%s: frames found mismatch (-want +got):\n%s", name, diff)
	}
	if res.DirtyEnd < res.End {
		t.Fatalf("%s: DirtyEnd %d < End %d", name, res.DirtyEnd, res.End)
	}
}

func TestScanRecoveryTable(t *testing.T) {
	sep, sepOffs := fixture(t, true)
	one, oneOffs := fixture(t, false)
	last, lastEnd := sepOffs[3], sepOffs[4]
	if int64(len(sep)) != lastEnd {
		t.Fatalf("fixture is %d bytes, frames end at %d", len(sep), lastEnd)
	}
	checkScan(t, "intact", sep, ScanOptions{}, sepOffs, scanWant{corruptAt: -1, end: lastEnd, frames: 4})

	t.Run("truncate at every byte of the last frame", func(t *testing.T) {
		for cut := last; cut < lastEnd; cut++ {
			want := scanWant{corruptAt: -1, end: last, torn: cut > last, frames: 3}
			checkScan(t, fmt.Sprintf("cut=%d", cut), sep[:cut], ScanOptions{}, sepOffs, want)
			// The same cut inside a preallocated (zero-filled) file.
			padded := append(bytes.Clone(sep[:cut]), make([]byte, 4096)...)
			if allZero(sep[cut:lastEnd]) { // only padding was cut: the zeros restore it
				want = scanWant{corruptAt: -1, end: lastEnd, frames: 4}
			}
			checkScan(t, fmt.Sprintf("cut=%d+zeros", cut), padded, ScanOptions{}, sepOffs, want)
		}
	})
	t.Run("flip every bit of the last frame", func(t *testing.T) {
		for bit := last * 8; bit < lastEnd*8; bit++ {
			b := bytes.Clone(sep)
			b[bit/8] ^= 1 << (bit % 8)
			checkScan(t, fmt.Sprintf("bit=%d", bit), b, ScanOptions{}, sepOffs, scanWant{corruptAt: -1, end: last, torn: true, frames: 3})
			// A checkpoint that says the last frame was durable turns it into corruption.
			checkScan(t, fmt.Sprintf("bit=%d durable", bit), b, ScanOptions{Durable: lastEnd}, sepOffs, scanWant{corruptAt: last})
		}
	})
	t.Run("flip every bit of a synced middle frame", func(t *testing.T) {
		for bit := sepOffs[1] * 8; bit < sepOffs[2]*8; bit++ {
			b := bytes.Clone(sep)
			b[bit/8] ^= 1 << (bit % 8)
			checkScan(t, fmt.Sprintf("bit=%d", bit), b, ScanOptions{}, sepOffs, scanWant{corruptAt: sepOffs[1]})
		}
	})
	t.Run("damage inside the last unsynced write is a torn tail", func(t *testing.T) {
		// Frames 1..3 were one write: a bad frame 1 followed by valid
		// frames of the same write is what a torn write can leave.
		for _, at := range []int64{oneOffs[1], oneOffs[1] + 17, oneOffs[2] - 1} {
			b := bytes.Clone(one)
			b[at] ^= 0x40
			checkScan(t, fmt.Sprintf("flip@%d", at), b, ScanOptions{}, oneOffs, scanWant{corruptAt: -1, end: oneOffs[1], torn: true, frames: 1})
			checkScan(t, fmt.Sprintf("flip@%d durable", at), b, ScanOptions{Durable: oneOffs[2]}, oneOffs, scanWant{corruptAt: oneOffs[1]})
		}
	})
	t.Run("zeroed tail", func(t *testing.T) {
		b := bytes.Clone(sep)
		clear(b[last:])
		checkScan(t, "last frame zeroed", b, ScanOptions{}, sepOffs, scanWant{corruptAt: -1, end: last, frames: 3})
		b = bytes.Clone(sep)
		clear(b[last+8:])
		checkScan(t, "last frame zeroed after 8 bytes", b, ScanOptions{}, sepOffs, scanWant{corruptAt: -1, end: last, torn: true, frames: 3})
	})
	t.Run("zeroed middle frame", func(t *testing.T) {
		b := bytes.Clone(sep)
		clear(b[sepOffs[1]:sepOffs[2]])
		checkScan(t, "frame 1 zeroed", b, ScanOptions{}, sepOffs, scanWant{corruptAt: sepOffs[1]})
	})
	t.Run("garbage tail", func(t *testing.T) {
		r := newRand(1)
		for n := 1; n < 300; n += 37 {
			g := make([]byte, n)
			for i := range g {
				g[i] = byte(r.Uint32() | 1)
			}
			b := append(bytes.Clone(sep), g...)
			checkScan(t, fmt.Sprintf("garbage=%d", n), b, ScanOptions{}, sepOffs, scanWant{corruptAt: -1, end: lastEnd, torn: true, frames: 4})
		}
	})
	t.Run("valid frame after garbage", func(t *testing.T) {
		r := newRand(2)
		b := bytes.Clone(sep)
		for i := sepOffs[1]; i < sepOffs[2]; i++ {
			b[i] = byte(r.Uint32())
		}
		checkScan(t, "frame 1 garbage", b, ScanOptions{}, sepOffs, scanWant{corruptAt: sepOffs[1]})
	})
	t.Run("valid checksum over invalid content", func(t *testing.T) {
		// A frame no torn write can produce: corruption even at the tail.
		for _, tc := range []struct {
			name string
			edit func(h []byte)
		}{
			{"unknown kind", func(h []byte) { h[4] = 9 }},
			{"unknown codec", func(h []byte) { h[5] = 7 }},
			{"base after frame", func(h []byte) { binary.LittleEndian.PutUint32(h[28:], uint32(last+8)) }},
			{"count impossible", func(h []byte) { binary.LittleEndian.PutUint32(h[24:], 1<<30) }},
		} {
			b := bytes.Clone(sep)
			tc.edit(b[last:])
			binary.LittleEndian.PutUint64(b[last+32:], frameSum(b[last:lastEnd]))
			checkScan(t, tc.name, b, ScanOptions{}, sepOffs, scanWant{corruptAt: last})
		}
	})
}

// DecodeFrame reports every damaged frame as corruption at its offset and
// never returns its events.
func TestDecodeFrameRejectsDamage(t *testing.T) {
	sep, offs := fixture(t, true)
	for bit := offs[2] * 8; bit < offs[3]*8; bit += 3 {
		b := bytes.Clone(sep)
		b[bit/8] ^= 1 << (bit % 8)
		f, err := DecodeFrame("1.seg", b, offs[2], 0, nil)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != offs[2] || f != nil {
			t.Fatalf("bit %d: DecodeFrame = %v, %v; want *CorruptionError at %d", bit, f, err, offs[2])
		}
	}
	if _, err := DecodeFrame("1.seg", sep, offs[2]+8, 0, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("decode at a non-frame offset: %v", err)
	}
}

// A frame that declares a small raw length but decompresses to more is
// refused without decoding past the declared size: decoding it allocates
// about the declared 1,000 bytes, not the 8 MiB the payload expands to
// (issue 15: with the cap removed the error still came back, after 33.7 MB
// of allocation, and this test did not notice).
func TestDecompressionBombCapped(t *testing.T) {
	raw := bytes.Repeat([]byte("{}"), 4<<20) // 8 MiB that compresses to little
	stored := compress(nil, raw)
	key := []byte("s")
	buf := make([]byte, HeaderSize+frameSize(len(key), len(stored)))
	copy(buf, appendHeader(nil, Header{Version: Version, ID: 1}))
	putFrame(buf[HeaderSize:], KindEvents, CodecZstd, key, stored, 1000, 0, 10, HeaderSize)
	decode := func() {
		_, err := DecodeFrame("bomb.seg", buf, HeaderSize, 0, nil)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != HeaderSize || !strings.Contains(ce.Reason, "zstd") {
			t.Fatalf("bomb: %v, want a zstd *CorruptionError at offset %d", err, HeaderSize)
		}
	}
	decode() // the shared decoder's one-time setup is not the frame's cost
	const runs = 5
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		decode()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 1<<20 {
		t.Fatalf("decoding a bomb that declares 1000 bytes allocated %d bytes, want under 1 MiB", per)
	}
}

// Power cuts at random points of a random workload: the scan of what is
// left never reports corruption, keeps every frame that was synced before
// the cut, and what it finds is a prefix of what was appended.
func TestCrashLeavesSyncedPrefix(t *testing.T) {
	type appended struct {
		loc Location
		key string
		evs []event.Event
	}
	for seed := range uint64(300) {
		r := newRand(seed)
		mem := vfs.NewMem()
		o := writerOpts{Size: 1 << 20, BufferSize: 512 + r.IntN(4096), Preallocate: seed%3 == 0, Uncompressed: seed%2 == 0}
		w, err := newTestWriter(mem, "/1.seg", 1, o)
		if err != nil {
			t.Fatal(err)
		}
		var log []appended
		durable := 0 // frames known durable
		var seq [3]uint64
		steps := 5 + r.IntN(40)
		for range steps {
			k := r.IntN(3)
			evs := makeEvents(seq[k], 1+r.IntN(5), 50+r.IntN(600))
			seq[k] += uint64(len(evs))
			loc, err := w.Append(fmt.Sprintf("s%d", k), evs[0].Seq, evs)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, appended{loc, fmt.Sprintf("s%d", k), evs})
			if r.IntN(4) == 0 {
				mustSync(t, w)
				durable = len(log)
			}
		}
		crashed := mem.CrashClone(vfs.CrashConfig{Rand: r, Garble: r.IntN(2) == 0})
		w.Close()
		data := readAll(t, crashed, "/1.seg")
		var found []int64
		_, err = Scan("1.seg", data, ScanOptions{}, func(fi *FrameInfo) error {
			found = append(found, fi.Offset)
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d: scan after crash: %v", seed, err)
		}
		if len(found) < durable || len(found) > len(log) {
			t.Fatalf("seed %d: found %d frames, %d were durable, %d appended", seed, len(found), durable, len(log))
		}
		for i, off := range found {
			if off != log[i].loc.Offset {
				t.Fatalf("seed %d: frame %d at %d, want %d", seed, i, off, log[i].loc.Offset)
			}
			f, err := DecodeFrame("1.seg", data, off, 0, nil)
			if err != nil {
				t.Fatalf("seed %d: frame %d: %v", seed, i, err)
			}
			if f.Session != log[i].key || !equalEvents(f.Events, log[i].evs) {
				t.Fatalf("seed %d: frame %d differs from what was appended", seed, i)
			}
		}
	}
}

func TestMayHoldFrames(t *testing.T) {
	sep, _ := fixture(t, true)
	damaged := bytes.Clone(sep)
	clear(damaged[:HeaderSize]) // the header is gone, the frames are not
	if !MayHoldFrames(damaged) {
		t.Error("frames after a damaged header not found")
	}
	empty := append(make([]byte, HeaderSize), bytes.Repeat([]byte{0xA5}, 4096)...)
	if MayHoldFrames(empty) {
		t.Error("garbage taken for a frame")
	}
	if MayHoldFrames(sep[:HeaderSize]) {
		t.Error("a bare header holds frames")
	}
}

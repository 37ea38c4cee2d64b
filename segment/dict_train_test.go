package segment

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// trainSamples makes count samples of realistic payloads (generated events
// of 1-4 events each) with one sample of big bytes at index at (if big > 0).
func trainSamples(seed uint64, count, big, at int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var samples [][]byte
	for i := range count {
		if i == at && big > 0 {
			b := []byte(`{"type":"tool/result","data":{"output":"`)
			for len(b) < big {
				b = append(b, strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(40))...)
				b = append(b, ' ')
			}
			samples = append(samples, b[:big])
			continue
		}
		samples = append(samples, appendEvents(nil, makeEvents(uint64(i), 1+rng.IntN(4), 50+rng.IntN(700))))
	}
	return samples
}

// checkTrained fails t unless TrainDict's outcome on samples is a
// dictionary that round-trips a payload, or an error that is not the
// library's panic (TrainDict must give BuildDict only what it takes).
func checkTrained(t *testing.T, samples [][]byte, size int) {
	t.Helper()
	d, err := TrainDict(0x8001, 1, samples, size)
	if err != nil {
		if strings.Contains(err.Error(), "panicked") {
			t.Fatalf("%d samples: %v", len(samples), err)
		}
		return
	}
	raw := appendEvents(nil, makeEvents(9, 2, 300))
	c, err := d.compress(nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	back, err := d.decompress(c[4:], len(raw))
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("round trip with the trained dictionary: %v", err)
	}
}

// One large payload among a few small ones is what a session with a 350 KB
// tool result gives the trainer: zstd.BuildDict panicked on it (slice
// bounds out of range in its block encoder), and the panic on the
// engine's trainer goroutine took the host's process down. TrainDict now
// cuts such samples; the outcome is a dictionary or an error.
func TestTrainDictLargeSample(t *testing.T) {
	for _, count := range []int{1, 2, 3, 5, 8, 50, 400} {
		for _, big := range []int{17 << 10, 130 << 10, 350 << 10, 1 << 20} {
			for _, at := range []int{0, count / 2, count - 1} {
				checkTrained(t, trainSamples(uint64(count*big+at), count, big, at), 160<<10)
			}
		}
	}
}

// Samples of any sizes and counts train a dictionary or fail with an
// error; none panics.
func FuzzTrainDict(f *testing.F) {
	f.Add(uint64(1), uint16(5), uint32(350<<10), uint16(2), uint32(160<<10))
	f.Add(uint64(2), uint16(400), uint32(350<<10), uint16(200), uint32(160<<10))
	f.Add(uint64(3), uint16(1), uint32(0), uint16(0), uint32(16<<10))
	f.Add(uint64(4), uint16(2), uint32(1<<20), uint16(1), uint32(8))
	f.Fuzz(func(t *testing.T, seed uint64, count uint16, big uint32, at uint16, size uint32) {
		n := int(count % 600)
		samples := trainSamples(seed, n, int(big%(2<<20)), int(at))
		checkTrained(t, samples, int(size%(1<<20)))
	})
}

// Frames under DictLitMin are compressed with the last smallDictContent
// bytes of a larger dictionary's content: they must decode with the whole
// dictionary (their matches reach only the content's end), and they are
// compressed with less of it than with all of it (their bytes differ from
// a compression with the whole content, or the cut did nothing).
func TestSmallFramesUseTheContentsEnd(t *testing.T) {
	samples := trainSamples(3, 2000, 0, -1)
	d, err := TrainDict(0x8002, 1, samples, 160<<10)
	if err != nil {
		t.Fatal(err)
	}
	var small [][]byte
	for _, s := range samples[:400] {
		if len(s) < DictLitMin {
			small = append(small, s)
		}
	}
	cut := make([][]byte, len(small))
	for i, s := range small {
		if cut[i], err = d.compress(nil, s); err != nil {
			t.Fatal(err)
		}
		back, err := d.decompress(cut[i][4:], len(s))
		if err != nil || !bytes.Equal(back, s) {
			t.Fatalf("sample %d (%d bytes): round trip: %v", i, len(s), err)
		}
	}
	whole := &Dict{ID: d.ID, data: d.data, smallContent: 1 << 30}
	var differ int
	for i, s := range small {
		w, err := whole.compress(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w, cut[i]) {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("none of %d small frames compressed differently with the content's last bytes than with all of it", len(small))
	}
}

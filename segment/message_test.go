package segment

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/event"
)

func TestMarshalFrame(t *testing.T) {
	evs := makeEvents(5, 40, 200)
	e, err := Encoder{}.Events("sess", 5, evs)
	if err != nil {
		t.Fatal(err)
	}
	b := MarshalFrame(e)
	f, err := UnmarshalFrame("msg", b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Session != "sess" || f.FirstSeq != 5 || f.Codec != CodecZstd {
		t.Errorf("frame = %+v", f)
	}
	if diff := cmp.Diff(evs, f.Events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	for _, bad := range [][]byte{
		b[:len(b)-8],                      // cut
		append(append([]byte{}, b...), 0), // trailing byte
		func() []byte { c := append([]byte{}, b...); c[len(c)/2] ^= 1; return c }(), // bit flip
	} {
		if _, err := UnmarshalFrame("msg", bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("damaged message: err = %v, want ErrCorrupt", err)
		}
	}
}

// A standalone frame of events never takes more than FrameOverhead and
// the events' RecordBound: incompressible events, sources, surface ops,
// extreme times, a long key.
func TestFrameBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		key  string
		evs  []event.Event
	}{
		{"compressible", "s", makeEvents(0, 50, 300)},
		{"random", strings.Repeat("k", MaxKeyLen), func() []event.Event {
			evs := makeEvents(0, 20, 10)
			for i := range evs {
				b := make([]byte, 1+rng.IntN(5000))
				for j := range b {
					b[j] = byte(rng.IntN(256))
				}
				evs[i].Data = b
				evs[i].Time = []int64{math.MinInt64 / 2, math.MaxInt64 / 2}[i%2]
				if i%3 == 0 {
					evs[i].SourceEventSeqs = []uint64{math.MaxUint64, 1, 1 << 40}
					evs[i].SurfaceOp = []byte(`{"op":"replace"}`)
				}
			}
			return evs
		}()},
	} {
		for _, uncompressed := range []bool{false, true} {
			e, err := Encoder{Uncompressed: uncompressed}.Events(tc.key, 0, tc.evs)
			if err != nil {
				t.Fatal(err)
			}
			bound := FrameOverhead(len(tc.key))
			for i := range tc.evs {
				bound += RecordBound(&tc.evs[i])
			}
			if n := len(MarshalFrame(e)); n > bound {
				t.Errorf("%s (uncompressed %t): a frame of %d bytes, over its bound %d", tc.name, uncompressed, n, bound)
			}
		}
	}
}

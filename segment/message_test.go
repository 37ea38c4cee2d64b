package segment

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
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

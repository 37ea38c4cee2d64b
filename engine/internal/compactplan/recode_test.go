package compactplan

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/segment"
)

func s2evs(key string, owner uint64, n int) frame {
	f := evs(key, owner, n)
	f.s2 = true
	return f
}

// TestDecideRecode: a movable segment never rewritten whose S2 frames
// take at least the recode share of it is rewritten to recode them (and
// loses its dead frames on the way); one with few S2 frames, one not
// movable, and one rewritten before are kept; without a share nothing is
// recoded; dead frames still decide first.
func TestDecideRecode(t *testing.T) {
	live := map[string]uint64{"a": 1, "b": 2, "c": 3}
	segs := [][]frame{
		{hdr("a", 1), s2evs("a", 1, 3), s2evs("a", 1, 2)},              // mostly S2: recoded
		{hdr("b", 2), evs("b", 2, 50), evs("b", 2, 50)},                // zstd: kept
		{hdr("c", 3), s2evs("c", 3, 4)},                                // not movable: kept
		{hdr("x", 9), s2evs("x", 9, 2), del("x", 9), s2evs("a", 1, 1)}, // mostly dead: rewritten for that
	}
	for _, tt := range []struct {
		recode  float64
		want    []Action
		recoded []bool
	}{
		{0.25, []Action{Rewrite, Keep, Keep, Rewrite}, []bool{true, false, false, false}},
		{0, []Action{Keep, Keep, Keep, Rewrite}, []bool{false, false, false, false}},
	} {
		t.Run(fmt.Sprint(tt.recode), func(t *testing.T) {
			p, _ := plan(t, live, nil, 2, 0.5, segs...)
			p.DecideRecode(0.5, tt.recode)
			var recoded []bool
			for _, si := range p.Segments() {
				recoded = append(recoded, si.Recode)
			}
			if fmt.Sprint(actions(p), recoded) != fmt.Sprint(tt.want, tt.recoded) {
				t.Fatalf("actions %v recode %v, want %v %v", actions(p), recoded, tt.want, tt.recoded)
			}
			if s := p.Segments()[0]; s.S2Bytes == 0 || s.S2Bytes >= s.Size {
				t.Fatalf("segment 1: %d bytes of S2 frames of %d", s.S2Bytes, s.Size)
			}
		})
	}
	// A segment rewritten before (generation 1) is not rewritten again
	// for the S2 frames it still holds.
	dir := t.TempDir()
	sc := &script{}
	r := writeSegment(t, dir, 1, true, segs[0], sc)
	if _, err := segment.Rewrite(nil, dir, r, func(*segment.FrameInfo) bool { return true }, nil); err != nil {
		t.Fatal(err)
	}
	r2, err := segment.OpenReader(nil, filepath.Join(dir, segment.Name(1)))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	p := New(live, sc)
	if err := p.Scan(r2, 0, true); err != nil {
		t.Fatal(err)
	}
	p.DecideRecode(0.5, 0.25)
	if si := p.Segments()[0]; si.Action != Keep || si.Generation != 1 || si.S2Bytes == 0 {
		t.Fatalf("a rewritten segment of S2 frames: %v (generation %d, %d bytes S2)", si.Action, si.Generation, si.S2Bytes)
	}
}

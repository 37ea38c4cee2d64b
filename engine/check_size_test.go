package engine_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/index"
)

// TestCheckFindsAFrameSizeTheSegmentsDisagreeWith: an index entry that
// records a frame at its place and seqs but at another size (a placement
// that recorded a frame's size before its last re-encoding, say) is a
// problem Check names, at the index, with both sizes.
func TestCheckFindsAFrameSizeTheSegmentsDisagreeWith(t *testing.T) {
	dir, _ := foreignStore(t, []string{"a"}, nil)
	engine.ExpectProblem(t, dir, "does not match the segments")
	x, err := index.Open(filepath.Join(dir, "index.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := x.Frames("a")
	if err != nil || len(fs) != 2 {
		t.Fatalf("frames of a: %+v, %v", fs, err)
	}
	cp, err := x.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	bad := fs[1]
	bad.Size += 8
	if err := x.Apply(&index.Update{Frames: []index.SessionFrame{{ID: "a", Frame: bad}}, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := engine.Check(dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		if p.Session == "a" && strings.Contains(p.String(), "bytes") && strings.Contains(p.String(), "does not match the segments") {
			found = true
		}
	}
	if !found {
		t.Fatalf("Check of an index entry with a frame's size off by 8: problems %v", rep.Problems)
	}
}

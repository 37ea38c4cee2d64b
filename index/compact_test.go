package index

import (
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// TestCompact: an index grown by many small commits (as the engine's
// checkpoints make it) is rewritten smaller by Compact, with the same
// sessions, frames and checkpoint, passes a full check, opens and takes
// commits again; the file ends at its last page in use; a temporary a crash left is removed; a second Compact,
// finding nothing to gain, leaves the file as it is.
func TestCompact(t *testing.T) {
	x, path := openTemp(t)
	const n = 300
	for i := range n {
		id := fmt.Sprintf("session-%03d", i%40)
		u := &Update{
			Sessions:   []Session{{ID: id, Header: []byte(`{"id":"` + id + `"}`), UID: uint64(i%40 + 1), Events: uint64(i/40+1) * 10, Size: 100}},
			Frames:     []SessionFrame{{id, Frame{FirstSeq: uint64(i/40) * 10, Count: 10, Segment: 1, Offset: int64(64 + 100*i), Size: 100}}},
			Checkpoint: Checkpoint{Segment: 1, Offset: int64(64 + 100*(i+1))},
		}
		if err := x.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	wantSessions := sessions(t, x)
	wantFrames := map[string][]Frame{}
	for _, s := range wantSessions {
		f, err := x.Frames(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantFrames[s.ID] = f
	}
	wantCP, _ := x.Checkpoint()
	x.Close()
	if err := os.WriteFile(path+CompactSuffix, []byte("left by a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, after, err := Compact(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d -> %d bytes", before, after)
	if after > before*3/5 {
		t.Errorf("Compact: %d -> %d bytes, want at most 3/5", before, after)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != after {
		t.Errorf("the index is %v bytes (%v), Compact said %d", fi.Size(), err, after)
	}
	if _, err := os.Stat(path + CompactSuffix); !os.IsNotExist(err) {
		t.Errorf("the temporary is left: %v", err)
	}
	x, err = Open(path, nil) // (a full check of the file)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(); err != nil {
		t.Fatal(err)
	}
	var hwm int64
	x.db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	if hwm != after {
		t.Errorf("the compacted file is %d bytes, its pages in use %d", after, hwm)
	}
	if diff := cmp.Diff(wantSessions, sessions(t, x)); diff != "" {
		t.Errorf("sessions after Compact (-want +got):\n%s", diff)
	}
	for id, want := range wantFrames {
		if got, err := x.Frames(id); err != nil || !cmp.Equal(want, got) {
			t.Errorf("frames of %s after Compact: %v, %v", id, got, err)
		}
	}
	if cp, _ := x.Checkpoint(); cp != wantCP {
		t.Errorf("checkpoint after Compact: %+v, want %+v", cp, wantCP)
	}
	if err := x.Apply(&Update{Checkpoint: Checkpoint{Segment: 2, Offset: 64}}); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if b, a, err := Compact(path); err != nil || a > b {
		t.Errorf("a second Compact: %d -> %d, %v", b, a, err)
	}
}

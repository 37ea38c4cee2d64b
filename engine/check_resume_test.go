package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCheckResumesForwardWithinTheBound: Check of a store another process
// writes reads each segment up to the durable position (the bound); after
// damage it resumes at the next valid frame. Here the damage is the frame
// just below the bound and the next valid frame lies past it: Check reports
// the damage at its offset and ends, and reports nothing at or past the
// bound. (Resuming past the bound once made the scan fail "before" the
// resumption point and resume there again: Check never returned.)
func TestCheckResumesForwardWithinTheBound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w, err := openStore(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed := func(first uint64) {
		t.Helper()
		if err := h.Append(ctx, testgen.Events(first, 1, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		appendFlushed(uint64(i))
	}
	// The index checkpoint (what the index proves durable) is here; the
	// frames after it are past the bound.
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	idxPath := filepath.Join(dir, "index.db")
	idx, err := os.ReadFile(idxPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 7; i++ {
		appendFlushed(uint64(i))
	}
	h.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idxPath, idx, 0o600); err != nil { // the checkpoint before the last frames
		t.Fatal(err)
	}
	x, err := index.Open(idxPath, &index.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := x.Checkpoint()
	x.Close()
	if err != nil {
		t.Fatal(err)
	}

	// Damage the frame before the checkpoint and the one at it: the next
	// valid frame after the damage is past the bound.
	seg := filepath.Join(dir, segment.Name(cp.Segment))
	var offs []int64
	var sizes []int64
	r, err := segment.OpenReader(nil, seg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		offs, sizes = append(offs, fi.Offset), append(sizes, fi.Size)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	at := -1
	for i, off := range offs {
		if off == cp.Offset {
			at = i
		}
	}
	if at < 1 || at+1 >= len(offs) {
		t.Fatalf("setup: checkpoint at %d, frames at %v: want frames before and after it", cp.Offset, offs)
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	damaged := offs[at-1]
	expectProblem(t, dir, "frame checksum mismatch")
	for _, i := range []int{at - 1, at} {
		b[offs[i]+sizes[i]/2] ^= 0xff
	}
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	var rep *CheckReport
	go func() {
		defer close(done)
		rep, err = Check(dir, &Options{bound: coord.Position(cp.Segment, cp.Offset)})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		// Not a measure of speed (Check of this store takes milliseconds):
		// the loop this test is about never ends, and grows its report.
		panic("Check of a segment damaged below the bound did not return")
	}
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		if p.Path == seg && p.Offset == damaged {
			found = true
		}
		if p.Path == seg && p.Offset >= cp.Offset {
			t.Errorf("problem at or past the bound %d: %v", cp.Offset, p)
		}
	}
	if !found {
		var ps []string
		for _, p := range rep.Problems {
			ps = append(ps, p.String())
		}
		t.Fatalf("no problem at the damaged frame %s @%d; problems:\n%s", seg, damaged, strings.Join(ps, "\n"))
	}
}

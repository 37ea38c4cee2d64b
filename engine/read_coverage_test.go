package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCoverage: the frames a read uses must hold each event it returns
// exactly once; a gap, an overlap or a frame past the framed events is
// reported (with the seqs), never read as zero events.
func TestCoverage(t *testing.T) {
	ref := func(first uint64, count uint32) frameRef {
		return frameRef{first: first, count: count, seg: 1, off: int64(first) * 100}
	}
	for _, c := range []struct {
		name             string
		refs             []frameRef
		off, end, framed uint64
		want             string // "" or a part of the reason
	}{
		{"whole", []frameRef{ref(0, 3), ref(3, 2)}, 0, 5, 5, ""},
		{"from inside the first", []frameRef{ref(0, 3), ref(3, 2)}, 2, 5, 5, ""},
		{"up to inside the last", []frameRef{ref(0, 3), ref(3, 2)}, 0, 4, 5, ""},
		{"then unframed", []frameRef{ref(0, 3)}, 0, 7, 3, ""},
		{"all unframed", nil, 3, 7, 3, ""},
		{"none framed", nil, 0, 2, 0, ""},
		{"gap at the start", []frameRef{ref(9, 1)}, 0, 10, 10, "events 0..8 are in no frame"},
		{"gap in the middle", []frameRef{ref(0, 3), ref(5, 2)}, 0, 7, 7, "events 3..4 are in no frame"},
		{"gap at the end", []frameRef{ref(0, 3)}, 0, 5, 5, "events 3..4 are in no frame"},
		{"gap before the unframed", []frameRef{ref(0, 3)}, 0, 8, 5, "events 3..4 are in no frame"},
		{"no frame at all", nil, 0, 4, 4, "events 0..3 are in no frame"},
		{"overlap", []frameRef{ref(0, 3), ref(2, 2)}, 0, 4, 4, "frames overlap: events 2..2"},
		{"the same frame twice", []frameRef{ref(0, 3), ref(0, 3)}, 0, 3, 3, "frames overlap: events 0..2"},
		{"past the framed", []frameRef{ref(0, 3), ref(3, 3)}, 0, 6, 4, "past the 4 framed"},
	} {
		got := coverage(c.refs, c.off, c.end, c.framed)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestReadReportsAGap: a read through a frame list that lacks a frame
// (or holds one twice) fails with corruption naming the session and the
// seqs, instead of returning zero events where they should be.
func TestReadReportsAGap(t *testing.T) {
	ctx := context.Background()
	db, err := openStore(t, t.TempDir(), &Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 3 {
		if err := h.Append(ctx, testgen.Events(uint64(i*3), 3, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if evs, err := h.Read(ctx, 0, -1); err != nil || len(evs) != 9 {
		t.Fatalf("read: %d events, %v", len(evs), err)
	}
	db.mu.Lock()
	s := db.mu.sessions["s"]
	if len(s.frames) != 3 {
		db.mu.Unlock()
		t.Fatalf("%d frames, want 3", len(s.frames))
	}
	whole := s.frames
	db.mu.Unlock()
	for _, c := range []struct {
		frames []frameRef
		want   string
	}{
		{slices.Delete(slices.Clone(whole), 1, 2), `session "s": events 3..5 are in no frame`},
		{slices.Insert(slices.Clone(whole), 1, whole[0]), `session "s": frames overlap: events 0..2`},
	} {
		db.mu.Lock()
		s.frames = c.frames
		db.mu.Unlock()
		evs, err := h.Read(ctx, 0, -1)
		if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("read with frames %v: %d events, %v; want corruption %q", c.frames, len(evs), err, c.want)
		}
	}
	db.mu.Lock()
	s.frames = whole
	db.mu.Unlock()
}

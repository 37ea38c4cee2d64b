package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/seglog/seglog/engine/internal/compactplan"
	"github.com/seglog/seglog/store"
)

// TestPurgeLogRoundTrip: the purge log reads back as written (a key of
// any bytes), and a byte changed anywhere is a *CorruptionError naming
// the file.
func TestPurgeLogRoundTrip(t *testing.T) {
	l := &purgeLog{version: 7, floor: 3, dels: []compactplan.Delete{
		{Key: "s", UID: 9, Header: compactplan.Pos{Seg: 4, Gen: 1, Off: 64}, Tomb: compactplan.Pos{Seg: 6, Gen: 0, Off: 4096}},
		{Key: "a b\n\x00é", UID: 1 << 60, Tomb: compactplan.Pos{Seg: 8, Gen: 2, Off: 128}},
	}}
	b := l.encode()
	got, err := decodePurgeLog(b, "/x/purged")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(l) {
		t.Fatalf("read %+v, wrote %+v", got, l)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x20
		var ce *store.CorruptionError
		if _, err := decodePurgeLog(c, "/x/purged"); !errors.As(err, &ce) || ce.Path != "/x/purged" {
			t.Fatalf("byte %d changed: %v, want a CorruptionError naming the file", i, err)
		}
	}
	if _, err := decodePurgeLog(b[:len(b)-3], "/x/purged"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("cut: %v", err)
	}
}

// TestPurgeHolds: a consumer holds a purged incarnation from past its
// header to its tombstone; a cursor of an older generation of either
// segment cannot be placed, one of a newer generation was given the
// delete already.
func TestPurgeHolds(t *testing.T) {
	d := compactplan.Delete{Key: "s", Header: compactplan.Pos{Seg: 2, Gen: 1, Off: 200}, Tomb: compactplan.Pos{Seg: 4, Gen: 0, Off: 96}}
	at := func(seg, gen uint64, off int64, part uint32) *feedCursor {
		return &feedCursor{seg: seg, gen: gen, off: off, part: part}
	}
	for _, c := range []struct {
		c               *feedCursor
		held, uncertain bool
	}{
		{at(1, 0, 500, 0), false, false}, // before the header's segment
		{at(2, 1, 200, 0), false, false}, // at the header: not given yet
		{at(2, 1, 200, 1), true, false},  // inside the header's group: given
		{at(2, 1, 240, 0), true, false},  // past the header
		{at(2, 0, 240, 0), false, true},  // an older generation of its segment
		{at(2, 2, 240, 0), false, false}, // a newer one: checked already
		{at(3, 0, 64, 0), true, false},   // a segment between
		{at(4, 0, 96, 0), true, false},   // at the tombstone: not given yet
		{at(4, 0, 104, 0), false, false}, // past it
		{at(4, 1, 64, 0), false, false},  // a newer generation of its segment
		{at(5, 0, 64, 0), false, false},  // after
	} {
		held, unknown := holds(d, c.c)
		if held != c.held || unknown != c.uncertain {
			t.Errorf("cursor %+v: held %v unknown %v, want %v %v", *c.c, held, unknown, c.held, c.uncertain)
		}
	}
	// A migration whose first header the plan did not read: unknown
	// before the tombstone, not held past it.
	m := compactplan.Delete{Key: "m", Tomb: d.Tomb}
	if held, unknown := holds(m, at(3, 0, 64, 0)); held || !unknown {
		t.Errorf("migration before its tombstone: %v %v", held, unknown)
	}
	if held, unknown := holds(m, at(5, 0, 64, 0)); held || unknown {
		t.Errorf("migration after its tombstone: %v %v", held, unknown)
	}
}

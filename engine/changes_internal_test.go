package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// feedOf reads db's change feed from cursor from to its end.
func feedOf(t *testing.T, db *DB, from store.Cursor) []store.Change {
	t.Helper()
	var out []store.Change
	for c, err := range db.Changes(context.Background(), from) {
		if err != nil {
			t.Fatalf("Changes from %q: %v", from, err)
		}
		out = append(out, c)
	}
	return out
}

func feedLines(cs []store.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%v %s %d+%d", c.Kind, c.Session, c.Seq, len(c.Events)))
	}
	return out
}

// TestChangesSkipAGroupCutShort: a process died after the header of a
// fork by copy was durable, and before the rest was; other frames follow
// it, and later the tombstone that ends it (the checkpointer writes it).
// The fork never was, for reads and for the feed: no change names it, not
// even its tombstone, read from the start or from any cursor.
func TestChangesSkipAGroupCutShort(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	defer w1.Close()
	h, err := w1.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	appendFlushed(t, h, testgen.Events(0, 8, 300)...)
	deadForkHeader(t, dir, "f")
	for i := range 4 {
		appendFlushed(t, h, testgen.Events(uint64(8+8*i), 8, 300)...)
	}
	mid := feedOf(t, w1, "")
	if err := w1.checkpoint(); err != nil { // ends the fork with a tombstone
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(40, 8, 300)...)
	all := feedOf(t, w1, "")
	next := uint64(0)
	for i, c := range all {
		if c.Session != "a" || i > 0 && (c.Kind != store.ChangeAppend || c.Seq != next) {
			t.Fatalf("change %d: %v of %q at %d, want only a's create and appends: %v", i, c.Kind, c.Session, c.Seq, feedLines(all))
		}
		next = c.Seq + uint64(len(c.Events))
	}
	if next != 48 {
		t.Fatalf("the feed holds a's events up to %d, want 48", next)
	}
	// From every cursor, before the tombstone and after, the rest.
	for i, c := range slices.Concat(mid, all) {
		j := i
		if i >= len(mid) {
			j -= len(mid)
		}
		if got, want := feedLines(feedOf(t, w1, c.Cursor)), feedLines(all[j+1:]); !slices.Equal(got, want) {
			t.Fatalf("from cursor %s: %v, want %v", c.Cursor, got, want)
		}
	}
}

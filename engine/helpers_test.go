package engine

// The helpers every test of the package shares; export_test.go gives
// package engine_test the same ones (ReadAll, SameEvents).

import (
	"context"
	"slices"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// readAll reads session id of db whole through a read handle.
func readAll(t *testing.T, db *DB, id string) []event.Event {
	t.Helper()
	h, err := db.Open(context.Background(), id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	evs, err := h.Read(context.Background(), 0, -1)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return evs
}

// sameEvents fails t unless got and want are the same events, field by
// field.
func sameEvents(t *testing.T, label string, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", label, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Type != w.Type || g.Time != w.Time || string(g.Data) != string(w.Data) || g.Ignorable != w.Ignorable ||
			string(g.SurfaceOp) != string(w.SurfaceOp) || !slices.Equal(g.SourceEventSeqs, w.SourceEventSeqs) {
			t.Fatalf("%s: event %d = %+v, want %+v", label, i, g, w)
		}
	}
}

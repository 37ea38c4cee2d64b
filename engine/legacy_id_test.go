package engine

import (
	"context"
	"github.com/seglog/seglog/store"
	"testing"

	"github.com/seglog/seglog/testgen"
)

// createAsOldBuild is Create as builds before the session ID rule ran it:
// no PrepareHeader, so any ID is taken.
func createAsOldBuild(t *testing.T, db *DB, h store.Header) *Handle {
	t.Helper()
	h.Version = store.FormatVersion
	db.mu.Lock()
	defer db.mu.Unlock()
	lease, err := db.acquire(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{id: h.ID, hdr: &h, pending: true, loaded: true, uid: store.NewIncarnation()}
	db.mu.sessions[h.ID] = s
	hd := db.newHandle(s, store.Write, lease)
	s.owner = hd
	return hd
}

// A store that already holds a session under an ID that is not UTF-8
// (written by a build before the ID rule) opens with and without its
// index, lists every session, and reads each, that one included, under
// the ID it was stored with (item 3 of issue 15: List, ls and export
// failed for the whole store, and with no index Open did).
func TestStoredIDNotUTF8StillOpens(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	// In List's order; "bad-\xff" is stored with the same JSON spelling as
	// "bad-\uFFFD", and "bad-\xfe\xfe" as the ID spelled with two U+FFFD.
	ids := []string{"a", "bad-\uFFFD", "bad-\uFFFD\uFFFD", "bad-\xfe\xfe", "bad-\xff", "z"}
	db, err := openStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		h := createAsOldBuild(t, db, store.Header{ID: id, CreatedAt: 1})
		if err := h.Append(ctx, testgen.Events(0, 2+i, 40)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*Options{nil, {NoIndex: true}, {ReadOnly: true}, nil} {
		db, err := openStore(t, dir, o)
		if err != nil {
			t.Fatalf("Open(%+v): %v", o, err)
		}
		snaps, err := db.List(ctx)
		if err != nil {
			t.Fatalf("List (%+v): %v", o, err)
		}
		if len(snaps) != len(ids) {
			t.Fatalf("List (%+v): %d sessions, want %d", o, len(snaps), len(ids))
		}
		for i, s := range snaps {
			if s.Header.ID != ids[i] || s.EventCount != uint64(2+i) {
				t.Fatalf("List (%+v)[%d] = %q with %d events, want %q with %d", o, i, s.Header.ID, s.EventCount, ids[i], 2+i)
			}
			h, err := db.Open(ctx, ids[i], store.Read)
			if err != nil {
				t.Fatal(err)
			}
			if h.Header().ID != ids[i] {
				t.Fatalf("Open(%q).Header().ID = %q", ids[i], h.Header().ID)
			}
			evs, err := h.Read(ctx, 0, -1)
			if err != nil || len(evs) != 2+i {
				t.Fatalf("Read(%q) = %d events, %v", ids[i], len(evs), err)
			}
			h.Close()
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

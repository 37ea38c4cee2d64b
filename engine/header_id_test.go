package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// Create refuses a session ID that is not valid UTF-8 or holds a control
// character, with ErrInvalidHeader naming what is wrong, and writes
// nothing; any other ID works through a reopen (item 3 of issue 15: "bad-\xff"
// was accepted and flushed, and then broke List, ls and export, and with no
// index Open).
func TestCreateRefusesBadIDs(t *testing.T) {
	bad := []struct{ id, reason string }{
		{"bad-\xff", "id is not valid UTF-8 (byte 0xff at offset 4)"},
		{"cut-\xc3", "id is not valid UTF-8 (byte 0xc3 at offset 4)"},
		{"sur-\xed\xa0\x80", "id is not valid UTF-8 (byte 0xed at offset 4)"}, // a UTF-16 surrogate
		{"nul-\x00", "id holds control character U+0000 at offset 4"},
		{"a\nb", "id holds control character U+000A at offset 1"},
		{"tab\t", "id holds control character U+0009 at offset 3"},
		{"\x7f", "id holds control character U+007F at offset 0"},
		{"c1-\u0085", "id holds control character U+0085 at offset 3"},
		{"csi-\u009b[2J", "id holds control character U+009B at offset 4"},
	}
	for _, c := range bad {
		_, _, err := store.PrepareHeader(store.Header{ID: c.id, CreatedAt: 1})
		if !errors.Is(err, store.ErrInvalidHeader) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("PrepareHeader(%q) = %v, want ErrInvalidHeader with %q", c.id, err, c.reason)
		}
	}
	for _, h := range []store.Header{
		{ID: "s", CreatedAt: 1, Cwd: "/tmp/\xff"},
		{ID: "s", CreatedAt: 1, ParentSession: "p\xff"},
		{ID: "s", CreatedAt: 1, AgentPreset: "\xfe"},
	} {
		if _, _, err := store.PrepareHeader(h); !errors.Is(err, store.ErrInvalidHeader) || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("PrepareHeader(%+v) = %v, want ErrInvalidHeader: not valid UTF-8", h, err)
		}
	}

	good := []string{"é-ü", "日本語", "a b", "~x~", "\uFFFD", "a/b", "..", "emoji-😀", strings.Repeat("é", store.MaxIDLen/2)}
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	for _, o := range []*engine.Options{nil, {NoIndex: true}} {
		db, err := engine.OpenStore(t, dir, o)
		if err != nil {
			t.Fatal(err)
		}
		if o == nil {
			for _, c := range bad {
				if _, err := db.Create(ctx, store.Header{ID: c.id, CreatedAt: 1}); !errors.Is(err, store.ErrInvalidHeader) {
					t.Fatalf("Create(%q) = %v, want ErrInvalidHeader", c.id, err)
				}
			}
			for _, id := range good {
				h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
				if err != nil {
					t.Fatalf("Create(%q): %v", id, err)
				}
				if err := h.Append(ctx, testgen.Events(0, 2, 40)...); err != nil {
					t.Fatal(err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		snaps, err := db.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) != len(good) {
			t.Fatalf("List: %d sessions, want %d", len(snaps), len(good))
		}
		for _, s := range snaps {
			if s.EventCount != 2 || engine.ReadAll(t, db, s.Header.ID) == nil {
				t.Fatalf("session %q: %+v", s.Header.ID, s)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestGoldenStore reads a store written once by an earlier build and
// checked in (testdata/golden, never regenerated): segments of format
// versions 1 and 2 and a bbolt index. Every way of opening it (with the
// index, without, read-only, for write) serves the same sessions and
// events, and check finds nothing.
func TestGoldenStore(t *testing.T) {
	ctx := context.Background()
	want := map[string][]event.Event{
		"alpha":  append(testgen.Events(0, 40, 400), testgen.Events(40, 20, 400)...),
		"legacy": testgen.V2TurnsPre38("", 2),
	}
	// "legacy" is a v2 session whose user messages have a shape the
	// reference's v2 admission refuses (issue 38): read handles, which see
	// a v2 session migrated, refuse it, naming the event and the member.
	if _, err := recovery.MigrateV2("legacy", want["legacy"]); !errors.Is(err, recovery.ErrMigration) {
		t.Fatalf("MigrateV2 of the legacy session: %v", err)
	}
	const legacyRefusal = "event seq 2 (user/message): user/message data lacks required field role"
	// "migrated" was migrated by the build that wrote the store, from
	// V2TurnsPre38's events: V2Turns' migrated, with their user messages.
	migrated, err := recovery.MigrateV2("migrated", testgen.V2Turns("", 3))
	if err != nil {
		t.Fatal(err)
	}
	var pre38 []json.RawMessage
	for _, e := range testgen.V2TurnsPre38("", 3) {
		if e.Type == "user/message" {
			pre38 = append(pre38, e.Data)
		}
	}
	for i := range migrated {
		if migrated[i].Type == "user/message" {
			migrated[i].Data, pre38 = pre38[0], pre38[1:]
		}
	}
	// "migrated" was migrated by the build that wrote the store, whose
	// system head had another id (the SHA-256 of "<id>\x00<step seq>",
	// not the reference's), cited its step/start and wrote the message's
	// content before its source: stored events are served as stored.
	for i := range migrated {
		if migrated[i].Type == recovery.TypeSystemMessage {
			sum := sha256.Sum256([]byte("migrated\x001"))
			d := regexp.MustCompile(`v2-to-v3-system-[0-9a-f]{64}`).ReplaceAllString(string(migrated[i].Data), "v2-to-v3-system-"+hex.EncodeToString(sum[:]))
			src := `"source":{"kind":"plugin","plugin":"` + recovery.SystemPromptPlugin + `"}`
			migrated[i].Data = json.RawMessage(strings.Replace(d, src+`,"content":[]`, `"content":[],`+src, 1))
			migrated[i].SourceEventSeqs = []uint64{1}
			break
		}
	}
	for i, v := range []int{2, 1} {
		r, err := segment.OpenReader(nil, filepath.Join("testdata/golden", segment.Name(uint64(i+1))))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Header().Version; got != v {
			t.Fatalf("golden segment %d has format version %d, want %d", i+1, got, v)
		}
		r.Close()
	}
	for _, tc := range []struct {
		name string
		opts engine.Options
	}{
		{"index", engine.Options{CompactInterval: -1}},
		{"no-index", engine.Options{NoIndex: true, CompactInterval: -1}},
		{"read-only", engine.Options{ReadOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range []string{segment.Name(1), segment.Name(2), "index.db"} {
				b, err := os.ReadFile(filepath.Join("testdata/golden", n))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := engine.Check(dir, nil)
			if err != nil || len(rep.Problems) != 0 {
				t.Fatalf("check of the golden store: %v %v", rep.Problems, err)
			}
			// The end-of-test check reads every session: it finds the legacy one refused.
			engine.ExpectProblem(t, dir, legacyRefusal)
			db, err := engine.OpenStore(t, dir, &tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			list, err := db.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range list {
				ids = append(ids, s.Header.ID)
				if s.Header.CreatedAt != 1700000000000 || s.Header.Cwd != "/golden" {
					t.Errorf("session %s header %+v", s.Header.ID, s.Header)
				}
			}
			if diff := cmp.Diff([]string{"alpha", "legacy", "migrated"}, ids); diff != "" {
				t.Fatalf("sessions (-want +got):\n%s", diff)
			}
			if h, err := db.Open(ctx, "legacy", store.Read); err != nil {
				t.Fatal(err)
			} else if _, err := h.Read(ctx, 0, -1); !errors.Is(err, recovery.ErrMigration) || !strings.Contains(err.Error(), legacyRefusal) {
				t.Fatalf("legacy: read = %v, want the refusal %q", err, legacyRefusal)
			}
			for id, evs := range map[string][]event.Event{"alpha": want["alpha"], "migrated": migrated} {
				h, err := db.Open(ctx, id, store.Read)
				if err != nil {
					t.Fatal(err)
				}
				got, err := h.Read(ctx, 0, -1)
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if diff := cmp.Diff(evs, got); diff != "" {
					t.Fatalf("%s (-want +got):\n%s", id, diff)
				}
			}
			snap, err := db.Stat(ctx, "legacy")
			if err != nil || snap.FormatStatus != store.FormatMigrationRequired || snap.EventCount != uint64(len(want["legacy"])) {
				t.Fatalf("legacy: %+v %v", snap, err)
			}
			if _, err := db.Stat(ctx, "deleted"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Fatalf("deleted: %v", err)
			}
		})
	}
}

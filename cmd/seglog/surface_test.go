package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// import refuses a log that breaks the v3 surface rules, naming the event,
// and imports the others; a v2 log is checked as reads will see it
// (migrated).
func TestImportRefusesSurfaceBreakers(t *testing.T) {
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	writeLog(t, root, store.Header{Version: 3, ID: "good", CreatedAt: 1}, testgen.V3Events(0, 9, 80), 3)
	// testgen.Events' seq 1 is an assistant/message without surfaceOp.
	writeLog(t, root, store.Header{Version: 3, ID: "bad", CreatedAt: 1}, testgen.Events(0, 4, 80), 3)
	writeLog(t, root, store.Header{Version: 2, ID: "old", CreatedAt: 1}, testgen.V2Turns("", 2), 2)
	// A v2 log whose user message cites a later event: its migration
	// refuses it, with the reference's words.
	late := testgen.V2Turns("", 1)
	late[2].SourceEventSeqs = []uint64{4}
	writeLog(t, root, store.Header{Version: 2, ID: "old-bad", CreatedAt: 1}, late, 2)
	out, code := cli(t, "import", root, "--dir", dir)
	if code != 1 || !strings.Contains(out, "imported 2 sessions") || !strings.Contains(out, "2 of 4 session logs refused") {
		t.Fatalf("import: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		filepath.Join("bad", "session.v3.jsonl") + ": event seq 1 (assistant/message) breaks the v3 surface rules: a surface event requires surfaceOp",
		filepath.Join("old-bad", "session.v2.jsonl") + ": format v2 migration: event seq 2 (user/message): user/message 2 sourceEventSeqs must be unique earlier seqs",
	} {
		if !strings.Contains(out, "refused: ") || !strings.Contains(out, want) {
			t.Errorf("import output lacks %q:\n%s", want, out)
		}
	}
	if out, code := cli(t, "check", "--strict", "--dir", dir); code != 0 {
		t.Errorf("check --strict of what import took: exit %d\n%s", code, out)
	}
}

// check --strict reads every session and reports, as problems, those that
// break the v3 surface rules; plain check does not look.
func TestCheckStrict(t *testing.T) {
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for id, evs := range map[string][]event.Event{"good": testgen.V3Events(0, 9, 80), "bad": testgen.Events(0, 4, 80)} {
		h, err := db.Create(ctx, store.Header{Version: store.FormatVersion, ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, evs...); err != nil { // the rules are off by default
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	out, code := cli(t, "check", "--strict", "--dir", dir)
	want := `session "bad": strict: event seq 1 (assistant/message) breaks the v3 surface rules: a surface event requires surfaceOp`
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "1 problems") || strings.Contains(out, `"good"`) {
		t.Errorf("check --strict: exit %d, want 1 and %q\n%s", code, want, out)
	}
	out, code = cli(t, "check", "--strict", "--json", "--dir", dir)
	var rep checkJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
		t.Errorf("check --strict --json: exit %d, %v\n%s", code, err, out)
	}
}

// The logs of the repository's test data that the reference accepts keep
// the rules: in the golden store, the migrated session; its alpha session
// (testgen.Events: surface types without surfaceOp) and its v2 session,
// whose user messages the reference's v2 admission refuses (written
// before issue 38: testgen.V2TurnsPre38), are the ones check --strict
// reports.
func TestCheckStrictGolden(t *testing.T) {
	out, code := cli(t, "check", "--strict", "--dir", copyStore(t, "../../engine/testdata/golden"))
	if code != 1 || !strings.Contains(out, "2 problems") || !strings.Contains(out, `session "alpha": strict: event seq 1 (assistant/message)`) ||
		!strings.Contains(out, `session "legacy": strict: session "legacy": read: format v2 migration: event seq 2 (user/message): user/message data lacks required field role`) {
		t.Errorf("check --strict of the golden store: exit %d\n%s", code, out)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// v2Turn is a v2 log: one turn with a replace envelope in v2's keys.
func v2Turn() []event.Event {
	mk := func(seq uint64, typ, data, op string, src ...uint64) event.Event {
		e := event.Event{Seq: seq, Type: typ, Time: int64(10 + seq), Data: json.RawMessage(data), SourceEventSeqs: src}
		if op != "" {
			e.SurfaceOp = json.RawMessage(op)
		}
		return e
	}
	msg := func(id string) string {
		return `{"id":"` + id + `","role":"user","content":[],"source":{"kind":"user"}}` // the released v2 shape
	}
	return []event.Event{
		mk(0, "turn/start", `{"turn":"t"}`, ""),
		mk(1, "step/start", `{"turn":"t","step":"s"}`, ""),
		mk(2, "user/message", msg("u1"), `"append"`, 0),
		mk(3, "user/message", msg("u2"), `{"op":"replace","start":2,"end":2}`, 2),
		mk(4, "step/end", `{"turn":"t","step":"s"}`, ""),
		mk(5, "turn/end", `{"turn":"t","reason":{"kind":"completed"}}`, ""),
	}
}

// writeLog writes a log of header h (whose version the header line
// carries) under root as the file name of version fileV.
func writeLog(t *testing.T, root string, h store.Header, evs []event.Event, fileV int) string {
	t.Helper()
	b, err := jsonl.Encode(h, evs, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"version":3`), []byte(fmt.Sprintf(`"version":%d`, h.Version)), 1)
	v3, _ := jsonl.LogPath(root, h, false)
	path := filepath.Join(filepath.Dir(v3), jsonl.FileNameOf(fileV, false))
	writeFile(t, path, b)
	return path
}

func TestImportV2ThenMigrate(t *testing.T) {
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	src := v2Turn()
	writeLog(t, root, store.Header{Version: 2, ID: "old", CreatedAt: 1}, src, 2)
	// Both generations present: v3 is the current log and wins.
	writeLog(t, root, store.Header{Version: 2, ID: "both", CreatedAt: 1}, src, 2)
	writeLog(t, root, store.Header{Version: 3, ID: "both", CreatedAt: 1}, src[:1], 3)
	// A v2 file name over a v3 header is refused, naming both.
	writeLog(t, root, store.Header{Version: 3, ID: "liar", CreatedAt: 1}, src[:1], 2)
	// A v0 log under a name the reference never writes (v0 is session.jsonl): refused by its name.
	writeLog(t, root, store.Header{Version: 2, ID: "ancient", CreatedAt: 1}, src[:1], 2)
	os.Rename(filepath.Join(root, "_no-cwd", "ancient", "session.v2.jsonl"), filepath.Join(root, "_no-cwd", "ancient", "session.v0.jsonl"))

	out, code := cli(t, "--dir", dir, "import", root)
	if code != 1 || !strings.Contains(out, "imported 2 sessions") || !strings.Contains(out, "2 of 4 session logs refused") ||
		!strings.Contains(out, "filename identifies v2, but the header identifies v3") || !strings.Contains(out, "session.v0.jsonl: unsupported log file name") {
		t.Fatalf("import (exit %d):\n%s", code, out)
	}
	out, _ = cli(t, "--dir", dir, "ls")
	if !strings.Contains(out, "old") || !strings.Contains(out, "migration-required") || strings.Count(out, "migration-required") != 1 {
		t.Fatalf("ls after import:\n%s", out)
	}
	want, _ := recovery.MigrateV2("old", src)
	catBefore, code := cli(t, "--dir", dir, "cat", "old")
	if code != 0 || strings.Count(catBefore, "\n") != len(want) || !strings.Contains(catBefore, "v2-to-v3-system-") {
		t.Fatalf("cat of a v2 session (exit %d) should show the migrated log:\n%s", code, catBefore)
	}
	// A copy holds what reads return and a stream only v3: migrate first.
	copied := t.TempDir()
	if out, code := cli(t, "copy", "--from", dir, "--to", copied, "old"); code != 1 || !strings.Contains(out, "migrate it first") {
		t.Errorf("copy of a v2 session (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--dir", dir, "migrate", "--all")
	if code != 0 || !strings.Contains(out, "old: v2 -> v3, 6 -> 7 events") || !strings.Contains(out, "migrated 1 sessions") {
		t.Fatalf("migrate --all (exit %d):\n%s", code, out)
	}
	// Naming a session that is current already migrates none.
	if out, code := cli(t, "--dir", dir, "migrate", "old"); code != 0 || !strings.Contains(out, "old: already v3") || !strings.Contains(out, "migrated 0 sessions") {
		t.Fatalf("migrate of a current session (exit %d):\n%s", code, out)
	}
	out, _ = cli(t, "--dir", dir, "ls")
	if strings.Contains(out, "migration-required") {
		t.Fatalf("ls after migrate:\n%s", out)
	}
	if catAfter, _ := cli(t, "--dir", dir, "cat", "old"); catAfter != catBefore {
		t.Fatalf("migration changed what cat shows:\nbefore\n%s\nafter\n%s", catBefore, catAfter)
	}
	if out, code := cli(t, "copy", "--from", dir, "--to", copied, "old"); code != 0 || !strings.Contains(out, "old: created, 7 events") {
		t.Errorf("copy of the migrated session (exit %d):\n%s", code, out)
	} else if catCopy, _ := cli(t, "--dir", copied, "cat", "old"); catCopy != catBefore {
		t.Errorf("the copy of the migrated session reads otherwise:\n%s", catCopy)
	}
	if out, code := cli(t, "--dir", dir, "migrate"); code != 2 {
		t.Errorf("migrate without ids (exit %d): %s", code, out)
	}
	exp := t.TempDir()
	if out, code := cli(t, "--dir", dir, "export", "old", exp); code != 0 {
		t.Fatalf("export (exit %d): %s", code, out)
	}
	path, _ := jsonl.LogPath(exp, store.Header{ID: "old", Version: 3}, false)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := jsonl.Parse(b, false)
	if err != nil || log.Header.Version != 3 || len(log.Events) != len(want) {
		t.Fatalf("exported log: %+v, %v", log, err)
	}
	if out, code := cli(t, "--dir", dir, "check"); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("check after migration (exit %d):\n%s", code, out)
	}
}

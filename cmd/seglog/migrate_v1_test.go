package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// legacyLogs are reference logs of the released formats v1 and v0 (the
// older id-addressed API's session.jsonl): file name → content.
var legacyLogs = map[string]string{
	// A v1 turn: top-level chunks (one packed row among them) the message
	// cites.
	"_no-cwd/v1-plain/session.v1.jsonl": `{"type":"session","version":1,"id":"v1-plain","createdAt":1,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":102,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"question"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"text-chunks","seq0":3,"time0":110,"data":{"turn":1,"step":1,"index":0,"dt":[5],"texts":["hel","lo"]}}
{"type":"assistant/chunk","seq":5,"time":120,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"stop"}}}}
{"type":"assistant/message","seq":6,"time":121,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"mock","model":"mock"}}},"sourceEventSeqs":[3,4,5],"surfaceOp":"append"}
{"type":"step/end","seq":7,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":8,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
`,
	// A seeded v1 session (seedLength 7): its inherited attempt collapses,
	// and its untagged marker at the cut becomes the tagged one.
	"_no-cwd/v1-seeded/session.v1.jsonl": `{"type":"session","version":1,"id":"v1-seeded","createdAt":1,"parentSession":"parent","seedLength":7,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"stop"}}}}
{"type":"assistant/message","seq":4,"time":121,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"mock","model":"mock"}}},"sourceEventSeqs":[2,3],"surfaceOp":"append"}
{"type":"step/end","seq":5,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":6,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"session/end-seed","seq":7,"time":124,"data":{}}
{"type":"turn/start","seq":8,"time":125,"data":{"turn":2}}
{"type":"turn/end","seq":9,"time":126,"data":{"turn":2,"reason":{"kind":"completed"}}}
`,
	// A v0 log: legacy shapes the v0 → v1 edge normalizes.
	"_no-cwd/v0-legacy/session.jsonl": `{"type":"session","version":0,"id":"v0-legacy","createdAt":1,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":3,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"assistant/message","seq":3,"time":4,"data":{"turn":1,"step":1,"content":[{"type":"text","text":"hello"}],"provenance":{"provider":"mock","model":"mock"}},"surfaceOp":"append"}
{"type":"step/end","seq":4,"time":5,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":5,"time":6,"data":{"turn":1,"reason":{"kind":"disposed"}}}
`,
	// A v1 log the migration refuses: a message citing part of its attempt.
	"_no-cwd/v1-bad/session.v1.jsonl": `{"type":"session","version":1,"id":"v1-bad","createdAt":1,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}}
{"type":"assistant/chunk","seq":3,"time":4,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}}
{"type":"assistant/message","seq":4,"time":5,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"ab"}],"source":{"kind":"model","provider":"mock","model":"mock"}}},"sourceEventSeqs":[2],"surfaceOp":"append"}
`,
}

// TestImportV1AndV0: import takes session.v1.jsonl and session.jsonl
// logs; the v1 ones are stored as they are and the v0 one as its v1
// image, all migration-required, read migrated (cat), upgraded in place by
// migrate without changing what reads see; a log its migration refuses is
// listed as refused, naming the event.
func TestImportV1AndV0(t *testing.T) {
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	for name, content := range legacyLogs {
		writeFile(t, filepath.Join(root, filepath.FromSlash(name)), []byte(content))
	}
	out, code := cli(t, "--dir", dir, "import", root)
	if code != 1 || !strings.Contains(out, "imported 3 sessions") || !strings.Contains(out, "1 of 4 session logs refused") ||
		!strings.Contains(out, filepath.Join("v1-bad", "session.v1.jsonl")+": format v1 migration: event seq 4 (assistant/message): assistant/message 4 chunk references are not one complete ordered attempt") {
		t.Fatalf("import (exit %d):\n%s", code, out)
	}
	out, _ = cli(t, "--dir", dir, "ls")
	if strings.Count(out, "migration-required") != 3 {
		t.Fatalf("ls after import:\n%s", out)
	}
	before := map[string]string{}
	for _, id := range []string{"v1-plain", "v1-seeded", "v0-legacy"} {
		cat, code := cli(t, "--dir", dir, "cat", id)
		if code != 0 || strings.Contains(cat, "assistant/chunk") || !strings.Contains(cat, "v2-to-v3-system-") {
			t.Fatalf("cat %s (exit %d) should show the migrated log:\n%s", id, code, cat)
		}
		before[id] = cat
	}
	if !strings.Contains(before["v1-plain"], `"texts":["hel","lo"]`) || !strings.Contains(before["v0-legacy"], "legacy-message:v0-legacy:2") {
		t.Errorf("migrated views:\n%s\n%s", before["v1-plain"], before["v0-legacy"])
	}
	b, _ := os.ReadFile(filepath.Join(root, "_no-cwd", "v1-plain", "session.v1.jsonl"))
	log, err := jsonl.Parse(b, false)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := recovery.MigrateV1(recovery.LegacySession{ID: "v1-plain", CreatedAt: 1}, log.Events)
	if err != nil || strings.Count(before["v1-plain"], "\n") != len(want) {
		t.Fatalf("cat v1-plain has %d lines, want %d (%v)", strings.Count(before["v1-plain"], "\n"), len(want), err)
	}
	out, code = cli(t, "--dir", dir, "migrate", "--all")
	if code != 0 || !strings.Contains(out, "v1-plain: v1 -> v3, 9 -> 7 events") || !strings.Contains(out, "v1-seeded: v1 -> v3, 10 -> 9 events") ||
		!strings.Contains(out, "v0-legacy: v1 -> v3, 6 -> 7 events") || !strings.Contains(out, "migrated 3 sessions") {
		t.Fatalf("migrate --all (exit %d):\n%s", code, out)
	}
	for id, cat := range before {
		if after, _ := cli(t, "--dir", dir, "cat", id); after != cat {
			t.Errorf("migration changed what cat %s shows:\nbefore\n%s\nafter\n%s", id, cat, after)
		}
	}
	if out, code := cli(t, "--dir", dir, "check", "--strict"); code != 0 {
		t.Fatalf("check --strict after migration (exit %d):\n%s", code, out)
	}
	db, err := enginetest.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// v1's cut 7 → v2's 5 (the attempt collapsed) → v3's 6 (the system head).
	snap, err := db.Stat(context.Background(), "v1-seeded")
	if err != nil || snap.InheritedEventCount != 6 || !snap.Header.IsSeeded || snap.Header.ParentSession != "parent" || snap.FormatStatus != store.FormatCurrent {
		t.Fatalf("Stat(v1-seeded) = %+v, %v", snap, err)
	}
}

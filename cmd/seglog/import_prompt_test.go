package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// An older log whose request headers carry the system prompt (v2's
// header.system, which v3 retired) imports: the import stores it as it is
// and reads show it migrated, the prompt a system/message; a write open
// then migrates and appends. The store's append check of the v3 catalog
// refused such logs (`retired header.system`) before the migration ever
// saw them.
func TestImportOlderLogWithSystemPrompt(t *testing.T) {
	for _, c := range []struct{ name, file, head string }{
		{"v2", "session.v2.jsonl", `{"type":"session","version":2,"id":"p","createdAt":1700000000000,"isSeeded":false,"delegationDepth":0}`},
		{"v1", "session.v1.jsonl", `{"type":"session","version":1,"id":"p","createdAt":1700000000000,"delegationDepth":0}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
			log := c.head + `
{"type":"turn/start","seq":0,"time":1700000000000,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":1700000000001,"data":{"turn":1,"step":1}}
{"type":"request/header","seq":2,"time":1700000000002,"data":{"header":{"config":{"provider":"deepseek","model":"deepseek-chat"},"system":"You are a coding agent."},"reason":"initial"}}
{"type":"step/end","seq":3,"time":1700000000003,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":4,"time":1700000000004,"data":{"turn":1,"reason":{"kind":"completed"}}}
`
			writeFile(t, filepath.Join(root, "_no-cwd", "p", c.file), []byte(log))
			if out, code := cli(t, "import", root, "--dir", dir); code != 0 || !strings.Contains(out, "imported 1 sessions") {
				t.Fatalf("import: exit %d\n%s", code, out)
			}
			out, code := cli(t, "cat", "p", "--dir", dir)
			if code != 0 || !strings.Contains(out, `"type":"system/message"`) || !strings.Contains(out, "You are a coding agent.") {
				t.Fatalf("cat: exit %d, want the prompt as a system/message:\n%s", code, out)
			}
			ctx := context.Background()
			db, err := enginetest.OpenStore(t, dir, (*engine.Options)(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Open(ctx, "p", store.Write)
			if err != nil {
				t.Fatalf("write open of the imported %s session: %v", c.name, err)
			}
			if h.Header().Version != store.FormatVersion {
				t.Errorf("write open: header version %d, want %d (migrated)", h.Header().Version, store.FormatVersion)
			}
			h.Close()
		})
	}
}

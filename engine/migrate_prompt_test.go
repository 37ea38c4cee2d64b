package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// A v2 session's system prompt (request/header.data.header.system) becomes
// a system/message when a write open migrates it, and its header's preset
// "code" becomes "ptc" (the reference's v2 → v3 edge; recovery.MigrateV2).
func TestMigratePromptAndPreset(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	// Appends check the catalog, which refuses header.system: the v2 log
	// is written as import stores one, through a catalog that takes all.
	db, err := engine.OpenStore(t, dir, &engine.Options{Catalog: event.AnyCatalog()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "p", CreatedAt: 1, AgentPreset: "code"})
	if err != nil {
		t.Fatal(err)
	}
	src := `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"request/header","seq":2,"time":3,"data":{"header":{"system":"be brief"},"reason":"initial"}}
{"type":"tool/code-dispatch-start","seq":3,"time":4,"data":{"rootCallId":"r","parentCallId":"r","subCallId":"c","name":"n","arguments":{}}}`
	var evs []event.Event
	for _, l := range strings.Split(src, "\n") {
		var e event.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = engine.OpenStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	w, err := db.Open(ctx, "p", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if hd := w.Header(); hd.Version != store.FormatVersion || hd.AgentPreset != "ptc" {
		t.Errorf("migrated header %+v", hd)
	}
	got, err := w.Read(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
	}
	if s := strings.Join(types, " "); s != "turn/start step/start system/message system/message request/header tool/ptc-dispatch-start" {
		t.Fatalf("types %s", s)
	}
	if !strings.Contains(string(got[3].Data), `"content":[{"type":"text","text":"be brief"}]`) || strings.Contains(string(got[4].Data), "system") {
		t.Errorf("prompt %s, request/header %s", got[3].Data, got[4].Data)
	}
}

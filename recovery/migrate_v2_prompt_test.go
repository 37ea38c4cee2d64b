package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
)

// The reference's v2-to-v3 edge (knyazev741/deepseek-harness at 1376315f,
// packages/session/session-format-v2-to-v3/src/migration.ts) turns the
// system prompts v2 kept in request/header.data.header.system into
// system/message events. The cases restate its tests/migration.spec.ts
// ("streaming V2 system prompt migration").

// refSystemID is the id the reference gives a system message it inserts,
// anchored at the source event (seq, typ).
func refSystemID(session string, seq int, typ string) string {
	key, _ := json.Marshal([]any{"session-format-v2-to-v3", session, seq, typ})
	sum := sha256.Sum256(key)
	return "v2-to-v3-system-" + hex.EncodeToString(sum[:])
}

func promptRequest(system any) string {
	h := map[string]any{"config": map[string]string{"provider": "mock", "model": "mock"}}
	if system != nil {
		h["system"] = system
	}
	b, _ := json.Marshal(map[string]any{"header": h, "reason": "initial"})
	return string(b)
}

const promptOpening = `{"type":"turn/start","seq":0,"time":40,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":41,"data":{"turn":1,"step":1}}
`

type systemMsg struct {
	Turn, Step int
	Message    struct {
		ID      string
		Role    string
		Source  map[string]string
		Content []struct{ Type, Text string }
	}
}

func TestMigrateV2SystemPrompts(t *testing.T) {
	// An empty head after the first step, then the prompt "first" (once:
	// repeating it changes nothing), "changed", cleared by a header
	// without one, and "" (already cleared: nothing).
	src := promptOpening + `{"type":"user/message","seq":2,"time":42,"data":` + v2User("user") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":43,"data":` + promptRequest("first") + `}
{"type":"request/header","seq":4,"time":44,"data":` + promptRequest("first") + `}
{"type":"request/header","seq":5,"time":45,"data":` + promptRequest("changed") + `}
{"type":"request/header","seq":6,"time":46,"data":` + promptRequest(nil) + `}
{"type":"request/header","seq":7,"time":47,"data":` + promptRequest("") + `}
{"type":"step/end","seq":8,"time":48,"data":{"turn":1,"step":1}}`
	in := logOf(t, src)
	before := render(t, in)
	out, err := MigrateV2("identity", in)
	if err != nil {
		t.Fatal(err)
	}
	if render(t, in) != before {
		t.Fatal("input modified")
	}
	again, err := MigrateV2("identity", in)
	if err != nil || render(t, again) != render(t, out) {
		t.Fatalf("a second migration differs (%v)", err)
	}
	var types []string
	for i, e := range out {
		types = append(types, e.Type)
		if e.Seq != uint64(i) {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		if e.Type == "request/header" && strings.Contains(string(e.Data), `"system"`) {
			t.Errorf("request/header %d keeps header.system: %s", e.Seq, e.Data)
		}
	}
	want := "turn/start step/start system/message user/message system/message request/header request/header " +
		"system/message request/header system/message request/header request/header step/end"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("types\n%s\nwant\n%s", got, want)
	}
	for _, c := range []struct {
		at       int    // the system message's seq
		prompt   string // its text ("" for none)
		anchor   int    // the source seq it is anchored at
		anchorTy string
		replaces int // the head it replaces, -1 for none
		time     int64
	}{
		{2, "", 1, "step/start", -1, 41},
		{4, "first", 3, "request/header", 2, 43},
		{7, "changed", 5, "request/header", 4, 45},
		{9, "", 6, "request/header", 7, 46},
	} {
		e := out[c.at]
		var d systemMsg
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		text := ""
		if len(d.Message.Content) > 0 {
			text = d.Message.Content[0].Text
		}
		if d.Message.ID != refSystemID("identity", c.anchor, c.anchorTy) || d.Message.Role != "system" ||
			d.Message.Source["kind"] != "plugin" || d.Message.Source["plugin"] != SystemPromptPlugin ||
			text != c.prompt || len(d.Message.Content) != map[bool]int{true: 0, false: 1}[c.prompt == ""] ||
			d.Turn != 1 || d.Step != 1 || e.Time != c.time {
			t.Errorf("system message at %d: %+v %s", c.at, e, e.Data)
		}
		wantOp, wantSrc := `"append"`, "[]"
		if c.replaces >= 0 {
			wantOp = fmt.Sprintf(`{"op":"replace","startSeq":%d,"endSeq":%d}`, c.replaces, c.replaces)
			wantSrc = fmt.Sprintf("[%d]", c.replaces)
		}
		if string(e.SurfaceOp) != wantOp || fmt.Sprint(e.SourceEventSeqs) != wantSrc {
			t.Errorf("system message at %d: surfaceOp %s, sourceEventSeqs %v", c.at, e.SurfaceOp, e.SourceEventSeqs)
		}
	}
	if m := `"message":{"id":"` + refSystemID("identity", 3, "request/header") + `","role":"system","source":{"kind":"plugin","plugin":"` + SystemPromptPlugin + `"},"content":[{"type":"text","text":"first"}]}`; !strings.Contains(string(out[4].Data), m) {
		t.Errorf("system message at 4: %s, want its message as %s", out[4].Data, m)
	}
	// What the migrated log surfaces is what the v3 rules take.
	if err := NewSurfaceChecker(event.NewCatalog()).Check(out...); err != nil {
		t.Fatalf("surface rules: %v", err)
	}
}

func TestMigrateV2SystemPromptRefusals(t *testing.T) {
	head := refSystemID("identity", 1, "step/start")
	update := refSystemID("identity", 3, "request/header")
	for _, c := range []struct{ name, in, want string }{
		{"a surface before the first step",
			`{"type":"user/message","seq":0,"time":1,"data":` + v2User("user") + `,"surfaceOp":"append"}
{"type":"turn/start","seq":1,"time":2,"data":{"turn":1}}
{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}`,
			"surface before first step"},
		{"a prompt before the first step",
			`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"request/header","seq":1,"time":2,"data":` + promptRequest("early") + `}
{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}`,
			"changed request prompt outside an open step"},
		{"a prompt after a step/end",
			promptOpening + `{"type":"step/end","seq":2,"time":42,"data":{"turn":1,"step":1}}
{"type":"request/header","seq":3,"time":43,"data":` + promptRequest("late") + `}`,
			"changed request prompt outside an open step"},
		{"a prompt cleared after a turn/end",
			promptOpening + `{"type":"request/header","seq":2,"time":42,"data":` + promptRequest("p") + `}
{"type":"turn/end","seq":3,"time":43,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"request/header","seq":4,"time":44,"data":` + promptRequest(nil) + `}`,
			"changed request prompt outside an open step"},
		{"a later message with the head's id",
			promptOpening + `{"type":"user/message","seq":2,"time":42,"data":` + v2User(head) + `,"surfaceOp":"append"}`,
			"source message id collides with a generated system message id"},
		{"a later message with a prompt's id",
			promptOpening + `{"type":"user/message","seq":2,"time":42,"data":` + v2User("u") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":43,"data":` + promptRequest("p") + `}
{"type":"tool/result","seq":4,"time":44,"data":{"turn":1,"step":1,"message":` + v2User(update) + `},"surfaceOp":"append"}`,
			"source message id collides with a generated system message id"},
		{"an earlier spliced message with the head's id",
			`{"type":"agent/inbox/spliced","seq":0,"time":1,"data":{"target":"next-turn","start":0,"inserted":[` + v2User(refSystemID("identity", 2, "step/start")) + `]}}
{"type":"turn/start","seq":1,"time":2,"data":{"turn":1}}
{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}`,
			"generated system message id collides with an existing message id"},
		{"a request header that is not an object",
			promptOpening + `{"type":"request/header","seq":2,"time":42,"data":{"header":"x","reason":"initial"}}`,
			"request header must be an object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := MigrateV2("identity", logOf(t, c.in))
			if !errors.Is(err, ErrMigration) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("MigrateV2 = %v, want a refusal with %q", err, c.want)
			}
		})
	}
}

// The reference's v2-to-v3 edge renames the code-mode vocabulary
// (migration.ts, renamePtcEvent; tests/preset-migration.spec.ts).
func TestMigrateV2CodeModeRenames(t *testing.T) {
	plugin := func(id, p string) string {
		return `{"id":"` + id + `","role":"user","source":{"kind":"plugin","plugin":"` + p + `"},"content":[]}`
	}
	in := logOf(t, promptOpening+`{"type":"agent-preset/selected","seq":2,"time":42,"data":{"agentPreset":"code"}}
{"type":"agent-preset/selected","seq":3,"time":42,"data":{"agentPreset":"agent"}}
{"type":"user/message","seq":4,"time":42,"data":`+plugin("a", "tools-code-mode")+`,"surfaceOp":"append"}
{"type":"user/message","seq":5,"time":42,"data":`+plugin("b", "other")+`,"surfaceOp":"append"}
{"type":"agent/inbox/spliced","seq":6,"time":42,"data":{"target":"next-step","start":0,"inserted":[`+plugin("c", "tools-code-mode")+`,`+v2User("d")+`]}}
{"type":"session/title-llm-request","seq":7,"time":42,"data":{"titleProvider":"p","messageSeqs":[4],"route":{"provider":"p","model":"m"},"system":"s","messages":[`+plugin("e", "tools-code-mode")+`],"maxTokens":9}}
{"type":"tool/code-dispatch-start","seq":8,"time":42,"data":`+ptcDispatch+`}
{"type":"tool/code-dispatch","seq":9,"time":42,"data":`+ptcSettle+`}
{"type":"tool/result","seq":10,"time":42,"data":{"turn":1,"step":1,"message":{"id":"f","role":"user","source":{"kind":"plugin","plugin":"tools-code-mode"},"content":[]}},"surfaceOp":"append"}`)
	out, err := MigrateV2("identity", in)
	if err != nil {
		t.Fatal(err)
	}
	out = withoutHead(t, out, 1)
	want := logOf(t, promptOpening+`{"type":"agent-preset/selected","seq":3,"time":42,"data":{"agentPreset":"ptc"}}
{"type":"agent-preset/selected","seq":4,"time":42,"data":{"agentPreset":"agent"}}
{"type":"user/message","seq":5,"time":42,"data":`+plugin("a", "tools-ptc")+`,"surfaceOp":"append"}
{"type":"user/message","seq":6,"time":42,"data":`+plugin("b", "other")+`,"surfaceOp":"append"}
{"type":"agent/inbox/spliced","seq":7,"time":42,"data":{"target":"next-step","start":0,"inserted":[`+plugin("c", "tools-ptc")+`,`+v2User("d")+`]}}
{"type":"session/title-llm-request","seq":8,"time":42,"data":{"titleProvider":"p","messageSeqs":[5],"route":{"provider":"p","model":"m"},"system":"s","messages":[`+plugin("e", "tools-ptc")+`],"maxTokens":9}}
{"type":"tool/ptc-dispatch-start","seq":9,"time":42,"data":`+ptcDispatch+`}
{"type":"tool/ptc-dispatch","seq":10,"time":42,"data":`+ptcSettle+`}
{"type":"tool/result","seq":11,"time":42,"data":{"turn":1,"step":1,"message":{"id":"f","role":"user","source":{"kind":"plugin","plugin":"tools-code-mode"},"content":[]}},"surfaceOp":"append"}`)
	if got, w := render(t, out), render(t, want); got != w {
		t.Errorf("migrated (without the head):\n%s\nwant:\n%s", got, w)
	}
	if V3AgentPreset("code") != "ptc" || V3AgentPreset("agent") != "agent" || V3AgentPreset("") != "" {
		t.Error("V3AgentPreset renames wrongly")
	}
}

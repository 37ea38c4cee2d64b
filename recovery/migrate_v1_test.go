package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
)

// logOf parses one event per line (the JSONL event shape; sourceEventSeqs
// as a plain list).
func logOf(t *testing.T, lines string) []event.Event {
	t.Helper()
	var out []event.Event
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		var e event.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("bad test line %s: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

// render writes events one per line, compact, for comparison.
func render(t *testing.T, evs []event.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		var c bytes.Buffer
		if err := json.Compact(&c, e.Data); err != nil {
			t.Fatalf("event %d data %s: %v", e.Seq, e.Data, err)
		}
		e.Data = c.Bytes()
		if len(e.SurfaceOp) > 0 {
			var s bytes.Buffer
			json.Compact(&s, e.SurfaceOp)
			e.SurfaceOp = s.Bytes()
		}
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

const (
	refMessage = `{"id":"assistant-1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"mock","model":"mock"}}`
	refUser    = `{"id":"user-1","role":"user","content":[{"type":"text","text":"question"}],"source":{"kind":"user"}}`
	finishStop = `{"type":"finish","reason":{"kind":"stop"}}`
)

func unseeded(id string) LegacySession { return LegacySession{ID: id, CreatedAt: 1} }

// The cases of the reference's v1-to-v2 migration spec
// (session-format-v1-to-v2/tests/migration.spec.ts), with its inputs and
// expected outputs restated as logs.
func TestMigrateV1ToV2(t *testing.T) {
	for _, c := range []struct {
		name string
		sess LegacySession
		in   string
		want string // the whole migrated log; "" when only check applies
		cut  uint64
		// check, if set, inspects the output
		check func(t *testing.T, out []event.Event)
	}{
		{
			name: "interleaved successful stream, dense remap",
			sess: unseeded("v1-success"),
			in: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"feedback/record","seq":3,"time":111,"data":{"text":"interleaved"}}
{"type":"assistant/chunk","seq":4,"time":120,"data":{"turn":1,"step":1,"chunk":` + finishStop + `}}
{"type":"assistant/message","seq":5,"time":121,"data":{"turn":1,"step":1,"message":` + refMessage + `},"sourceEventSeqs":[2,4],"surfaceOp":"append"}
{"type":"step/end","seq":6,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":7,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"command/run","seq":8,"time":124,"data":{"commandId":"command-1","name":"inspect","source":{"kind":"user"}}}
{"type":"command/done","seq":9,"time":125,"data":{"commandId":"command-1","kind":"success","sourceEventSeq":5}}`,
			want: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"feedback/record","seq":2,"time":111,"data":{"text":"interleaved"}}
{"type":"assistant/message","seq":3,"time":121,"data":{"turn":1,"step":1,"message":` + refMessage + `,"stream":[{"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["hello"]},{"type":"chunk","time":120,"chunk":` + finishStop + `}]},"surfaceOp":"append"}
{"type":"step/end","seq":4,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":5,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"command/run","seq":6,"time":124,"data":{"commandId":"command-1","name":"inspect","source":{"kind":"user"}}}
{"type":"command/done","seq":7,"time":125,"data":{"commandId":"command-1","kind":"success","sourceEventSeq":3}}`,
		},
		{
			name: "failed no-output attempt kept as assistant/attempt",
			sess: unseeded("v1-failed"),
			in: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"partial"}}}
{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"provider failed","code":"PROVIDER_ERROR"}}}}}
{"type":"step/end","seq":4,"time":121,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":5,"time":122,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"provider failed","code":"PROVIDER_ERROR"}}}}`,
			want: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/attempt","seq":2,"time":120,"data":{"turn":1,"step":1,"stream":[{"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["partial"]},{"type":"chunk","time":120,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"provider failed","code":"PROVIDER_ERROR"}}}}]}}
{"type":"step/end","seq":3,"time":121,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":4,"time":122,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"provider failed","code":"PROVIDER_ERROR"}}}}`,
		},
		{
			name: "unterminated failed prefix separated from the retried attempt",
			sess: unseeded("v1-retry-prefix"),
			in: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"request/header","seq":2,"time":102,"data":{"header":{"config":{"provider":"mock","model":"mock"}},"reason":"initial"}}
{"type":"assistant/chunk","seq":3,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"partial"}}}
{"type":"llm/retry","seq":4,"time":120,"data":{"retryId":"retry-1","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"default","retry":1,"maxRetries":1,"delayMs":0,"failure":{"code":"SERVER","message":"retry"}}}
{"type":"llm/retry-started","seq":5,"time":121,"data":{"retryId":"retry-1","turn":1,"step":1,"retry":1}}
{"type":"assistant/chunk","seq":6,"time":130,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":7,"time":140,"data":{"turn":1,"step":1,"chunk":` + finishStop + `}}
{"type":"assistant/message","seq":8,"time":141,"data":{"turn":1,"step":1,"message":` + refMessage + `},"sourceEventSeqs":[6,7],"surfaceOp":"append"}
{"type":"step/end","seq":9,"time":142,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":10,"time":143,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			check: func(t *testing.T, out []event.Event) {
				var got []event.Event
				for _, e := range out {
					if strings.HasPrefix(e.Type, "assistant/") {
						got = append(got, e)
					}
				}
				want := logOf(t, `{"type":"assistant/attempt","seq":3,"time":110,"data":{"turn":1,"step":1,"stream":[{"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["partial"]}]}}
{"type":"assistant/message","seq":6,"time":141,"data":{"turn":1,"step":1,"message":`+refMessage+`,"stream":[{"type":"text-chunks","time0":130,"index":0,"dt":[],"texts":["hello"]},{"type":"chunk","time":140,"chunk":`+finishStop+`}]},"surfaceOp":"append"}`)
				if g, w := render(t, got), render(t, want); g != w {
					t.Errorf("assistant events:\n%s\nwant\n%s", g, w)
				}
			},
		},
		{
			name: "seeded: the child marker moves after the inherited attempt collapses, and is tagged",
			sess: LegacySession{ID: "v1-seeded", CreatedAt: 1, ParentSession: "parent", IsSeeded: true, Inherited: 7},
			in: `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":` + finishStop + `}}
{"type":"assistant/message","seq":4,"time":121,"data":{"turn":1,"step":1,"message":` + refMessage + `},"sourceEventSeqs":[2,3],"surfaceOp":"append"}
{"type":"step/end","seq":5,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":6,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"session/end-seed","seq":7,"time":124,"data":{}}`,
			cut: 5,
			check: func(t *testing.T, out []event.Event) {
				if len(out) != 6 || render(t, out[5:]) != render(t, logOf(t, `{"type":"session/end-seed","seq":5,"time":124,"data":{"inherited":true}}`)) {
					t.Errorf("marker: %s", render(t, out))
				}
			},
		},
		{
			name: "seeded with an empty inherited seed: the tagged marker at createdAt",
			sess: LegacySession{ID: "v1-empty-seed", CreatedAt: 42, ParentSession: "parent", IsSeeded: true},
			want: `{"type":"session/end-seed","seq":0,"time":42,"data":{"inherited":true}}`,
		},
		{
			name: "seeded with an empty seed before the first event: the marker takes its time",
			sess: LegacySession{ID: "v1-seed-first", CreatedAt: 1, ParentSession: "parent", IsSeeded: true},
			in:   `{"type":"turn/start","seq":0,"time":2,"data":{"turn":1}}`,
			want: `{"type":"session/end-seed","seq":0,"time":2,"data":{"inherited":true}}
{"type":"turn/start","seq":1,"time":2,"data":{"turn":1}}`,
		},
		{
			name: "seeded: a marker after a retained non-empty prefix",
			sess: LegacySession{ID: "v1-retained-seed", CreatedAt: 1, ParentSession: "parent", IsSeeded: true, Inherited: 1},
			in:   `{"type":"feedback/record","seq":0,"time":9,"data":{"text":"inherited"}}`,
			want: `{"type":"feedback/record","seq":0,"time":9,"data":{"text":"inherited"}}
{"type":"session/end-seed","seq":1,"time":9,"data":{"inherited":true}}`,
			cut: 1,
		},
		{
			name: "a legacy message without citations gets an empty stream",
			sess: unseeded("v1-legacy"),
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"assistant/message","seq":2,"time":3,"data":{"turn":1,"step":1,"message":` + refMessage + `},"surfaceOp":"append"}
{"type":"step/end","seq":3,"time":4,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":4,"time":5,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			check: func(t *testing.T, out []event.Event) {
				if !strings.HasSuffix(string(out[2].Data), `"stream":[]}`) || string(out[2].SurfaceOp) != `"append"` {
					t.Errorf("message: %s", render(t, out[2:3]))
				}
			},
		},
		{
			name: "a legacy goal message splits into goal/change and the message with plugin attribution",
			sess: unseeded("legacy-goal"),
			in:   `{"type":"user/message","seq":0,"time":1,"data":{"id":"goal-message","role":"user","content":[{"type":"text","text":"<goal_state>{}</goal_state>"}],"source":{"kind":"goal","goalId":"goal-1","revision":1,"round":0,"change":{"kind":"goal/change","version":1,"operation":"create","roundsStarted":0,"createdAt":1,"updatedAt":1}}},"surfaceOp":"append"}`,
			want: `{"type":"goal/change","seq":0,"time":1,"data":{"kind":"goal/change","version":1,"operation":"create","roundsStarted":0,"createdAt":1,"updatedAt":1}}
{"type":"user/message","seq":1,"time":1,"data":{"id":"goal-message","role":"user","content":[{"type":"text","text":"<goal_state>{}</goal_state>"}],"source":{"kind":"plugin","plugin":"goal"}},"surfaceOp":"append"}`,
		},
		{
			name: "a legacy next-turn restart closes the prior turn as interrupted",
			sess: unseeded("legacy-turn"),
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"step/end","seq":2,"time":3,"data":{"turn":1,"step":1}}
{"type":"agent/inbox/spliced","seq":3,"time":4,"data":{"target":"next-turn","start":0,"inserted":[` + refUser + `]}}
{"type":"turn/start","seq":4,"time":5,"data":{"turn":2}}
{"type":"turn/end","seq":5,"time":6,"data":{"turn":2,"reason":{"kind":"completed"}}}`,
			want: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"step/end","seq":2,"time":3,"data":{"turn":1,"step":1}}
{"type":"agent/inbox/spliced","seq":3,"time":4,"data":{"target":"next-turn","start":0,"inserted":[` + refUser + `]}}
{"type":"turn/end","seq":4,"time":5,"data":{"turn":1,"reason":{"kind":"interrupted"}}}
{"type":"turn/start","seq":5,"time":5,"data":{"turn":2}}
{"type":"turn/end","seq":6,"time":6,"data":{"turn":2,"reason":{"kind":"completed"}}}`,
		},
		{
			name: "surface, compaction, title and command references are remapped",
			sess: unseeded("v1-reference-map"),
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":2,"data":` + refUser + `,"surfaceOp":"append"}
{"type":"user/message","seq":2,"time":3,"data":{"id":"checkpoint","role":"user","content":[],"source":{"kind":"plugin","plugin":"test"}},"sourceEventSeqs":[1],"surfaceOp":{"op":"replace","start":1,"end":1}}
{"type":"step/start","seq":3,"time":4,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":4,"time":5,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":5,"time":6,"data":{"turn":1,"step":1,"chunk":` + finishStop + `}}
{"type":"assistant/message","seq":6,"time":7,"data":{"turn":1,"step":1,"message":` + refMessage + `},"sourceEventSeqs":[4,5],"surfaceOp":"append"}
{"type":"step/end","seq":7,"time":8,"data":{"turn":1,"step":1}}
{"type":"compaction/prune","seq":8,"time":9,"data":{"shadowedRange":{"start":2,"end":2},"shadowedSeqs":[2],"shadowedTokenCount":1}}
{"type":"session/title","seq":9,"time":10,"data":{"title":"Question","messageSeqs":[1],"source":{"kind":"fallback"}}}
{"type":"session/title-llm-request","seq":10,"time":11,"data":{"titleProvider":"title-1","messageSeqs":[6],"route":{"provider":"mock","model":"mock"},"system":"title","messages":[{"id":"title-request","role":"user","content":[{"type":"text","text":"[{\"seq\":6,\"text\":\"question\"}]"}],"source":{"kind":"plugin","plugin":"dsh-session-title-llm"}}],"maxTokens":20}}
{"type":"command/run","seq":11,"time":12,"data":{"commandId":"without-source","name":"inspect","source":{"kind":"user"}}}
{"type":"command/done","seq":12,"time":13,"data":{"commandId":"without-source","kind":"success"}}
{"type":"command/run","seq":13,"time":14,"data":{"commandId":"with-source","name":"inspect","source":{"kind":"user"}}}
{"type":"command/done","seq":14,"time":15,"data":{"commandId":"with-source","kind":"success","sourceEventSeq":8}}
{"type":"turn/end","seq":15,"time":16,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			check: func(t *testing.T, out []event.Event) {
				byType := map[string][]string{}
				for _, e := range out {
					byType[e.Type] = append(byType[e.Type], string(e.Data))
				}
				if len(out) != 14 || string(out[2].SurfaceOp) != `{"op":"replace","start":1,"end":1}` || out[2].SourceEventSeqs[0] != 1 {
					t.Errorf("replace: %s", render(t, out))
				}
				for typ, want := range map[string]string{
					"compaction/prune":          `{"shadowedRange":{"start":2,"end":2},"shadowedSeqs":[2],"shadowedTokenCount":1}`,
					"session/title":             `{"title":"Question","messageSeqs":[1],"source":{"kind":"fallback"}}`,
					"session/title-llm-request": `"messageSeqs":[4],`, // remapped; the prompt text keeps "seq":6
				} {
					if got := strings.Join(byType[typ], ""); !strings.Contains(got, want) {
						t.Errorf("%s = %s, want %s", typ, got, want)
					}
				}
				if got := strings.Join(byType["session/title-llm-request"], ""); !strings.Contains(got, `\"seq\":6`) {
					t.Errorf("title request prompt text changed: %s", got)
				}
				if got := byType["command/done"]; len(got) != 2 || got[0] != `{"commandId":"without-source","kind":"success"}` || got[1] != `{"commandId":"with-source","kind":"success","sourceEventSeq":6}` {
					t.Errorf("command/done = %v", got)
				}
			},
		},
		{
			name: "a finish then more chunks in one step: two attempts",
			sess: unseeded("streaming"),
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"first"}}}
{"type":"assistant/chunk","seq":3,"time":4,"data":{"turn":1,"step":1,"chunk":` + finishStop + `}}
{"type":"assistant/chunk","seq":4,"time":5,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"second"}}}
{"type":"step/end","seq":5,"time":6,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":6,"time":7,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			check: func(t *testing.T, out []event.Event) { attempts(t, out, 2) },
		},
		{
			name: "attempt delimiters stay within their turns",
			sess: unseeded("v1-two-turn-attempts"),
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"code":"UNKNOWN","message":"failed"}}}}}
{"type":"step/end","seq":3,"time":4,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":4,"time":5,"data":{"turn":1,"reason":{"kind":"error","error":{"code":"UNKNOWN","message":"failed"}}}}
{"type":"turn/start","seq":5,"time":6,"data":{"turn":2}}
{"type":"step/start","seq":6,"time":7,"data":{"turn":2,"step":1}}
{"type":"assistant/chunk","seq":7,"time":8,"data":{"turn":2,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"code":"UNKNOWN","message":"failed"}}}}}
{"type":"step/end","seq":8,"time":9,"data":{"turn":2,"step":1}}
{"type":"turn/end","seq":9,"time":10,"data":{"turn":2,"reason":{"kind":"error","error":{"code":"UNKNOWN","message":"failed"}}}}`,
			check: func(t *testing.T, out []event.Event) { attempts(t, out, 2) },
		},
		{
			name: "tool-call deltas of one call coalesce; another step is another attempt",
			sess: unseeded("tool"),
			in: `{"type":"assistant/chunk","seq":0,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"call","name":"read","argumentsDelta":"{"}}}
{"type":"assistant/chunk","seq":1,"time":2,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"call","name":"read","argumentsDelta":"}"}}}
{"type":"assistant/chunk","seq":2,"time":3,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"call","name":"read","argumentsDelta":"!"}}}
{"type":"assistant/chunk","seq":3,"time":4,"data":{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"b"}}}`,
			want: `{"type":"assistant/attempt","seq":0,"time":3,"data":{"turn":1,"step":1,"stream":[{"type":"tool-call-chunks","time0":1,"index":0,"dt":[1,1],"id":"call","name":"read","args":["{","}","!"]}]}}
{"type":"assistant/attempt","seq":1,"time":4,"data":{"turn":1,"step":2,"stream":[{"type":"text-chunks","time0":4,"index":0,"dt":[],"texts":["b"]}]}}`,
		},
		{
			name: "a delta of another index, or after an unsafe gap, starts a record",
			sess: unseeded("records"),
			in: `{"type":"assistant/chunk","seq":0,"time":-9007199254740991,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}}
{"type":"assistant/chunk","seq":1,"time":9007199254740991,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}}
{"type":"assistant/chunk","seq":2,"time":9007199254740991,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":1,"text":"c"}}}
{"type":"assistant/chunk","seq":3,"time":9007199254740991,"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"x"}}}`,
			want: `{"type":"assistant/attempt","seq":0,"time":9007199254740991,"data":{"turn":1,"step":1,"stream":[{"type":"text-chunks","time0":-9007199254740991,"index":0,"dt":[],"texts":["a"]},{"type":"text-chunks","time0":9007199254740991,"index":0,"dt":[],"texts":["b"]},{"type":"text-chunks","time0":9007199254740991,"index":1,"dt":[],"texts":["c"]},{"type":"chunk","time":9007199254740991,"chunk":{"type":"tool-call-delta","index":0,"id":"","argumentsDelta":"x"}}]}}`,
		},
		{
			name: "an inherited delivery marker of the parent passes",
			sess: LegacySession{ID: "child", CreatedAt: 1, ParentSession: "parent", IsSeeded: true, Inherited: 2},
			in: `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"x"}}
{"type":"session-log-deepseek/delivery-accepted","seq":1,"time":2,"data":{"sessionId":"parent","throughSeq":0,"sessionFormatVersion":1}}`,
			want: `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"x"}}
{"type":"session-log-deepseek/delivery-accepted","seq":1,"time":2,"data":{"sessionId":"parent","throughSeq":0,"sessionFormatVersion":1}}
{"type":"session/end-seed","seq":2,"time":2,"data":{"inherited":true}}`,
			cut: 2,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := logOf(t, c.in)
			before := render(t, in)
			out, cut, err := MigrateV1ToV2(c.sess, in)
			if err != nil {
				t.Fatal(err)
			}
			if render(t, in) != before {
				t.Fatal("input modified")
			}
			for i, e := range out {
				if e.Seq != uint64(i) {
					t.Fatalf("event %d has seq %d", i, e.Seq)
				}
			}
			if cut != c.cut {
				t.Errorf("cut = %d, want %d", cut, c.cut)
			}
			if c.want != "" {
				if got, want := render(t, out), render(t, logOf(t, c.want)); got != want {
					t.Errorf("migrated:\n%s\nwant\n%s", got, want)
				}
			}
			if c.check != nil {
				c.check(t, out)
			}
		})
	}
}

func attempts(t *testing.T, out []event.Event, want int) {
	t.Helper()
	n := 0
	for _, e := range out {
		if e.Type == "assistant/attempt" {
			n++
		}
	}
	if n != want {
		t.Errorf("%d assistant/attempt events, want %d:\n%s", n, want, render(t, out))
	}
}

// The refusals of the reference's v1-to-v2 spec.
func TestMigrateV1ToV2Refusals(t *testing.T) {
	chunk := func(seq, text string) string {
		c := `{"type":"text-delta","index":0,"text":"` + text + `"}`
		if text == "" {
			c = finishStop
		}
		return `{"type":"assistant/chunk","seq":` + seq + `,"time":` + seq + `,"data":{"turn":1,"step":1,"chunk":` + c + `}}`
	}
	message := func(seq, sources string) string {
		s := ""
		if sources != "" {
			s = `,"sourceEventSeqs":` + sources
		}
		return `{"type":"assistant/message","seq":` + seq + `,"time":` + seq + `,"data":{"turn":1,"step":1,"message":` + refMessage + `}` + s + `,"surfaceOp":"append"}`
	}
	head := `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
`
	seeded := func(cut uint64) LegacySession {
		return LegacySession{ID: "s", CreatedAt: 1, ParentSession: "parent", IsSeeded: true, Inherited: cut}
	}
	for _, c := range []struct {
		name string
		sess LegacySession
		in   string
		want string // regexp of the error
		kind error
	}{
		{"a message not citing its pending attempt", unseeded("s"), chunk("0", "partial") + "\n" + message("1", ""), `assistant/message 1 does not cite its complete v1 chunk attempt`, ErrMigration},
		{"a message citing itself", unseeded("s"), chunk("0", "partial") + "\n" + message("1", "[1]"), `complete ordered attempt`, ErrMigration},
		{"a message citing part of its attempt", unseeded("s"), head + chunk("2", "hello") + "\n" + chunk("3", "") + "\n" + message("4", "[2]"), `complete ordered attempt`, ErrMigration},
		{"a message citing its attempt out of order", unseeded("s"), head + chunk("2", "hello") + "\n" + chunk("3", "") + "\n" + message("4", "[3,2]"), `complete ordered attempt`, ErrMigration},
		{"an unknown type", unseeded("s"), `{"type":"external/unknown","seq":0,"time":1,"data":{}}`, `unknown event type "external/unknown" at seq 0`, event.ErrUnsupported},
		{"an unknown type marked ignorable", unseeded("s"), `{"type":"external/info","seq":0,"time":100,"data":{"text":"unknown"},"ignorable":true}`, `format v1 contains unknown event type "external/info" at seq 0`, event.ErrUnsupported},
		{"a released type with a member it did not have", unseeded("s"), `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"postReleaseMember":true}}`, `unexpected member "postReleaseMember"`, ErrMigration},
		{"a chunk without data", unseeded("s"), `{"type":"assistant/chunk","seq":0,"time":1}`, `lacks required member data`, ErrMigration},
		{"an inherited cut splitting an attempt", seeded(1), chunk("0", "partial") + "\n" + message("1", "[0]"), `inherited Session cut 1 splits one Assistant attempt`, ErrMigration},
		{"a cut between members of one interleaved stream", seeded(3), head + chunk("2", "hello") + "\n" + `{"type":"session/end-seed","seq":3,"time":4,"data":{}}` + "\n" + chunk("4", "") + "\n" + message("5", "[2,4]"), `cut 3 splits one Assistant attempt`, ErrMigration},
		{"a cut between a complete stream and its message", seeded(4), head + chunk("2", "hello") + "\n" + chunk("3", "") + "\n" + `{"type":"session/end-seed","seq":4,"time":5,"data":{}}` + "\n" + message("5", "[2,3]"), `cut 4 splits one Assistant attempt`, ErrMigration},
		{"a reference to a consumed chunk", unseeded("s"), head + chunk("2", "partial") + "\n" + `{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"code":"UNKNOWN","message":"failed"}}}}}
{"type":"step/end","seq":4,"time":121,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":5,"time":122,"data":{"turn":1,"reason":{"kind":"error","error":{"code":"UNKNOWN","message":"failed"}}}}
{"type":"command/run","seq":6,"time":123,"data":{"commandId":"command-1","name":"inspect","source":{"kind":"user"}}}
{"type":"command/done","seq":7,"time":124,"data":{"commandId":"command-1","kind":"success","sourceEventSeq":3}}`, `command/done 7 sourceEventSeq targets consumed assistant/chunk 3`, ErrMigration},
		{"a turn/start inside an open turn (empty next-turn splice)", unseeded("s"), `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"step/end","seq":2,"time":3,"data":{"turn":1,"step":1}}
{"type":"agent/inbox/spliced","seq":3,"time":4,"data":{"target":"next-turn","start":0,"inserted":[]}}
{"type":"turn/start","seq":4,"time":5,"data":{"turn":2}}`, `turn/start 2 does not close the prior turn`, ErrMigration},
		{"a delivery marker naming another session", unseeded("child"), `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"x"}}
{"type":"session-log-deepseek/delivery-accepted","seq":1,"time":2,"data":{"sessionId":"other","throughSeq":0,"sessionFormatVersion":1}}`, `delivery marker names the wrong Session`, ErrMigration},
		{"a seedLength past the log", seeded(2), `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"x"}}`, `inherited count 2 exceeds the session's 1 events`, ErrMigration},
		{"a seq gap", unseeded("s"), `{"type":"feedback/record","seq":1,"time":1,"data":{"text":"x"}}`, `seq 1 at position 0`, ErrSequence},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := MigrateV1ToV2(c.sess, logOf(t, c.in))
			if err == nil || !errors.Is(err, c.kind) || !regexp.MustCompile(c.want).MatchString(err.Error()) {
				t.Fatalf("err = %v, want %q (%v)", err, c.want, c.kind)
			}
		})
	}
}

// MigrateV1 runs v1 → v2 → v3: a seeded session's marker follows both
// moves (the inherited attempt collapses; the v3 system head goes after
// the first step/start, inside the inherited part).
func TestMigrateV1(t *testing.T) {
	sess := LegacySession{ID: "v1-seeded", CreatedAt: 1, ParentSession: "parent", IsSeeded: true, Inherited: 7}
	in := logOf(t, `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":`+finishStop+`}}
{"type":"assistant/message","seq":4,"time":121,"data":{"turn":1,"step":1,"message":`+refMessage+`},"sourceEventSeqs":[2,3],"surfaceOp":"append"}
{"type":"step/end","seq":5,"time":122,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":6,"time":123,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"session/end-seed","seq":7,"time":124,"data":{}}
{"type":"turn/start","seq":8,"time":125,"data":{"turn":2}}`)
	out, cut, err := MigrateV1(sess, in)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range out {
		types = append(types, e.Type)
	}
	want := "turn/start step/start system/message assistant/message step/end turn/end session/end-seed turn/start"
	if strings.Join(types, " ") != want || cut != 6 || !isTaggedMarker(&out[6]) {
		t.Fatalf("MigrateV1 = %v, cut %d", types, cut)
	}
	if st, err := Fold(out); err != nil || !st.Balanced() && st.Phase != InTurn {
		t.Errorf("Fold(migrated) = %+v, %v", st, err)
	}
	if _, _, err := MigrateV1(unseeded("s"), logOf(t, `{"type":"x/y","seq":0,"time":1,"data":{}}`)); !errors.Is(err, event.ErrUnsupported) {
		t.Errorf("unknown type: %v", err)
	}
}

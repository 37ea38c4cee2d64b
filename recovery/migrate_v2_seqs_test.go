package recovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
)

// The reference's v2-to-v3 edge (knyazev741/deepseek-harness at 1376315f,
// packages/session/session-format-v2-to-v3/src/references.ts, remapEvent)
// maps, besides sourceEventSeqs and a replace span, the seqs a few event
// types carry in their data, each through the same source → target table
// (a seq up to the first step/start stays, a later one moves past the
// inserted head):
//
//   - command/done: sourceEventSeq, when present;
//   - compaction/summary and compaction/prune: shadowedRange's start and
//     end (its other members kept) and shadowedSeqs, both required;
//   - session/title and session/title-llm-request: messageSeqs, required.
//
// Every such seq must be a count naming an earlier source event, or the
// log is refused. Nothing else is a seq of the session: delivery
// watermarks (throughSeq), session-reference captures (capturedThroughSeq),
// workflow-local seq, numbers in model input and tool JSON stay as they
// are.
//
// The cases below restate the reference's own tests that involve data
// seqs (tests/migration.spec.ts, structural-regressions.spec.ts,
// combined-migration.spec.ts); their request/header events carry no
// header.system, so the one head is all the reference inserts (prompts:
// TestMigrateV2SystemPrompts).

const (
	mockRequest = `{"header":{"config":{"provider":"mock","model":"mock"}},"reason":"initial"}`
	ptcDispatch = `{"rootCallId":"root","parentCallId":"root","subCallId":"child","name":"read","arguments":{"path":"x"}}`
	ptcSettle   = `{"rootCallId":"root","parentCallId":"root","subCallId":"child","name":"read","arguments":{"path":"x"},"isError":false,"content":[{"type":"text","text":"ok"}]}`
)

func v2User(id string) string {
	return `{"id":"` + id + `","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"` + id + `"}]}`
}

// withoutHead checks that out has the head right after the first
// step/start (at its index at) and returns out without it.
func withoutHead(t *testing.T, out []event.Event, at int) []event.Event {
	t.Helper()
	if len(out) <= at+1 || out[at].Type != TypeStepStart || out[at+1].Type != TypeSystemMessage {
		t.Fatalf("no system head after the step/start at %d", at)
	}
	return append(append([]event.Event(nil), out[:at+1]...), out[at+2:]...)
}

func TestMigrateV2DataSeqs(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		at   int    // the first step/start, -1 for none
		want string // the migrated log without the head
	}{
		{
			// migration.spec: "remaps exact local ranges and lists without
			// putting the head inside compaction".
			name: "ranges and lists",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":42,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":42,"data":` + mockRequest + `}
{"type":"user/message","seq":4,"time":42,"data":` + v2User("b") + `,"surfaceOp":"append"}
{"type":"compaction/prune","seq":5,"time":42,"data":{"shadowedRange":{"start":2,"end":4},"shadowedSeqs":[2,4],"shadowedTokenCount":20}}
{"type":"user/message","seq":6,"time":42,"data":` + v2User("replacement") + `,"sourceEventSeqs":[2,4],"surfaceOp":{"op":"replace","start":2,"end":4}}
{"type":"command/run","seq":7,"time":42,"data":{"commandId":"c","name":"x","source":{"kind":"user"}}}
{"type":"command/done","seq":8,"time":42,"data":{"commandId":"c","kind":"success","sourceEventSeq":6}}
{"type":"session/title","seq":9,"time":42,"data":{"title":"title","messageSeqs":[2,4],"source":{"kind":"fallback"}}}`,
			want: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":42,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"request/header","seq":4,"time":42,"data":` + mockRequest + `}
{"type":"user/message","seq":5,"time":42,"data":` + v2User("b") + `,"surfaceOp":"append"}
{"type":"compaction/prune","seq":6,"time":42,"data":{"shadowedRange":{"start":3,"end":5},"shadowedSeqs":[3,5],"shadowedTokenCount":20}}
{"type":"user/message","seq":7,"time":42,"data":` + v2User("replacement") + `,"sourceEventSeqs":[3,5],"surfaceOp":{"op":"replace","startSeq":3,"endSeq":5}}
{"type":"command/run","seq":8,"time":42,"data":{"commandId":"c","name":"x","source":{"kind":"user"}}}
{"type":"command/done","seq":9,"time":42,"data":{"commandId":"c","kind":"success","sourceEventSeq":7}}
{"type":"session/title","seq":10,"time":42,"data":{"title":"title","messageSeqs":[3,5],"source":{"kind":"fallback"}}}`,
		},
		{
			// structural-regressions.spec: "remaps references on both sides of
			// a prompt insertion without reinterpreting same-Session captures
			// or framed title input".
			name: "same-session capture and framed title input kept",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":-100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":-93,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":-86,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":-79,"data":` + mockRequest + `}
{"type":"user/message","seq":4,"time":-72,"data":` + v2User("b") + `,"surfaceOp":"append"}
{"type":"user/message","seq":5,"time":-65,"data":{"id":"capture","role":"user","source":{"kind":"session-reference","form":"recall","version":1,"references":[{"sessionId":"v2seqs","label":"same-session","capturedThroughSeq":2,"capturedFormatVersion":2,"compacted":false,"originalMessages":1,"retainedMessages":1,"omittedMessages":0,"omittedBytes":0,"truncated":false,"inputIndex":0}]},"content":[{"type":"text","text":"capture"}]},"sourceEventSeqs":[2,4],"surfaceOp":"append"}
{"type":"command/run","seq":6,"time":-58,"data":{"commandId":"command","name":"recall","source":{"kind":"user"}}}
{"type":"command/done","seq":7,"time":-51,"data":{"commandId":"command","kind":"success","sourceEventSeq":5}}
{"type":"session/title","seq":8,"time":-44,"data":{"title":"title","messageSeqs":[2,4],"source":{"kind":"fallback"}}}
{"type":"session/title-llm-request","seq":9,"time":-37,"data":{"titleProvider":"mock","messageSeqs":[2,4],"route":{"provider":"mock","model":"mock"},"system":"title prompt","messages":[{"id":"title-input","role":"user","source":{"kind":"plugin","plugin":"dsh-session-title-llm"},"content":[{"type":"text","text":"Generate the session title from this JSON array of human messages:\n[{\"seq\":2,\"text\":\"a\"},{\"seq\":4,\"text\":\"b\"}]"}]}],"maxTokens":20}}`,
			want: `{"type":"turn/start","seq":0,"time":-100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":-93,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":-86,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"request/header","seq":4,"time":-79,"data":` + mockRequest + `}
{"type":"user/message","seq":5,"time":-72,"data":` + v2User("b") + `,"surfaceOp":"append"}
{"type":"user/message","seq":6,"time":-65,"data":{"id":"capture","role":"user","source":{"kind":"session-reference","form":"recall","version":1,"references":[{"sessionId":"v2seqs","label":"same-session","capturedThroughSeq":2,"capturedFormatVersion":2,"compacted":false,"originalMessages":1,"retainedMessages":1,"omittedMessages":0,"omittedBytes":0,"truncated":false,"inputIndex":0}]},"content":[{"type":"text","text":"capture"}]},"sourceEventSeqs":[3,5],"surfaceOp":"append"}
{"type":"command/run","seq":7,"time":-58,"data":{"commandId":"command","name":"recall","source":{"kind":"user"}}}
{"type":"command/done","seq":8,"time":-51,"data":{"commandId":"command","kind":"success","sourceEventSeq":6}}
{"type":"session/title","seq":9,"time":-44,"data":{"title":"title","messageSeqs":[3,5],"source":{"kind":"fallback"}}}
{"type":"session/title-llm-request","seq":10,"time":-37,"data":{"titleProvider":"mock","messageSeqs":[3,5],"route":{"provider":"mock","model":"mock"},"system":"title prompt","messages":[{"id":"title-input","role":"user","source":{"kind":"plugin","plugin":"dsh-session-title-llm"},"content":[{"type":"text","text":"Generate the session title from this JSON array of human messages:\n[{\"seq\":2,\"text\":\"a\"},{\"seq\":4,\"text\":\"b\"}]"}]}],"maxTokens":20}}`,
		},
		{
			// migration.spec: "preserves other-session captures,
			// workflow-local seq, and model input containing source numbers".
			name: "other-session capture, workflow seq, model input kept",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":42,"data":{"role":"user","id":"user","source":{"kind":"session-reference","form":"recall","version":1,"references":[{"sessionId":"other","label":"other","capturedThroughSeq":99,"capturedFormatVersion":2,"compacted":false,"originalMessages":1,"retainedMessages":1,"omittedMessages":0,"omittedBytes":0,"truncated":false,"inputIndex":0}]},"content":[{"type":"text","text":"user"}]},"surfaceOp":"append"}
{"type":"tool-workflow/agent-start","seq":3,"time":42,"data":{"runId":"run","seq":99,"label":"child","childId":"other"}}
{"type":"user/message","seq":4,"time":42,"data":` + v2User("human") + `,"surfaceOp":"append"}
{"type":"session/title-llm-request","seq":5,"time":42,"data":{"titleProvider":"mock","messageSeqs":[4],"route":{"provider":"mock","model":"mock"},"system":"title system","messages":[{"role":"user","id":"title","source":{"kind":"plugin","plugin":"dsh-session-title-llm"},"content":[{"type":"text","text":"source seq=4 (preserved model input)"}]}],"maxTokens":20}}`,
			want: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":42,"data":{"role":"user","id":"user","source":{"kind":"session-reference","form":"recall","version":1,"references":[{"sessionId":"other","label":"other","capturedThroughSeq":99,"capturedFormatVersion":2,"compacted":false,"originalMessages":1,"retainedMessages":1,"omittedMessages":0,"omittedBytes":0,"truncated":false,"inputIndex":0}]},"content":[{"type":"text","text":"user"}]},"surfaceOp":"append"}
{"type":"tool-workflow/agent-start","seq":4,"time":42,"data":{"runId":"run","seq":99,"label":"child","childId":"other"}}
{"type":"user/message","seq":5,"time":42,"data":` + v2User("human") + `,"surfaceOp":"append"}
{"type":"session/title-llm-request","seq":6,"time":42,"data":{"titleProvider":"mock","messageSeqs":[5],"route":{"provider":"mock","model":"mock"},"system":"title system","messages":[{"role":"user","id":"title","source":{"kind":"plugin","plugin":"dsh-session-title-llm"},"content":[{"type":"text","text":"source seq=4 (preserved model input)"}]}],"maxTokens":20}}`,
		},
		{
			// combined-migration.spec: the prune and the replacement of the
			// first message, behind nested tool dispatches.
			name: "prune and replacement behind dispatches",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":3,"data":` + v2User("m") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":4,"data":` + mockRequest + `}
{"type":"tool/code-dispatch-start","seq":4,"time":5,"data":` + ptcDispatch + `}
{"type":"tool/code-dispatch","seq":5,"time":6,"data":` + ptcSettle + `}
{"type":"compaction/prune","seq":6,"time":7,"data":{"shadowedRange":{"start":2,"end":2},"shadowedSeqs":[2],"shadowedTokenCount":17}}
{"type":"user/message","seq":7,"time":8,"data":` + v2User("m2") + `,"sourceEventSeqs":[2],"surfaceOp":{"op":"replace","start":2,"end":2}}
{"type":"step/end","seq":8,"time":9,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":9,"time":10,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			want: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":3,"data":` + v2User("m") + `,"surfaceOp":"append"}
{"type":"request/header","seq":4,"time":4,"data":` + mockRequest + `}
{"type":"tool/ptc-dispatch-start","seq":5,"time":5,"data":` + ptcDispatch + `}
{"type":"tool/ptc-dispatch","seq":6,"time":6,"data":` + ptcSettle + `}
{"type":"compaction/prune","seq":7,"time":7,"data":{"shadowedRange":{"start":3,"end":3},"shadowedSeqs":[3],"shadowedTokenCount":17}}
{"type":"user/message","seq":8,"time":8,"data":` + v2User("m2") + `,"sourceEventSeqs":[3],"surfaceOp":{"op":"replace","startSeq":3,"endSeq":3}}
{"type":"step/end","seq":9,"time":9,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":10,"time":10,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
		},
		{
			// migration.spec, composed PTC migration: command/done cites the
			// dispatch settlement; the replacement cites it too.
			name: "command/done citing a dispatch",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":42,"data":` + v2User("m") + `,"surfaceOp":"append"}
{"type":"request/header","seq":3,"time":42,"data":` + mockRequest + `}
{"type":"tool/code-dispatch-start","seq":4,"time":42,"data":` + ptcDispatch + `}
{"type":"tool/code-dispatch","seq":5,"time":42,"data":` + ptcSettle + `}
{"type":"command/run","seq":6,"time":42,"data":{"commandId":"cmd","name":"test","source":{"kind":"user"}}}
{"type":"command/done","seq":7,"time":42,"data":{"commandId":"cmd","kind":"success","sourceEventSeq":5}}
{"type":"user/message","seq":8,"time":42,"data":` + v2User("m2") + `,"sourceEventSeqs":[2,5],"surfaceOp":{"op":"replace","start":2,"end":2}}`,
			want: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":42,"data":` + v2User("m") + `,"surfaceOp":"append"}
{"type":"request/header","seq":4,"time":42,"data":` + mockRequest + `}
{"type":"tool/ptc-dispatch-start","seq":5,"time":42,"data":` + ptcDispatch + `}
{"type":"tool/ptc-dispatch","seq":6,"time":42,"data":` + ptcSettle + `}
{"type":"command/run","seq":7,"time":42,"data":{"commandId":"cmd","name":"test","source":{"kind":"user"}}}
{"type":"command/done","seq":8,"time":42,"data":{"commandId":"cmd","kind":"success","sourceEventSeq":6}}
{"type":"user/message","seq":9,"time":42,"data":` + v2User("m2") + `,"sourceEventSeqs":[3,6],"surfaceOp":{"op":"replace","startSeq":3,"endSeq":3}}`,
		},
		{
			// migration.spec: "preserves delivery generation coordinates":
			// throughSeq names the other generation's seqs.
			name: "delivery watermark kept",
			at:   1,
			in: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":42,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"session-log-deepseek/delivery-accepted","seq":3,"time":42,"data":{"sessionId":"v2seqs","throughSeq":2,"sessionFormatVersion":2}}`,
			want: `{"type":"turn/start","seq":0,"time":42,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":42,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":42,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"session-log-deepseek/delivery-accepted","seq":4,"time":42,"data":{"sessionId":"v2seqs","throughSeq":2,"sessionFormatVersion":2}}`,
		},
		{
			// references.ts edges: a seq up to the step/start stays, a range
			// from the step/start across the head grows by one at its end,
			// the range's other members stay where they are, a command/done
			// without sourceEventSeq is left alone.
			name: "seqs at and before the step/start, straddling range, absent field",
			at:   2,
			in: `{"type":"feedback/record","seq":0,"time":5,"data":{"text":"before"}}
{"type":"turn/start","seq":1,"time":6,"data":{"turn":1}}
{"type":"step/start","seq":2,"time":7,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":3,"time":8,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"compaction/summary","seq":4,"time":9,"data":{"compactionId":"k","summary":[],"shadowedRange":{"end":3,"unit":"seq","start":2},"shadowedSeqs":[0,2,3],"shadowedTokenCount":3,"provider":"p","model":"m"}}
{"type":"session/title","seq":5,"time":10,"data":{"title":"t","messageSeqs":[1,3,2],"source":{"kind":"fallback"}}}
{"type":"command/done","seq":6,"time":11,"data":{"commandId":"c","kind":"success","sourceEventSeq":0}}
{"type":"command/done","seq":7,"time":12,"data":{"commandId":"d","kind":"failure"}}`,
			want: `{"type":"feedback/record","seq":0,"time":5,"data":{"text":"before"}}
{"type":"turn/start","seq":1,"time":6,"data":{"turn":1}}
{"type":"step/start","seq":2,"time":7,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":4,"time":8,"data":` + v2User("a") + `,"surfaceOp":"append"}
{"type":"compaction/summary","seq":5,"time":9,"data":{"compactionId":"k","summary":[],"shadowedRange":{"end":4,"unit":"seq","start":2},"shadowedSeqs":[0,2,4],"shadowedTokenCount":3,"provider":"p","model":"m"}}
{"type":"session/title","seq":6,"time":10,"data":{"title":"t","messageSeqs":[1,4,2],"source":{"kind":"fallback"}}}
{"type":"command/done","seq":7,"time":11,"data":{"commandId":"c","kind":"success","sourceEventSeq":0}}
{"type":"command/done","seq":8,"time":12,"data":{"commandId":"d","kind":"failure"}}`,
		},
		{
			// No step/start: no head, nothing moves.
			name: "no step",
			at:   -1,
			in: `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"a"}}
{"type":"command/done","seq":1,"time":2,"data":{"commandId":"c","kind":"success","sourceEventSeq":0}}`,
			want: `{"type":"feedback/record","seq":0,"time":1,"data":{"text":"a"}}
{"type":"command/done","seq":1,"time":2,"data":{"commandId":"c","kind":"success","sourceEventSeq":0}}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := logOf(t, c.in)
			before := render(t, in)
			out, err := MigrateV2("v2seqs", in)
			if err != nil {
				t.Fatal(err)
			}
			if render(t, in) != before {
				t.Fatal("input modified")
			}
			if c.at >= 0 {
				out = withoutHead(t, out, c.at)
			}
			if got, want := render(t, out), render(t, logOf(t, c.want)); got != want {
				t.Errorf("migrated (without the head):\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// Data is left byte for byte as it was where no seq in it moves, and
// where one does only the members holding seqs are rewritten (in place,
// the others keep their order and text).
func TestMigrateV2DataBytes(t *testing.T) {
	in := logOf(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":3,"data":`+v2User("a")+`,"surfaceOp":"append"}
{"type":"session/title","seq":3,"time":4,"data":{ "title" : "t\u00e9 <b>",  "messageSeqs" : [ 0 , 1 ], "source":{"kind":"fallback"} }}
{"type":"command/done","seq":4,"time":5,"data":{"commandId":"c",  "kind":"success"}}
{"type":"tool-workflow/agent-start","seq":5,"time":6,"data":{"runId":"r", "seq": 3, "label":"l","childId":"c"}}
{"type":"session/title","seq":6,"time":7,"data":{"source":{"kind" : "fallback"},"messageSeqs":[2,0],"title":"t\u00e9 <b>"}}`)
	out, err := MigrateV2("v2seqs", in)
	if err != nil {
		t.Fatal(err)
	}
	out = withoutHead(t, out, 1)
	for i := 0; i < 6; i++ {
		if string(out[i].Data) != string(in[i].Data) {
			t.Errorf("event %d (%s) data %s, want it unchanged: %s", i, in[i].Type, out[i].Data, in[i].Data)
		}
	}
	if got, want := string(out[6].Data), `{"source":{"kind" : "fallback"},"messageSeqs":[3,0],"title":"t\u00e9 <b>"}`; got != want {
		t.Errorf("session/title data %s, want %s", got, want)
	}
}

// A data seq the reference cannot map refuses the log (references.ts: a
// count naming an earlier source event; the list and range members are
// required where it reads them unconditionally).
func TestMigrateV2DataSeqRefusals(t *testing.T) {
	const head = `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":2,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":3,"data":{"id":"a","role":"user","source":{"kind":"user"},"content":[]},"surfaceOp":"append"}
`
	for _, c := range []struct {
		typ, data, reason string
	}{
		{"session/title", `{"title":"t","messageSeqs":[3],"source":{"kind":"fallback"}}`, "messageSeqs 3 does not name an earlier event"},
		{"session/title", `{"title":"t","messageSeqs":[2,9],"source":{"kind":"fallback"}}`, "messageSeqs 9 does not name an earlier event"},
		{"session/title", `{"title":"t","source":{"kind":"fallback"}}`, "session/title data lacks required field messageSeqs"}, // the v2 admission, before the remap
		{"session/title-llm-request", `{"titleProvider":"mock","messageSeqs":2}`, "session/title-llm-request data lacks required field route"},
		{"session/title-llm-request", `{"titleProvider":"mock","messageSeqs":2,"route":{},"system":"","messages":[],"maxTokens":1}`, "messageSeqs 2 must be an array"},
		{"session/title", `"t"`, "data must be an object"},
		{"command/done", `{"commandId":"c","kind":"success","sourceEventSeq":-1}`, "sourceEventSeq -1 is not a seq"},
		{"command/done", `{"commandId":"c","kind":"success","sourceEventSeq":"2"}`, `sourceEventSeq "2" is not a seq`},
		{"command/done", `{"commandId":"c","kind":"success","sourceEventSeq":1.5}`, "sourceEventSeq 1.5 is not a seq"},
		{"command/done", `{"commandId":"c","kind":"success","sourceEventSeq":null}`, "sourceEventSeq null is not a seq"},
		{"compaction/prune", `{"shadowedRange":{"start":2,"end":2},"shadowedTokenCount":1}`, "compaction/prune data lacks required field shadowedSeqs"},
		{"compaction/prune", `{"shadowedRange":{"start":2,"end":2},"shadowedSeqs":{},"shadowedTokenCount":1}`, "shadowedSeqs {} must be an array"},
		{"compaction/prune", `{"shadowedSeqs":[2],"shadowedTokenCount":1}`, "compaction/prune data lacks required field shadowedRange"},
		{"compaction/prune", `{"shadowedRange":7,"shadowedSeqs":[2],"shadowedTokenCount":1}`, "shadowedRange 7 must be an object"},
		{"compaction/summary", `{"shadowedRange":{"start":2},"shadowedSeqs":[2]}`, "compaction/summary data lacks required field compactionId"},
		{"compaction/summary", `{"compactionId":"c","summary":[],"shadowedRange":{"start":2},"shadowedSeqs":[2],"shadowedTokenCount":1,"provider":"p","model":"m"}`, "shadowedRange end undefined is not a seq"},
		{"compaction/prune", `{"shadowedRange":{"start":2,"end":4},"shadowedSeqs":[2],"shadowedTokenCount":1}`, "shadowedRange end 4 does not name an earlier event"},
	} {
		t.Run(c.typ+" "+c.data, func(t *testing.T) {
			in := logOf(t, head+`{"type":"`+c.typ+`","seq":3,"time":4,"data":`+c.data+`}`)
			out, err := MigrateV2("v2seqs", in)
			var me *MigrationError
			if !errors.As(err, &me) || !errors.Is(err, ErrMigration) || me.From != 2 || me.Seq != 3 || me.Type != c.typ || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("MigrateV2 = %d events, %v; want a v2 *MigrationError at seq 3 saying %q", len(out), err, c.reason)
			}
			if out != nil {
				t.Error("a refused migration returned events")
			}
		})
	}
	// The same rules hold in a log with no step/start (no head, no move).
	if _, err := MigrateV2("s", logOf(t, `{"type":"session/title","seq":0,"time":1,"data":{"title":"t","messageSeqs":[0],"source":{"kind":"fallback"}}}`)); !errors.Is(err, ErrMigration) {
		t.Errorf("a title citing itself in a log without a step: %v", err)
	}
}

// MigrateV1 is v1 → v2 → v3: a data seq is mapped by both edges (the
// chunks collapsed into their message, then the head inserted).
func TestMigrateV1DataSeqs(t *testing.T) {
	in := logOf(t, `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":110,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}}
{"type":"assistant/chunk","seq":3,"time":120,"data":{"turn":1,"step":1,"chunk":`+finishStop+`}}
{"type":"assistant/message","seq":4,"time":121,"data":{"turn":1,"step":1,"message":`+refMessage+`},"sourceEventSeqs":[2,3],"surfaceOp":"append"}
{"type":"user/message","seq":5,"time":122,"data":`+refUser+`,"surfaceOp":"append"}
{"type":"compaction/prune","seq":6,"time":123,"data":{"shadowedRange":{"start":4,"end":5},"shadowedSeqs":[4,5],"shadowedTokenCount":9}}
{"type":"user/message","seq":7,"time":124,"data":{"id":"user-2","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}},"sourceEventSeqs":[4,5],"surfaceOp":{"op":"replace","start":4,"end":5}}
{"type":"command/run","seq":8,"time":125,"data":{"commandId":"c","name":"x","source":{"kind":"user"}}}
{"type":"command/done","seq":9,"time":126,"data":{"commandId":"c","kind":"success","sourceEventSeq":7}}
{"type":"session/title","seq":10,"time":127,"data":{"title":"t","messageSeqs":[5],"source":{"kind":"fallback"}}}
{"type":"step/end","seq":11,"time":128,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":12,"time":129,"data":{"turn":1,"reason":{"kind":"completed"}}}`)
	out, _, err := MigrateV1(unseeded("v1-data-seqs"), in)
	if err != nil {
		t.Fatal(err)
	}
	out = withoutHead(t, out, 1)
	want := logOf(t, `{"type":"turn/start","seq":0,"time":100,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":101,"data":{"turn":1,"step":1}}
{"type":"assistant/message","seq":3,"time":121,"data":{"turn":1,"step":1,"message":`+refMessage+`,"stream":[{"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["hello"]},{"type":"chunk","time":120,"chunk":`+finishStop+`}]},"surfaceOp":"append"}
{"type":"user/message","seq":4,"time":122,"data":`+refUser+`,"surfaceOp":"append"}
{"type":"compaction/prune","seq":5,"time":123,"data":{"shadowedRange":{"start":3,"end":4},"shadowedSeqs":[3,4],"shadowedTokenCount":9}}
{"type":"user/message","seq":6,"time":124,"data":{"id":"user-2","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}},"sourceEventSeqs":[3,4],"surfaceOp":{"op":"replace","startSeq":3,"endSeq":4}}
{"type":"command/run","seq":7,"time":125,"data":{"commandId":"c","name":"x","source":{"kind":"user"}}}
{"type":"command/done","seq":8,"time":126,"data":{"commandId":"c","kind":"success","sourceEventSeq":6}}
{"type":"session/title","seq":9,"time":127,"data":{"title":"t","messageSeqs":[4],"source":{"kind":"fallback"}}}
{"type":"step/end","seq":10,"time":128,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":11,"time":129,"data":{"turn":1,"reason":{"kind":"completed"}}}`)
	if got, w := render(t, out), render(t, want); got != w {
		t.Errorf("MigrateV1 (without the head):\n%s\nwant:\n%s", got, w)
	}
}

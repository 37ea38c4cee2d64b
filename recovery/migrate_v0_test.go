package recovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
)

// The cases of the reference's v0-to-v1 legacy spec
// (session-format-v0-to-v1/tests/legacy.spec.ts), restated as logs of a
// session "legacy".
func TestMigrateV0(t *testing.T) {
	sess := unseeded("legacy")
	for _, c := range []struct {
		name, in, want string
	}{
		{
			name: "pre-identity user, assistant and replacement tool-result messages get their ids",
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":2,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}
{"type":"assistant/message","seq":3,"time":4,"data":{"turn":1,"step":1,"content":[{"type":"tool-call","id":"call-1","name":"read","arguments":"{}"}],"provenance":{"provider":"mock","model":"mock"}},"surfaceOp":"append"}
{"type":"tool/call","seq":4,"time":5,"data":{"turn":1,"step":1,"callId":"call-1","name":"read","arguments":"{}"}}
{"type":"tool/result","seq":5,"time":6,"data":{"turn":1,"step":1,"callId":"call-1","content":[{"type":"text","text":"full"}],"isError":false},"sourceEventSeqs":[4],"surfaceOp":"append"}
{"type":"tool/result","seq":6,"time":7,"data":{"turn":1,"step":1,"callId":"call-1","content":[{"type":"text","text":"pruned"}],"isError":false},"sourceEventSeqs":[5],"surfaceOp":{"op":"replace","start":5,"end":5}}
{"type":"step/end","seq":7,"time":8,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":8,"time":9,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
			want: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":2,"data":{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"id":"legacy-message:legacy:1","role":"user"},"surfaceOp":"append"}
{"type":"step/start","seq":2,"time":3,"data":{"turn":1,"step":1}}
{"type":"assistant/message","seq":3,"time":4,"data":{"turn":1,"step":1,"message":{"id":"legacy-message:legacy:3","role":"assistant","content":[{"type":"tool-call","id":"call-1","name":"read","arguments":"{}"}],"source":{"provider":"mock","model":"mock","kind":"model"}}},"surfaceOp":"append"}
{"type":"tool/call","seq":4,"time":5,"data":{"turn":1,"step":1,"callId":"call-1","name":"read","arguments":"{}"}}
{"type":"tool/result","seq":5,"time":6,"data":{"turn":1,"step":1,"message":{"id":"legacy-message:legacy:5","role":"user","content":[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"full"}],"isError":false}],"source":{"kind":"tool","callId":"call-1"}}},"sourceEventSeqs":[4],"surfaceOp":"append"}
{"type":"tool/result","seq":6,"time":7,"data":{"turn":1,"step":1,"message":{"id":"legacy-message:legacy:5","role":"user","content":[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"pruned"}],"isError":false}],"source":{"kind":"tool","callId":"call-1"}}},"sourceEventSeqs":[5],"surfaceOp":{"op":"replace","start":5,"end":5}}
{"type":"step/end","seq":7,"time":8,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":8,"time":9,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
		},
		{
			name: "wrapped and flat steering, turn/start triggers, every old turn ending",
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"steering/message","seq":1,"time":2,"data":{"turn":1,"message":{"id":"wrapped","role":"user","content":[{"type":"text","text":"wrapped"}],"source":{"kind":"user"}}},"surfaceOp":"append"}
{"type":"steering/message","seq":2,"time":3,"data":{"turn":1,"content":[{"type":"text","text":"flat"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"turn/end","seq":3,"time":4,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"turn/start","seq":4,"time":5,"data":{"turn":2,"trigger":{"kind":"retry"}}}
{"type":"turn/end","seq":5,"time":6,"data":{"turn":2,"reason":{"kind":"error","step":1,"failure":{"message":"provider","code":"SERVER"}}}}
{"type":"turn/end","seq":6,"time":8,"data":{"turn":3,"reason":{"kind":"aborted"}}}
{"type":"turn/end","seq":7,"time":10,"data":{"turn":4,"reason":{"kind":"disposed"}}}
{"type":"turn/end","seq":8,"time":12,"data":{"turn":5,"reason":{"kind":"error","step":1,"message":"thrown"}}}
{"type":"turn/end","seq":9,"time":14,"data":{"turn":6,"reason":{"kind":"error","step":0,"failure":{"message":"detailed","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":1000,"requestId":"request-1"}}}}
{"type":"turn/end","seq":10,"time":16,"data":{"turn":7,"reason":{"kind":"error","step":0,"message":"coded","code":"CODED"}}}
{"type":"turn/end","seq":11,"time":17,"data":{"turn":8,"reason":{"kind":"future-reason"}}}`,
			want: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":2,"data":{"id":"wrapped","role":"user","content":[{"type":"text","text":"wrapped"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"user/message","seq":2,"time":3,"data":{"content":[{"type":"text","text":"flat"}],"source":{"kind":"user"},"id":"legacy-message:legacy:2","role":"user"},"surfaceOp":"append"}
{"type":"turn/end","seq":3,"time":4,"data":{"turn":1,"reason":{"kind":"completed"}}}
{"type":"turn/start","seq":4,"time":5,"data":{"turn":2}}
{"type":"turn/end","seq":5,"time":6,"data":{"turn":2,"reason":{"kind":"error","error":{"message":"provider","code":"SERVER"}}}}
{"type":"turn/end","seq":6,"time":8,"data":{"turn":3,"reason":{"kind":"aborted","reason":{"kind":"legacy"}}}}
{"type":"turn/end","seq":7,"time":10,"data":{"turn":4,"reason":{"kind":"aborted","reason":{"kind":"disposed"}}}}
{"type":"turn/end","seq":8,"time":12,"data":{"turn":5,"reason":{"kind":"error","error":{"message":"thrown","code":"UNKNOWN"}}}}
{"type":"turn/end","seq":9,"time":14,"data":{"turn":6,"reason":{"kind":"error","error":{"message":"detailed","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":1000,"requestId":"request-1"}}}}
{"type":"turn/end","seq":10,"time":16,"data":{"turn":7,"reason":{"kind":"error","error":{"message":"coded","code":"CODED"}}}}
{"type":"turn/end","seq":11,"time":17,"data":{"turn":8,"reason":{"kind":"future-reason"}}}`,
		},
		{
			name: "current shapes pass unchanged",
			in: `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":2,"data":{"id":"current","role":"user","content":[{"type":"text","text":"x"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"user"}}}}
{"type":"turn/start","seq":3,"time":4,"data":{"turn":2}}
{"type":"turn/end","seq":4,"time":5,"data":{"turn":2,"reason":{"kind":"error","error":{"message":"x","code":"X"}}}}`,
		},
		{
			name: "request/header loses its messagePrefix",
			in:   `{"type":"request/header","seq":0,"time":2,"data":{"header":{"config":{"provider":"mock","model":"mock"},"messagePrefix":[{"role":"user","content":[{"type":"text","text":"obsolete"}]}]},"reason":"initial"}}`,
			want: `{"type":"request/header","seq":0,"time":2,"data":{"header":{"config":{"provider":"mock","model":"mock"}},"reason":"initial"}}`,
		},
		{
			name: "compact/* renamed, a legacy compaction id carried to its summary, message and end; retry ids per chain",
			in: `{"type":"compact/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"compact/summary","seq":1,"time":2,"data":{"summary":[],"shadowedRange":{"start":0,"end":0},"shadowedSeqs":[0],"shadowedTokenCount":1,"provider":"p","model":"m"}}
{"type":"user/message","seq":2,"time":3,"data":{"id":"c","role":"user","content":[],"source":{"kind":"plugin","plugin":"compact"}},"surfaceOp":"append"}
{"type":"compact/end","seq":3,"time":4,"data":{"turn":1}}
{"type":"llm/retry","seq":4,"time":5,"data":{"turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":1,"delayMs":0,"failure":{}}}
{"type":"llm/retry","seq":5,"time":6,"data":{"turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":2,"delayMs":0,"failure":{}}}`,
			want: `{"type":"compaction/start","seq":0,"time":1,"data":{"turn":1,"compactionId":"legacy-compaction:legacy:0"}}
{"type":"compaction/summary","seq":1,"time":2,"data":{"summary":[],"shadowedRange":{"start":0,"end":0},"shadowedSeqs":[0],"shadowedTokenCount":1,"provider":"p","model":"m","compactionId":"legacy-compaction:legacy:0"}}
{"type":"user/message","seq":2,"time":3,"data":{"id":"c","role":"user","content":[],"source":{"kind":"plugin","plugin":"compact","compactionId":"legacy-compaction:legacy:0"}},"surfaceOp":"append"}
{"type":"compaction/end","seq":3,"time":4,"data":{"turn":1,"compactionId":"legacy-compaction:legacy:0"}}
{"type":"llm/retry","seq":4,"time":5,"data":{"turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":1,"delayMs":0,"failure":{},"retryId":"legacy-retry:legacy:4"}}
{"type":"llm/retry","seq":5,"time":6,"data":{"turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":2,"delayMs":0,"failure":{},"retryId":"legacy-retry:legacy:4"}}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := logOf(t, c.in)
			before := render(t, in)
			out, err := MigrateV0(sess, in)
			if err != nil {
				t.Fatal(err)
			}
			if render(t, in) != before {
				t.Fatal("input modified")
			}
			want := c.want
			if want == "" {
				want = c.in
			}
			if got, w := render(t, out), render(t, logOf(t, want)); got != w {
				t.Errorf("migrated:\n%s\nwant\n%s", got, w)
			}
			// Every v0 log the edge takes is a v1 log the next edge takes
			// (the v2 → v3 edge may still refuse it: a surface before the
			// first step/start).
			if _, _, err := MigrateV1ToV2(sess, out); err != nil {
				t.Errorf("MigrateV1 of the v1 image: %v", err)
			}
		})
	}
}

func TestMigrateV0Refusals(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		kind           error
	}{
		{"turn/start trigger null", `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":null}}`, "malformed pre-react-loop turn/start at seq 0", ErrMigration},
		{"turn/start of turn 0", `{"type":"turn/start","seq":0,"time":1,"data":{"turn":0,"trigger":{"kind":"message"}}}`, "malformed", ErrMigration},
		{"flat steering with an extra member", `{"type":"steering/message","seq":0,"time":1,"data":{"turn":1,"content":[],"source":{"kind":"user"},"extra":true},"surfaceOp":"append"}`, `unexpected member "extra"`, ErrMigration},
		{"steering data null", `{"type":"steering/message","seq":0,"time":1,"data":null,"surfaceOp":"append"}`, "must be an object", ErrMigration},
		{"turn/end reason with an extra member", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"completed","extra":true}}}`, `unexpected member "extra"`, ErrMigration},
		{"turn/end reason null", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":null}}`, "malformed", ErrMigration},
		{"turn/end with a step", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"step":1,"reason":{"kind":"completed"}}}`, `unexpected member "step"`, ErrMigration},
		{"aborted with an extra member", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"aborted","extra":true}}}`, `unexpected member "extra"`, ErrMigration},
		{"disposed with an extra member", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"disposed","extra":true}}}`, `unexpected member "extra"`, ErrMigration},
		{"error with a negative step", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"error","step":-1,"message":"bad"}}}`, "non-negative", ErrMigration},
		{"error with a numeric code", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"error","step":0,"message":"bad","code":1}}}`, "malformed", ErrMigration},
		{"error failure with a numeric message", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":"error","step":0,"failure":{"message":1,"code":"X"}}}}`, "malformed", ErrMigration},
		{"turn/end of turn 0", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":0,"reason":{"kind":"completed"}}}`, "malformed", ErrMigration},
		{"turn/end reason kind not a string", `{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":1}}}`, "malformed", ErrMigration},
		{"request/header-delta", `{"type":"request/header-delta","seq":0,"time":1,"data":{"config":{"model":"legacy"}}}`, `unsupported legacy request/header-delta event at seq 0`, ErrMigration},
		{"mode/set", `{"type":"mode/set","seq":0,"time":1,"data":{"mode":"plan"}}`, `unsupported legacy mode/set`, ErrMigration},
		{"request/header reason fallback", `{"type":"request/header","seq":0,"time":1,"data":{"header":{"config":{"model":"legacy"}},"reason":"fallback"}}`, `unsupported request/header reason "fallback"`, ErrMigration},
		{"a messagePrefix that is not a list", `{"type":"request/header","seq":0,"time":2,"data":{"header":{"config":{},"messagePrefix":"bad"},"reason":"initial"}}`, "malformed request/header messagePrefix", ErrMigration},
		{"a tool/result with a numeric callId", `{"type":"tool/result","seq":0,"time":1,"data":{"turn":1,"step":0,"callId":1,"content":[],"isError":false},"surfaceOp":"append"}`, `data has unexpected member "callId"`, ErrMigration},
		{"a tool/result without isError", `{"type":"tool/result","seq":0,"time":1,"data":{"turn":1,"step":0,"callId":"call","content":[]},"surfaceOp":"append"}`, `data has unexpected member "callId"`, ErrMigration},
		{"a replacing tool/result citing a message without identity", `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"tool/result","seq":1,"time":2,"data":{"turn":1,"step":0,"callId":"call","content":[],"isError":false},"sourceEventSeqs":[0],"surfaceOp":{"op":"replace","start":0,"end":0}}`, "replacement cites a message without identity", ErrMigration},
		{"an unknown type, ignorable", `{"type":"x/custom","seq":0,"time":1,"data":{},"ignorable":true}`, `format v0 contains unknown historical event type "x/custom" at seq 0`, event.ErrUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := MigrateV0(unseeded("legacy"), logOf(t, c.in))
			if err == nil || !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q (%v)", err, c.want, c.kind)
			}
		})
	}
}

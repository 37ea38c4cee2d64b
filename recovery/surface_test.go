package recovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
)

// sv is a compact event for the surface tables: typ, data, surfaceOp
// (raw JSON, "" none), sourceEventSeqs.
type sv struct {
	typ, data, op string
	src           []uint64
	ignorable     bool
}

func svLog(rows ...sv) []event.Event {
	evs := make([]event.Event, len(rows))
	for i, r := range rows {
		d := r.data
		if d == "" {
			d = `{}`
		}
		evs[i] = event.Event{Seq: uint64(i), Type: r.typ, Time: int64(1000 + i), Data: json.RawMessage(d),
			SourceEventSeqs: r.src, Ignorable: r.ignorable}
		if r.op != "" {
			evs[i].SurfaceOp = json.RawMessage(r.op)
		}
	}
	return evs
}

const (
	app      = `"append"`
	stepData = `{"turn":1,"step":1}`
	sysData  = `{"turn":1,"step":1,"message":{"id":"sys","role":"system","content":[],"source":{"kind":"plugin","plugin":"p"}}}`
	userData = `{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`
	asstData = `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}],"source":{"kind":"model"}}}`
	callData = `{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`
)

func resultData(content string, isError bool) string {
	return fmt.Sprintf(`{"turn":1,"step":1,"message":{"id":"r1","role":"user","source":{"kind":"tool","callId":"c1"},"content":[{"type":"tool-result","toolCallId":"c1","isError":%t,"content":[{"type":"text","text":%q}]}]}}`, isError, content)
}

func rep(start, end int) string {
	return fmt.Sprintf(`{"op":"replace","startSeq":%d,"endSeq":%d}`, start, end)
}

// base is a valid one-turn v3 log: seqs 0..8 (surface: 2, 3, 4, 6).
func base() []sv {
	return []sv{
		{typ: "turn/start", data: `{"turn":1}`},                                       // 0
		{typ: "step/start", data: stepData},                                           // 1
		{typ: "system/message", data: sysData, op: app},                               // 2: the head
		{typ: "user/message", data: userData, op: app},                                // 3
		{typ: "assistant/message", data: asstData, op: app},                           // 4
		{typ: "tool/call", data: callData},                                            // 5
		{typ: "tool/result", data: resultData("a", false), op: app, src: []uint64{5}}, // 6
		{typ: "step/end", data: stepData},                                             // 7
		{typ: "turn/end", data: `{"turn":1,"reason":{"kind":"completed"}}`},           // 8
	}
}

// with returns base with rows appended (seqs from 9).
func with(rows ...sv) []event.Event { return svLog(append(base(), rows...)...) }

// inStep is base cut before its step/end, so that appended rows are in
// the open step (seqs from 7).
func inStep(rows ...sv) []event.Event { return svLog(append(base()[:7], rows...)...) }

func TestSurfaceRules(t *testing.T) {
	cases := []struct {
		name string
		log  []event.Event
		bad  int64  // seq of the event reported, -1: valid
		want string // part of the reason
	}{
		{"base", svLog(base()...), -1, ""},
		{"empty", nil, -1, ""},
		{"log-only events before any step", svLog(sv{typ: "turn/start", data: `{"turn":1}`}, sv{typ: "session/title", data: `{"title":"x"}`}), -1, ""},
		{"unknown ignorable log-only event is opaque", with(sv{typ: "acme/x", op: `"whatever"`, src: []uint64{99, 99}, ignorable: true}), -1, ""},
		{"unknown required log-only event carries surfaceOp", with(sv{typ: "acme/x", op: app}), 9, "cannot carry surfaceOp"},
		{"known ignorable log-only event carries surfaceOp", with(sv{typ: "session/title", op: app, ignorable: true}), 9, "cannot carry surfaceOp"},
		{"log-only event carries sourceEventSeqs", with(sv{typ: "turn/start", data: `{"turn":2}`, src: []uint64{1}}), 9, "cannot carry sourceEventSeqs"},
		{"ignorable surface type is still checked", inStep(sv{typ: "user/message", data: userData, ignorable: true}), 7, "requires surfaceOp"},

		{"surface event without surfaceOp", inStep(sv{typ: "user/message", data: userData}), 7, "requires surfaceOp"},
		{"surfaceOp another string", inStep(sv{typ: "user/message", data: userData, op: `"prepend"`}), 7, "invalid surfaceOp"},
		{"surfaceOp null", inStep(sv{typ: "user/message", data: userData, op: `null`}), 7, "invalid surfaceOp"},
		{"surfaceOp array", inStep(sv{typ: "user/message", data: userData, op: `["append"]`}), 7, "invalid surfaceOp"},
		{"replace in the v2 shape", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","start":3,"end":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace with an extra key", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":3,"endSeq":3,"x":1}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace of another op", inStep(sv{typ: "user/message", data: userData, op: `{"op":"splice","startSeq":3,"endSeq":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace seq a string", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":"3","endSeq":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace seq negative", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":-1,"endSeq":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace seq -0", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":-0,"endSeq":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace seq fractional", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":3.5,"endSeq":4}`, src: []uint64{3, 4}}), 7, "invalid replace surfaceOp"},
		{"replace seq unsafe", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":9007199254740992,"endSeq":3}`, src: []uint64{3}}), 7, "invalid replace surfaceOp"},
		{"replace seq 3.0 is 3", inStep(sv{typ: "user/message", data: userData, op: `{"op":"replace","startSeq":3.0,"endSeq":4}`, src: []uint64{3, 4}}), -1, ""},

		{"replace a span", inStep(sv{typ: "user/message", data: userData, op: rep(3, 6), src: []uint64{3, 4, 6}}), -1, ""},
		{"replace a span citing more", inStep(sv{typ: "user/message", data: userData, op: rep(3, 4), src: []uint64{1, 3, 4, 5}}), -1, ""},
		{"replace misses a replaced node", inStep(sv{typ: "user/message", data: userData, op: rep(3, 6), src: []uint64{3, 6}}), 7, "missing 4"},
		{"replace without sources", inStep(sv{typ: "user/message", data: userData, op: rep(3, 3)}), 7, "missing 3"},
		{"replace start not on the surface", inStep(sv{typ: "user/message", data: userData, op: rep(5, 6), src: []uint64{5, 6}}), 7, "start seq 5 is not on the surface"},
		{"replace end not on the surface", inStep(sv{typ: "user/message", data: userData, op: rep(3, 5), src: []uint64{3, 5}}), 7, "end seq 5 is not on the surface"},
		{"replace start after end", inStep(sv{typ: "user/message", data: userData, op: rep(4, 3), src: []uint64{3, 4}}), 7, "is after end seq"},
		{"replace span not earlier", inStep(sv{typ: "user/message", data: userData, op: rep(3, 7), src: []uint64{3}}), 7, "must name earlier events"},
		{"replaced node is gone", inStep(
			sv{typ: "user/message", data: userData, op: rep(3, 4), src: []uint64{3, 4}},
			sv{typ: "user/message", data: userData, op: rep(3, 3), src: []uint64{3}}), 8, "start seq 3 is not on the surface"},
		{"replacement is a node", inStep(
			sv{typ: "user/message", data: userData, op: rep(3, 4), src: []uint64{3, 4}},
			sv{typ: "user/message", data: userData, op: rep(7, 6), src: []uint64{6, 7}}), -1, ""},

		{"sourceEventSeqs on assistant/message", inStep(sv{typ: "assistant/message", data: asstData, op: app, src: []uint64{3}}), 7, "cannot carry sourceEventSeqs"},
		{"sourceEventSeqs duplicate", inStep(sv{typ: "user/message", data: userData, op: app, src: []uint64{3, 3}}), 7, "holds 3 twice"},
		{"sourceEventSeqs the event itself", inStep(sv{typ: "user/message", data: userData, op: app, src: []uint64{7}}), 7, "earlier events"},
		{"sourceEventSeqs later", inStep(sv{typ: "user/message", data: userData, op: app, src: []uint64{2, 8}}), 7, "earlier events"},
		{"sourceEventSeqs unsafe", inStep(sv{typ: "user/message", data: userData, op: app, src: []uint64{1 << 53}}), 7, "not a safe integer"},
		{"tool/result without sources (not started)", inStep(sv{typ: "tool/result", data: resultData("x", true), op: app}), -1, ""},

		{"surface event before the first step", svLog(sv{typ: "turn/start", data: `{"turn":1}`}, sv{typ: "user/message", data: userData, op: app}), 1, "before the first step/start"},
		{"surface event after a step ended is fine", with(sv{typ: "user/message", data: userData, op: app}), -1, ""},
		{"no head: user first", svLog(sv{typ: "step/start", data: stepData}, sv{typ: "user/message", data: userData, op: app}), -1, ""},
		{"system/message after a headless surface", svLog(sv{typ: "step/start", data: stepData}, sv{typ: "user/message", data: userData, op: app},
			sv{typ: "system/message", data: sysData, op: app}), 2, "protected first surface head"},
		{"system/message outside a step", with(sv{typ: "system/message", data: sysData, op: app}), 9, "open step"},
		{"system/message of another step", inStep(sv{typ: "system/message", data: `{"turn":1,"step":2,"message":{}}`, op: app}), 7, "open step"},
		{"system/message in history", inStep(sv{typ: "system/message", data: sysData, op: app}), -1, ""},
		{"system/message replaces the head", inStep(sv{typ: "system/message", data: sysData, op: rep(2, 2), src: []uint64{2}}), -1, ""},
		{"new head replaced again", inStep(
			sv{typ: "system/message", data: sysData, op: rep(2, 2), src: []uint64{2}},
			sv{typ: "system/message", data: sysData, op: rep(7, 7), src: []uint64{7}}), -1, ""},
		{"system/message replaces the head and more", inStep(sv{typ: "system/message", data: sysData, op: rep(2, 3), src: []uint64{2, 3}}), 7, "protected system head"},
		{"user/message replaces the head", inStep(sv{typ: "user/message", data: userData, op: rep(2, 3), src: []uint64{2, 3}}), 7, "protected system head"},
		{"system/message replaces a later span", inStep(sv{typ: "system/message", data: sysData, op: rep(3, 4), src: []uint64{3, 4}}), -1, ""},
		{"compaction shadows the head", with(sv{typ: "compaction/summary", data: `{"shadowedSeqs":[3,2]}`}), 9, "protected system head"},
		{"compaction shadows others", with(sv{typ: "compaction/summary", data: `{"shadowedSeqs":[3,4]}`}), -1, ""},

		{"tool/result rewrites its content", inStep(sv{typ: "tool/result", data: resultData("pruned", false), op: rep(6, 6), src: []uint64{6}}), -1, ""},
		{"tool/result rewrite changes isError", inStep(sv{typ: "tool/result", data: resultData("a", true), op: rep(6, 6), src: []uint64{6}}), 7, "only the result's content"},
		{"tool/result rewrite changes the id", inStep(sv{typ: "tool/result", data: strings.Replace(resultData("a", false), `"r1"`, `"r2"`, 1), op: rep(6, 6), src: []uint64{6}}), 7, "only the result's content"},
		{"tool/result rewrite adds a field", inStep(sv{typ: "tool/result", data: strings.Replace(resultData("a", false), `"turn":1`, `"turn":1,"meta":{}`, 1), op: rep(6, 6), src: []uint64{6}}), 7, "only the result's content"},
		{"tool/result replaces two nodes", inStep(sv{typ: "tool/result", data: resultData("a", false), op: rep(4, 6), src: []uint64{4, 6}}), 7, "exactly one surface node"},
		{"tool/result replaces a user/message", inStep(sv{typ: "tool/result", data: resultData("a", false), op: rep(3, 3), src: []uint64{3}}), 7, "must replace a tool/result"},

		{"seq gap", func() []event.Event { l := svLog(base()...); l[4].Seq = 9; return l }(), 9, "not contiguous: expected 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckSurface(c.log)
			if c.bad < 0 {
				if err != nil {
					t.Fatalf("valid log refused: %v", err)
				}
				return
			}
			var se *SurfaceError
			if !errors.As(err, &se) || !errors.Is(err, ErrSurface) {
				t.Fatalf("got %v, want a *SurfaceError", err)
			}
			if se.Seq != uint64(c.bad) || !strings.Contains(se.Reason, c.want) {
				t.Fatalf("got seq %d %q, want seq %d and %q", se.Seq, se.Reason, c.bad, c.want)
			}
			if want := c.log[len(c.log)-1].Type; c.bad == int64(len(c.log)-1) && se.Type != want {
				t.Fatalf("error names type %q, want %q", se.Type, want)
			}
			// The incremental checker, one event at a time, reports the same.
			ch := NewSurfaceChecker(nil)
			var ierr error
			for i := range c.log {
				if ierr = ch.Check(c.log[i]); ierr != nil {
					break
				}
			}
			if ierr == nil || ierr.Error() != err.Error() {
				t.Fatalf("incremental: %v, whole log: %v", ierr, err)
			}
		})
	}
}

// A failed Check takes nothing of its batch; Undo takes back the last
// batch that passed.
func TestSurfaceCheckerAtomic(t *testing.T) {
	log := inStep(
		sv{typ: "user/message", data: userData, op: rep(3, 4), src: []uint64{3, 4}}, // 7
		sv{typ: "user/message", data: userData, op: app},                            // 8
	)
	ch := NewSurfaceChecker(nil)
	if err := ch.Check(log[:7]...); err != nil {
		t.Fatal(err)
	}
	// A batch whose second event is bad: the first (a replace) is not taken.
	bad := log[8]
	bad.SurfaceOp = nil
	if err := ch.Check(log[7], bad); err == nil {
		t.Fatal("bad batch passed")
	}
	if ch.Len() != 7 {
		t.Fatalf("Len %d after a failed batch, want 7", ch.Len())
	}
	// A passed batch undone: the same batch passes again (the replaced
	// nodes are back on the surface).
	if err := ch.Check(log[7:9]...); err != nil {
		t.Fatal(err)
	}
	ch.Undo()
	ch.Undo() // a second Undo does nothing
	if ch.Len() != 7 {
		t.Fatalf("Len %d after Undo, want 7", ch.Len())
	}
	if err := ch.Check(log[7:9]...); err != nil {
		t.Fatalf("after Undo: %v", err)
	}
	// The replace took 3 and 4 off the surface.
	again := event.Event{Seq: 9, Type: "user/message", Time: 1, Data: json.RawMessage(userData), SurfaceOp: json.RawMessage(rep(3, 3)), SourceEventSeqs: []uint64{3}}
	if err := ch.Check(again); err == nil {
		t.Fatal("replace of a node no longer on the surface passed")
	}
}

// The logs the store itself writes keep the rules: the closers of an
// interrupted turn (recovery's Balance, over every prefix of a valid
// log) and a v2 log migrated to v3.
func TestSurfaceOfStoreWrittenLogs(t *testing.T) {
	full := svLog(base()...)
	for n := range len(full) + 1 {
		bal, err := Balance(full[:n])
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSurface(bal); err != nil {
			t.Fatalf("prefix %d balanced: %v", n, err)
		}
	}
	// A pending call with no tool/call (TOOL_NOT_STARTED, no sources) too.
	bal, err := Balance(full[:5])
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSurface(bal); err != nil {
		t.Fatal(err)
	}
	mig, err := MigrateV2("s", testgen.V2Turns("", 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSurface(mig); err != nil {
		t.Fatalf("migrated v2 log: %v", err)
	}
	// The v2 log itself has v2 replace envelopes: not v3.
	var se *SurfaceError
	if err := CheckSurface(testgen.V2Turns("", 3)); !errors.As(err, &se) || se.Seq != 3 {
		t.Fatalf("v2 log: %v", err)
	}
}

// A catalog that knows a host's type checks its ignorable events.
func TestSurfaceKnownCatalog(t *testing.T) {
	log := with(sv{typ: "acme/x", op: app, ignorable: true})
	if err := CheckSurface(log); err != nil {
		t.Fatalf("unknown ignorable: %v", err)
	}
	err := NewSurfaceChecker(event.NewCatalog("acme/*")).Check(log...)
	var se *SurfaceError
	if !errors.As(err, &se) || se.Seq != 9 {
		t.Fatalf("known ignorable with surfaceOp: %v", err)
	}
}

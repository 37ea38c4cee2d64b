package recovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testlong"
)

// logBuilder writes a log with dense seqs and rising times.
type logBuilder struct{ evs []event.Event }

func (b *logBuilder) add(typ, data string) *logBuilder {
	seq := uint64(len(b.evs))
	b.evs = append(b.evs, event.Event{Seq: seq, Type: typ, Time: 1000 + int64(seq), Data: json.RawMessage(data)})
	return b
}

func (b *logBuilder) turnStart(turn int) *logBuilder {
	return b.add(TypeTurnStart, fmt.Sprintf(`{"turn":%d}`, turn))
}
func (b *logBuilder) turnEnd(turn int) *logBuilder {
	return b.add(TypeTurnEnd, fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, turn))
}
func (b *logBuilder) stepStart(turn, step int) *logBuilder {
	return b.add(TypeStepStart, fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
}
func (b *logBuilder) stepEnd(turn, step int) *logBuilder {
	return b.add(TypeStepEnd, fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
}
func (b *logBuilder) user(turn, step int) *logBuilder {
	return b.add("user/message", fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"u","role":"user","content":[]}}`, turn, step))
}
func (b *logBuilder) assistant(turn, step int, calls ...string) *logBuilder {
	var blocks []string
	blocks = append(blocks, `{"type":"text","text":"ok"}`)
	for _, c := range calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool-call","id":%q,"name":"read","arguments":"{}"}`, c))
	}
	return b.add(TypeAssistantMessage, fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"a","role":"assistant","content":[%s],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[]}`,
		turn, step, strings.Join(blocks, ",")))
}
func (b *logBuilder) toolCall(turn, step int, id string) *logBuilder {
	return b.add(TypeToolCall, fmt.Sprintf(`{"turn":%d,"step":%d,"callId":%q,"name":"read","arguments":"{}"}`, turn, step, id))
}
func (b *logBuilder) toolResult(turn, step int, id string) *logBuilder {
	return b.add(TypeToolResult, fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"r","role":"user","source":{"kind":"tool","callId":%q},"content":[{"type":"tool-result","toolCallId":%q,"content":[]}]}}`, turn, step, id, id))
}
func (b *logBuilder) endSeed(inherited bool) *logBuilder {
	if inherited {
		return b.add(TypeEndSeed, `{"inherited":true}`)
	}
	return b.add(TypeEndSeed, `{}`)
}

func newLog() *logBuilder { return &logBuilder{} }

// closerShape is what a test asserts of one closer.
type closerShape struct {
	Type    string
	Code    string   // tool results: error code
	CallID  string   // tool results
	Sources []uint64 // sourceEventSeqs
}

func shapes(t *testing.T, evs []event.Event) []closerShape {
	t.Helper()
	var out []closerShape
	for _, e := range evs {
		s := closerShape{Type: e.Type, Sources: e.SourceEventSeqs}
		if e.Type == TypeToolResult {
			var d struct {
				Error   struct{ Code string }
				Message struct {
					Source struct{ CallID string }
				}
			}
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			s.Code, s.CallID = d.Error.Code, d.Message.Source.CallID
		}
		out = append(out, s)
	}
	return out
}

func TestInterruptedTurnClosers(t *testing.T) {
	tests := []struct {
		name string
		log  *logBuilder
		want []closerShape
	}{
		{"empty log", newLog(), nil},
		{"after turn/end: balanced", newLog().turnStart(0).stepStart(0, 0).stepEnd(0, 0).turnEnd(0), nil},
		{"crash after turn/start", newLog().turnStart(0),
			[]closerShape{{Type: TypeTurnEnd}}},
		{"crash inside a step", newLog().turnStart(0).stepStart(0, 0).user(0, 0),
			[]closerShape{{Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"crash after step/end, turn open", newLog().turnStart(0).stepStart(0, 0).stepEnd(0, 0),
			[]closerShape{{Type: TypeTurnEnd}}},
		{"one pending call, never started", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "c1"),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "c1"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"one pending call, started", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "c1").toolCall(0, 0, "c1"),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolOutcomeUnknown, CallID: "c1", Sources: []uint64{3}}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"three pending calls, in order, one done", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "a", "b", "c").
			toolCall(0, 0, "a").toolCall(0, 0, "b").toolResult(0, 0, "b"),
			[]closerShape{
				{Type: TypeToolResult, Code: CodeToolOutcomeUnknown, CallID: "a", Sources: []uint64{3}},
				{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "c"},
				{Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"step/end clears pending calls", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "a").stepEnd(0, 0),
			[]closerShape{{Type: TypeTurnEnd}}},
		{"second turn after a balanced first", newLog().turnStart(0).turnEnd(0).turnStart(1).stepStart(1, 0),
			[]closerShape{{Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		// A turn/start with no turn/end before it (the host restarted
		// without resuming): it opens a new turn, the earlier one's step
		// and calls are gone; only the last turn is closed
		// (engine's TestResumeTurnStartWithoutTurnEnd checks the turn
		// numbers and the surface rules).
		{"turn/start after a turn that never ended", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "c0").toolCall(0, 0, "c0").
			turnStart(1).stepStart(1, 0).assistant(1, 0, "c1"),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "c1"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"turn/start after a step that never ended, no step since", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "c0").turnStart(1),
			[]closerShape{{Type: TypeTurnEnd}}},
		// The inherited marker is no boundary of the scan: the parent's open
		// turn carries into the child, which closes it itself (fork closers)
		// or gets closers for it.
		{"seeded prefix ending mid-turn, no fork closers", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "p").endSeed(true),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "p"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"seeded prefix ending mid-turn, child-owned fork closers", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "p").endSeed(true).
			toolResult(0, 0, "p").stepEnd(0, 0).turnEnd(0), nil},
		{"seeded prefix, child turn open", newLog().turnStart(0).stepStart(0, 0).endSeed(true).turnStart(1),
			[]closerShape{{Type: TypeTurnEnd}}},
		{"untagged end-seed is only a boundary", newLog().turnStart(0).endSeed(false),
			[]closerShape{{Type: TypeTurnEnd}}},
		// What the reference's scan lets pass, and so does this one.
		{"turn/end without an open turn", newLog().turnEnd(0), nil},
		{"turn/end without an open turn, then a crash in the next", newLog().turnEnd(0).turnStart(1).stepStart(1, 0),
			[]closerShape{{Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"step/start outside a turn is closed by the next turn/start", newLog().stepStart(0, 0).turnStart(1),
			[]closerShape{{Type: TypeTurnEnd}}},
		{"step/end without an open step", newLog().turnStart(0).stepEnd(0, 0), []closerShape{{Type: TypeTurnEnd}}},
		{"result for a call that is not pending (a plugin's)", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "a").toolResult(0, 0, "plugin-1"),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "a"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"call ids as data.callId (older logs)", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "a", "b").
			add(TypeToolCall, `{"turn":0,"step":0,"callId":"b"}`).add(TypeToolResult, `{"turn":0,"step":0,"callId":"a"}`),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolOutcomeUnknown, CallID: "b", Sources: []uint64{3}}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"calls in data.content (older logs)", newLog().turnStart(0).stepStart(0, 0).
			add(TypeAssistantMessage, `{"turn":0,"step":0,"content":[{"type":"tool-call","id":"x","name":"n","arguments":"{}"}]}`),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "x"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
		{"a call asked for again keeps its place and starts over", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "a", "b").
			toolCall(0, 0, "a").assistant(0, 0, "a"),
			[]closerShape{{Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "a"}, {Type: TypeToolResult, Code: CodeToolNotStarted, CallID: "b"}, {Type: TypeStepEnd}, {Type: TypeTurnEnd}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closers, err := InterruptedTurnClosers(tt.log.evs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, shapes(t, closers)); diff != "" {
				t.Fatalf("closers mismatch (-want +got):\n%s", diff)
			}
			if len(tt.log.evs) == 0 {
				return
			}
			last := tt.log.evs[len(tt.log.evs)-1]
			for i, c := range closers {
				if c.Seq != last.Seq+1+uint64(i) || c.Time != last.Time {
					t.Errorf("closer %d: seq %d time %d, want seq %d time %d", i, c.Seq, c.Time, last.Seq+1+uint64(i), last.Time)
				}
				if err := c.Validate(i); err != nil {
					t.Errorf("closer %d is not a valid event: %v", i, err)
				}
			}
			if n := len(closers); n > 0 {
				end := closers[n-1]
				if !strings.Contains(string(end.Data), `"reason":{"kind":"interrupted"}`) {
					t.Errorf("turn/end data %s lacks the interrupted reason", end.Data)
				}
			}
		})
	}
}

// The synthetic tool result carries the reference's message shape.
func TestCloserResultShape(t *testing.T) {
	log := newLog().turnStart(3).stepStart(3, 1).assistant(3, 1, "call-9").toolCall(3, 1, "call-9")
	closers, err := InterruptedTurnClosers(log.evs)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Turn    int
		Step    int
		Message struct {
			ID      string
			Role    string
			Source  map[string]string
			Content []struct {
				Type       string
				ToolCallID string
				IsError    bool
				Content    []struct{ Type, Text string }
			}
		}
		Error struct{ Name, Code string }
	}
	if err := json.Unmarshal(closers[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Turn != 3 || d.Step != 1 || d.Message.ID != "interrupted-tool-result-call-9-4" || d.Message.Role != "user" ||
		d.Message.Source["kind"] != "tool" || d.Message.Source["callId"] != "call-9" ||
		len(d.Message.Content) != 1 || !d.Message.Content[0].IsError || d.Message.Content[0].ToolCallID != "call-9" ||
		d.Error.Name != "ToolOutcomeUnknownError" || string(closers[0].SurfaceOp) != `"append"` {
		t.Errorf("tool result = %s", closers[0].Data)
	}
	if txt := d.Message.Content[0].Content[0].Text; !strings.Contains(txt, "read-only or idempotent") {
		t.Errorf("text %q", txt)
	}
}

// FoldStrict reports what Fold (the reference's scan) lets pass; both
// report a seq gap.
func TestFoldErrors(t *testing.T) {
	tests := []struct {
		name string
		log  *logBuilder
		seq  uint64
	}{
		{"turn/end without turn/start", newLog().turnEnd(0), 0},
		{"step/start outside a turn", newLog().stepStart(0, 0), 0},
		{"step/end without step", newLog().turnStart(0).stepEnd(0, 0), 1},
		{"result for unknown call", newLog().turnStart(0).stepStart(0, 0).toolResult(0, 0, "ghost"), 2},
		{"result after its step ended", newLog().turnStart(0).stepStart(0, 0).assistant(0, 0, "c").stepEnd(0, 0).toolResult(0, 0, "c"), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FoldStrict(tt.log.evs)
			var se *SequenceError
			if !errors.Is(err, ErrSequence) || !errors.As(err, &se) || se.Seq != tt.seq {
				t.Fatalf("FoldStrict = %v, want *SequenceError at seq %d", err, tt.seq)
			}
			if st, err := Fold(tt.log.evs); err != nil || st.Len != len(tt.log.evs) {
				t.Errorf("Fold = %+v, %v; want every event folded", st, err)
			}
			bal, err := Balance(tt.log.evs)
			if err != nil {
				t.Fatalf("Balance = %v", err)
			}
			if st, err := Fold(bal); err != nil || !st.Balanced() {
				t.Errorf("the balanced log folds to %+v, %v", st, err)
			}
		})
	}
	gap := newLog().turnStart(0)
	gap.evs = append(gap.evs, event.Event{Seq: 5, Type: TypeTurnEnd, Data: json.RawMessage(`{}`)})
	if _, err := Fold(gap.evs); !errors.Is(err, ErrSequence) {
		t.Errorf("seq gap: %v", err)
	}
	if _, err := FoldStrict(gap.evs); !errors.Is(err, ErrSequence) {
		t.Errorf("seq gap, strict: %v", err)
	}
}

func TestFoldState(t *testing.T) {
	st, err := Fold(newLog().turnStart(2).stepStart(2, 0).assistant(2, 0, "x", "y").toolCall(2, 0, "y").evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != InStep || string(st.Turn) != "2" || string(st.Step) != "0" || len(st.Pending) != 2 ||
		st.Pending[0].CallID != "x" || st.Pending[0].CallSeq != nil || *st.Pending[1].CallSeq != 3 || st.Len != 4 {
		t.Errorf("state = %+v", st)
	}
}

// genLog writes a valid log of a few random turns; every turn is complete.
func genLog(r *rand.Rand) []event.Event {
	b := newLog()
	for turn := range 1 + r.IntN(3) {
		b.turnStart(turn)
		for step := range r.IntN(3) {
			b.stepStart(turn, step)
			if r.IntN(2) == 0 {
				b.user(turn, step)
			}
			var calls []string
			for c := range r.IntN(3) {
				calls = append(calls, fmt.Sprintf("t%ds%dc%d", turn, step, c))
			}
			b.assistant(turn, step, calls...)
			for _, c := range calls {
				if r.IntN(4) > 0 {
					b.toolCall(turn, step, c)
				}
				b.toolResult(turn, step, c)
			}
			b.stepEnd(turn, step)
		}
		b.turnEnd(turn)
	}
	return b.evs
}

// For every prefix of valid generated logs, Balance yields a balanced log
// that starts with the prefix: 300 logs (3000 with SEGLOG_LONG=1).
func TestBalancePrefixProperty(t *testing.T) {
	for seed := range uint64(testlong.Pick(300, 300, 3000)) {
		log := genLog(rand.New(rand.NewPCG(seed, 5)))
		for n := 0; n <= len(log); n++ {
			prefix := log[:n]
			bal, err := Balance(prefix)
			if err != nil {
				t.Fatalf("seed %d, prefix %d: %v", seed, n, err)
			}
			if !reflect.DeepEqual(prefix, bal[:n]) { // (cmp.Diff alone took most of the test's time)
				t.Fatalf("seed %d, prefix %d: Balance changed the prefix:\n%s", seed, n, cmp.Diff(prefix, bal[:n]))
			}
			st, err := Fold(bal)
			if err != nil || !st.Balanced() || len(st.Pending) != 0 {
				t.Fatalf("seed %d, prefix %d: balanced view folds to %+v, %v", seed, n, st, err)
			}
			if n == len(log) && len(bal) != n {
				t.Fatalf("seed %d: a complete log got %d closers", seed, len(bal)-n)
			}
		}
	}
}

// TestClosersAreTheReferences: the closers of a turn cut with one call
// started (its tool/call recorded) and one not, in a step left open, are
// the reference harness's (interruptedTurnClosers in
// packages/core/session/src/repair.ts) byte for byte: each event's data
// as its JSON.stringify writes it (members in its order, the texts that
// reach the model's transcript), surfaceOp, sourceEventSeqs, seqs and
// times. The strings below are the reference's.
func TestClosersAreTheReferences(t *testing.T) {
	const (
		unknown = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."
		notRun  = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
	)
	log := newLog().turnStart(2).stepStart(2, 0).assistant(2, 0, "c<1>", "c2").toolCall(2, 0, "c<1>")
	closers, err := InterruptedTurnClosers(log.evs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ, data, surfaceOp string
		sources              []uint64
	}{
		{"tool/result", `{"turn":2,"step":0,"message":{"id":"interrupted-tool-result-c<1>-4","role":"user","source":{"kind":"tool","callId":"c<1>"},"content":[{"type":"tool-result","toolCallId":"c<1>","isError":true,"content":[{"type":"text","text":"` + unknown + `"}]}]},"error":{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}}`, `"append"`, []uint64{3}},
		{"tool/result", `{"turn":2,"step":0,"message":{"id":"interrupted-tool-result-c2-5","role":"user","source":{"kind":"tool","callId":"c2"},"content":[{"type":"tool-result","toolCallId":"c2","isError":true,"content":[{"type":"text","text":"` + notRun + `"}]}]},"error":{"name":"ToolNotStartedError","code":"TOOL_NOT_STARTED"}}`, `"append"`, nil},
		{"step/end", `{"turn":2,"step":0}`, "", nil},
		{"turn/end", `{"turn":2,"reason":{"kind":"interrupted"}}`, "", nil},
	}
	if len(closers) != len(want) {
		t.Fatalf("%d closers, want %d: %v", len(closers), len(want), closers)
	}
	last := log.evs[len(log.evs)-1]
	for i, w := range want {
		c := closers[i]
		if c.Type != w.typ || string(c.Data) != w.data || string(c.SurfaceOp) != w.surfaceOp ||
			!slices.Equal(c.SourceEventSeqs, w.sources) || c.Seq != last.Seq+1+uint64(i) || c.Time != last.Time {
			t.Errorf("closer %d:\n got %s seq %d time %d %s %s %v\nwant %s seq %d time %d %s %s %v", i,
				c.Type, c.Seq, c.Time, c.Data, c.SurfaceOp, c.SourceEventSeqs,
				w.typ, last.Seq+1+uint64(i), last.Time, w.data, w.surfaceOp, w.sources)
		}
	}
}

package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/seglog/seglog/event"
)

// Event types the fold follows (docs/EVENTS.md).
const (
	TypeTurnStart        = "turn/start"
	TypeTurnEnd          = "turn/end"
	TypeStepStart        = "step/start"
	TypeStepEnd          = "step/end"
	TypeAssistantMessage = "assistant/message"
	TypeToolCall         = "tool/call"
	TypeToolResult       = "tool/result"
	TypeEndSeed          = "session/end-seed"
	TypeSystemMessage    = "system/message"
)

// Error codes of the synthetic tool results.
const (
	CodeToolOutcomeUnknown = "TOOL_OUTCOME_UNKNOWN"
	CodeToolNotStarted     = "TOOL_NOT_STARTED"
)

// Texts the synthetic tool results carry to the model: the reference
// harness's, byte for byte (its interruptedTurnClosers), since they reach
// the model's transcript.
const (
	textOutcomeUnknown = "The tool call was interrupted after it was recorded, but no result was durably recorded. " +
		"Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is " +
		"read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."
	textNotStarted = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)

// ErrSequence is the kind of every *SequenceError.
var ErrSequence = errors.New("recovery: impossible event sequence")

// SequenceError reports an event that cannot follow the log before it.
// errors.Is(err, ErrSequence) is true for it.
type SequenceError struct {
	Seq    uint64
	Type   string
	Reason string
}

func (e *SequenceError) Error() string {
	return fmt.Sprintf("recovery: event seq %d (%s): %s", e.Seq, e.Type, e.Reason)
}

// Is reports whether target is ErrSequence.
func (e *SequenceError) Is(target error) bool { return target == ErrSequence }

// Phase is where a log stands at its end.
type Phase int

const (
	// Idle: no turn is open.
	Idle Phase = iota
	// InTurn: a turn is open, no step.
	InTurn
	// InStep: a turn and a step are open.
	InStep
)

func (p Phase) String() string {
	return [...]string{"idle", "in-turn", "in-step"}[p]
}

// PendingCall is a tool call the model asked for that has no result yet.
type PendingCall struct {
	CallID string
	Name   string
	Step   json.RawMessage // data.step of the assistant message that asked for it
	// CallSeq is the seq of the tool/call event that started it, if one was
	// recorded (then its outcome is unknown; otherwise it never started).
	CallSeq *uint64
}

// State is the result of folding a log.
type State struct {
	Phase   Phase
	Turn    json.RawMessage // data.turn of the open turn
	Step    json.RawMessage // data.step of the open step
	Pending []PendingCall   // in the order the calls were asked for
	Len     int             // events folded (FoldFrom: the seq after the last one)
	Last    *event.Event    // the last event, if any
	// LastTurn is data.turn of the last turn/start or turn/end folded (the
	// open turn's, or the last closed one's), nil if none.
	LastTurn json.RawMessage
	// TurnFrom is the seq of the last turn/start or turn/end folded, plus
	// one; 0 if none. A fold from that seq (FoldFrom) gives this state:
	// the turn boundary resets everything the fold keeps.
	TurnFrom uint64
	// From is the seq of the first event folded: 0 for Fold, the first
	// event's for FoldFrom. Len - From events were folded.
	From uint64
}

// Balanced reports whether no turn is open.
func (s *State) Balanced() bool { return s.Phase == Idle }

// Fold replays events and returns the state at their end, as the
// reference harness's closer scan does, which never refuses a log:
//   - turn/start opens a turn (its step closed, no call pending);
//     turn/end closes it, whether or not one was open;
//   - step/start opens a step; step/end closes it and drops the pending
//     calls;
//   - every tool-call block of an assistant/message is a pending call
//     (asked for again, it keeps its place and starts over); a tool/call
//     records its seq on the pending call it names; a tool/result removes
//     the call it names, if pending (plugin results, replaced spans:
//     nothing).
//
// Every other event, session/end-seed included, leaves the state alone: a
// fork's inherited prefix carries its open turn into the child, whose
// child-owned closers (after the marker) close it. A call is named by
// message.source.callId on a tool/result, and by data.callId (the only
// place older logs have it on both tool/call and tool/result); an
// assistant/message's calls are the tool-call blocks of its
// message.content (of data.content in older logs).
//
// The one error is a seq that does not follow its predecessor's (a
// *SequenceError): no store returns such a log. FoldStrict also reports
// the transitions Fold lets pass.
func Fold(events []event.Event) (State, error) {
	return fold(events, false)
}

// FoldStrict is Fold that also reports, as a *SequenceError naming the
// event, what a log written by a correct agent loop never holds: a
// turn/end without an open turn, a step/start outside a turn, a step/end
// without an open step, a tool/result for a call that is not pending. For
// tests of hosts and of recorded logs.
func FoldStrict(events []event.Event) (State, error) {
	return fold(events, true)
}

func fold(events []event.Event, strict bool) (State, error) {
	f := folder{strict: strict}
	for i := range events {
		if err := f.step(&events[i], i); err != nil {
			return f.st, err
		}
	}
	return f.st, nil
}

// ErrNotBoundary is returned by FoldFrom when the events it is given do
// not start at a turn boundary (or at seq 0).
var ErrNotBoundary = errors.New("recovery: a fold must start at seq 0 or at a turn/start or turn/end")

// IsTurnBoundary reports whether an event of type typ resets the fold (a
// turn/start or a turn/end): the state after it does not depend on the
// events before it, so a fold may start there (FoldFrom).
func IsTurnBoundary(typ string) bool { return typ == TypeTurnStart || typ == TypeTurnEnd }

// LastTurnBoundary returns the seq, plus one, of the last event of evs
// that is a turn boundary (IsTurnBoundary), 0 if none is.
func LastTurnBoundary(evs []event.Event) uint64 {
	for i := len(evs) - 1; i >= 0; i-- {
		if IsTurnBoundary(evs[i].Type) {
			return evs[i].Seq + 1
		}
	}
	return 0
}

// FoldFrom is Fold of a log's tail: events are its events from the first
// one's seq on, which must be 0 or a turn boundary (else ErrNotBoundary,
// and nothing is folded). Since a boundary resets everything the fold
// keeps, the state is the one Fold of the whole log gives, Len (the seq
// after the last event) included; so a store that remembers where a
// session's last turn boundary is reads only the open turn to resume it.
func FoldFrom(events []event.Event) (State, error) {
	if len(events) == 0 || events[0].Seq == 0 {
		return Fold(events)
	}
	if !IsTurnBoundary(events[0].Type) {
		return State{}, ErrNotBoundary
	}
	f := folder{}
	f.st.From = events[0].Seq
	base := int(events[0].Seq)
	for i := range events {
		if err := f.step(&events[i], base+i); err != nil {
			return f.st, err
		}
	}
	return f.st, nil
}

type folder struct {
	strict  bool
	st      State
	pending []PendingCall
}

func (f *folder) fail(e *event.Event, format string, args ...any) error {
	return &SequenceError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
}

func (f *folder) step(e *event.Event, i int) error {
	if f.st.Last != nil && e.Seq != f.st.Last.Seq+1 {
		return f.fail(e, "follows seq %d", f.st.Last.Seq)
	}
	switch e.Type {
	case TypeTurnStart:
		f.st.Phase, f.st.Turn, f.st.Step = InTurn, field(e.Data, "turn"), nil
		f.st.LastTurn, f.st.TurnFrom = f.st.Turn, e.Seq+1
		f.pending = nil
	case TypeTurnEnd:
		if f.strict && f.st.Phase == Idle {
			return f.fail(e, "turn/end without an open turn")
		}
		f.st.Phase, f.st.Turn, f.st.Step = Idle, nil, nil
		f.st.LastTurn, f.st.TurnFrom = field(e.Data, "turn"), e.Seq+1
		f.pending = nil
	case TypeStepStart:
		if f.strict && f.st.Phase == Idle {
			return f.fail(e, "step/start outside a turn")
		}
		if f.st.Phase != Idle { // (outside a turn: the next turn/start closes it anyway)
			f.st.Phase, f.st.Step = InStep, field(e.Data, "step")
		}
	case TypeStepEnd:
		if f.strict && f.st.Phase != InStep {
			return f.fail(e, "step/end without an open step")
		}
		if f.st.Phase == InStep {
			f.st.Phase = InTurn
		}
		f.st.Step = nil
		f.pending = nil
	case TypeAssistantMessage:
		step := field(e.Data, "step")
		if step == nil {
			step = f.st.Step
		}
		for _, c := range toolCalls(e.Data) {
			call := PendingCall{CallID: c.ID, Name: c.Name, Step: step}
			if j := f.find(c.ID); j >= 0 {
				f.pending[j] = call
			} else {
				f.pending = append(f.pending, call)
			}
		}
	case TypeToolCall:
		if j := f.find(stringField(e.Data, "callId")); j >= 0 {
			seq := e.Seq
			f.pending[j].CallSeq = &seq
		}
	case TypeToolResult:
		id := resultCallID(e.Data)
		j := f.find(id)
		if j < 0 {
			if f.strict {
				return f.fail(e, "result for tool call %q, which is not pending", id)
			}
			break
		}
		f.pending = append(f.pending[:j:j], f.pending[j+1:]...)
	}
	f.st.Len = i + 1
	f.st.Last = e
	f.st.Pending = f.pending
	return nil
}

func (f *folder) find(id string) int {
	for j := range f.pending {
		if f.pending[j].CallID == id {
			return j
		}
	}
	return -1
}

// field returns data[key] as raw JSON, or nil.
func field(data json.RawMessage, key string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return m[key]
}

func stringField(data json.RawMessage, key string) string {
	var s string
	if json.Unmarshal(field(data, key), &s) != nil {
		return ""
	}
	return s
}

type toolCallBlock struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

// toolCalls returns the tool-call blocks of an assistant message's data:
// of data.message.content, or of data.content where older logs keep them.
func toolCalls(data json.RawMessage) []toolCallBlock {
	var d struct {
		Content []toolCallBlock `json:"content"`
		Message *struct {
			Content []toolCallBlock `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(data, &d) != nil {
		return nil
	}
	blocks := d.Content
	if d.Message != nil {
		blocks = d.Message.Content
	}
	var out []toolCallBlock
	for _, b := range blocks {
		if b.Type == "tool-call" && b.ID != "" {
			out = append(out, b)
		}
	}
	return out
}

// resultCallID is the call a tool/result answers: message.source.callId,
// or data.callId where older logs keep it.
func resultCallID(data json.RawMessage) string {
	var d struct {
		CallID  string `json:"callId"`
		Message struct {
			Source struct {
				CallID string `json:"callId"`
			} `json:"source"`
		} `json:"message"`
	}
	if json.Unmarshal(data, &d) != nil {
		return ""
	}
	if d.Message.Source.CallID != "" {
		return d.Message.Source.CallID
	}
	return d.CallID
}

// InterruptedTurnClosers returns the events that close the turn a log ends
// inside, in the reference's order: an error tool/result for every pending
// call (TOOL_OUTCOME_UNKNOWN citing its tool/call if one was recorded,
// TOOL_NOT_STARTED otherwise), a step/end if a step is open, and a turn/end
// with reason {"kind": "interrupted"}. Their seqs continue the log and
// their time is the last event's. A balanced log gets none (nil).
func InterruptedTurnClosers(events []event.Event) ([]event.Event, error) {
	st, err := Fold(events)
	if err != nil {
		return nil, err
	}
	return Closers(st), nil
}

// Closers returns the events that close the turn open in st (a fold's
// state): InterruptedTurnClosers of the log st is of. A balanced state
// gets none (nil).
func Closers(st State) []event.Event {
	if st.Balanced() {
		return nil
	}
	seq, t := st.Last.Seq+1, st.Last.Time
	var out []event.Event
	add := func(e event.Event) {
		e.Seq, e.Time = seq, t
		seq++
		out = append(out, e)
	}
	for _, c := range st.Pending {
		add(closerResult(st.Turn, c, seq))
	}
	if st.Phase == InStep {
		add(event.Event{Type: TypeStepEnd, Data: object("turn", st.Turn, "step", st.Step)})
	}
	add(event.Event{Type: TypeTurnEnd, Data: object("turn", st.Turn, "reason", json.RawMessage(`{"kind":"interrupted"}`))})
	return out
}

func closerResult(turn json.RawMessage, c PendingCall, seq uint64) event.Event {
	name, code, text := "ToolNotStartedError", CodeToolNotStarted, textNotStarted
	if c.CallSeq != nil {
		name, code, text = "ToolOutcomeUnknownError", CodeToolOutcomeUnknown, textOutcomeUnknown
	}
	type textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type resultBlock struct {
		Type       string      `json:"type"`
		ToolCallID string      `json:"toolCallId"`
		IsError    bool        `json:"isError"`
		Content    []textBlock `json:"content"`
	}
	// (Structs, not maps: the members in the reference's order.)
	type source struct {
		Kind   string `json:"kind"`
		CallID string `json:"callId"`
	}
	msg := struct {
		ID      string        `json:"id"`
		Role    string        `json:"role"`
		Source  source        `json:"source"`
		Content []resultBlock `json:"content"`
	}{
		ID:      "interrupted-tool-result-" + c.CallID + "-" + strconv.FormatUint(seq, 10),
		Role:    "user",
		Source:  source{Kind: "tool", CallID: c.CallID},
		Content: []resultBlock{{Type: "tool-result", ToolCallID: c.CallID, IsError: true, Content: []textBlock{{Type: "text", Text: text}}}},
	}
	m, _ := marshalNoEscape(msg)
	errObj, _ := json.Marshal(struct {
		Name string `json:"name"`
		Code string `json:"code"`
	}{name, code})
	e := event.Event{
		Type:      TypeToolResult,
		Data:      object("turn", turn, "step", c.Step, "message", m, "error", errObj),
		SurfaceOp: json.RawMessage(`"append"`),
	}
	if c.CallSeq != nil {
		e.SourceEventSeqs = []uint64{*c.CallSeq}
	}
	return e
}

// marshalNoEscape is json.Marshal without the escaping of <, > and & (a
// call ID may hold them), as the reference's JSON.stringify writes them.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// object builds a JSON object from key/value pairs, leaving out nil values
// and keeping the order given.
func object(kv ...any) json.RawMessage {
	b := []byte{'{'}
	for i := 0; i < len(kv); i += 2 {
		v, _ := kv[i+1].(json.RawMessage)
		if v == nil {
			if bs, ok := kv[i+1].([]byte); ok {
				v = bs
			}
		}
		if v == nil {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(kv[i].(string))
		b = append(b, k...)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}')
}

// Balance returns the read-only observer's view of a log: the events plus
// the closers of an interrupted turn, in memory. events is not modified.
func Balance(events []event.Event) ([]event.Event, error) {
	closers, err := InterruptedTurnClosers(events)
	if err != nil {
		return nil, err
	}
	out := make([]event.Event, 0, len(events)+len(closers))
	out = append(out, events...)
	return append(out, closers...), nil
}

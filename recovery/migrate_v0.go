package recovery

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/seglog/seglog/event"
)

// MigrateV0 converts the events of a format-v0 session (the older
// id-addressed API's logs, session.jsonl) into the v1 shape, as the
// reference's v0-to-v1 edge does. The edge keeps every event at its seq
// (v0 and v1 share the header, with its seedLength, and the row layout)
// and normalizes the legacy shapes:
//
//   - compact/start, compact/summary, compact/end, compact/prune are
//     renamed compaction/*; a compaction/start without a compactionId gets
//     "legacy-compaction:<session>:<seq>", and its summary, end and the
//     compact plugin's user/message until the compaction/end (or a
//     session/end-seed) carry it;
//   - turn/start {turn, trigger} loses its trigger; a turn/end reason
//     "disposed" becomes {"kind":"aborted","reason":{"kind":"disposed"}},
//     a bare "aborted" gets {"kind":"legacy"} as its reason, an "error"
//     reason with a step and a failure (or a message and a code) becomes
//     {"kind":"error","error":{…}};
//   - request/header loses header.messagePrefix; llm/retry without a
//     retryId gets that of its chain (same turn, step, provider and
//     policy) or "legacy-retry:<session>:<seq>";
//   - steering/message becomes a user/message; a user/message without an
//     id and role gets "legacy-message:<session>:<seq>" and "user"; an
//     assistant/message {content, provenance} and a tool/result {callId,
//     content, isError} become the message shapes (a replacing tool
//     result keeps the id of the message it replaces);
//   - request/header-delta, mode/set and request/header reason "fallback"
//     are refused, and so is every type outside the released inventory,
//     ignorable or not (*event.UnsupportedError), and data members the
//     released inventory does not list.
//
// The input is not modified. Refusals are *MigrationError (ErrMigration),
// *SequenceError for seqs that are not dense, *event.UnsupportedError.
func MigrateV0(s LegacySession, events []event.Event) ([]event.Event, error) {
	if !s.IsSeeded && s.Inherited != 0 {
		return nil, &MigrationError{From: 0, Reason: fmt.Sprintf("unseeded session with an inherited count of %d", s.Inherited)}
	}
	if s.Inherited > uint64(len(events)) {
		return nil, &MigrationError{From: 0, Reason: fmt.Sprintf("inherited count %d exceeds the session's %d events", s.Inherited, len(events))}
	}
	st := &v0Migration{s: s, messageIDs: map[uint64]string{}, retryIDs: map[string]string{}}
	out := make([]event.Event, len(events))
	for i := range events {
		e := events[i].Clone()
		if e.Seq != uint64(i) {
			return nil, &SequenceError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("seq %d at position %d", e.Seq, i)}
		}
		if err := st.normalize(&e); err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

type v0Migration struct {
	s            LegacySession
	messageIDs   map[uint64]string // seq → the message id it carries
	retryIDs     map[string]string // retry chain → its retryId
	compactionID string            // of the open legacy compaction
}

func (st *v0Migration) legacyID(kind string, seq uint64) json.RawMessage {
	return jsonText("legacy-" + kind + ":" + st.s.ID + ":" + strconv.FormatUint(seq, 10))
}

func refuseV0(e *event.Event, format string, args ...any) error {
	return &MigrationError{From: 0, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
}

func (st *v0Migration) malformed(e *event.Event) error {
	return refuseV0(e, "session %s contains malformed pre-react-loop %s at seq %d", jsonText(st.s.ID), e.Type, e.Seq)
}

func (st *v0Migration) normalize(e *event.Event) error {
	switch e.Type {
	case "compact/start", "compact/summary", "compact/end", "compact/prune":
		e.Type = "compaction/" + e.Type[len("compact/"):]
	case "request/header-delta", "mode/set":
		return refuseV0(e, "session %s contains unsupported legacy %s event at seq %d", jsonText(st.s.ID), e.Type, e.Seq)
	}
	data, err := members(e.Data)
	if err != nil {
		return refuseV0(e, "data must be an object")
	}
	if e.Type == "request/header" {
		if r, _ := jsonString(get(data, "reason")); r == "fallback" {
			return refuseV0(e, "session %s contains unsupported request/header reason \"fallback\" at seq %d", jsonText(st.s.ID), e.Seq)
		}
	}
	steps := []func(*event.Event, []member) ([]member, error){
		st.turnStart, st.turnEnd, st.requestHeader, st.steering, st.retry, st.compaction, st.message,
	}
	for _, step := range steps {
		if data, err = step(e, data); err != nil {
			return err
		}
	}
	e.Data = encode(data)
	if e.Type != "assistant/chunk" {
		if err := checkLegacyPayload(0, e); err != nil {
			return err
		}
	}
	if id, ok := messageID(e.Type, data); ok {
		st.messageIDs[e.Seq] = id
	}
	if e.Type == "session-log-deepseek/delivery-accepted" {
		accepted := get(data, "sessionFormatVersion")
		inherited := st.s.ParentSession != "" && e.Seq < st.s.Inherited
		id, _ := jsonString(get(data, "sessionId"))
		if (accepted == nil || string(accepted) == "0") && !inherited && id != st.s.ID {
			return refuseV0(e, "current-generation delivery marker names the wrong Session")
		}
	}
	return nil
}

func messageID(typ string, data []member) (string, bool) {
	msg := data
	if typ != "user/message" {
		var err error
		if msg, err = members(get(data, "message")); err != nil {
			return "", false
		}
	}
	return jsonString(get(msg, "id"))
}

func (st *v0Migration) turnStart(e *event.Event, data []member) ([]member, error) {
	if e.Type != TypeTurnStart || get(data, "trigger") == nil {
		return data, nil
	}
	if err := exactMembers(0, e, data, []string{"turn", "trigger"}, nil, "data"); err != nil {
		return nil, err
	}
	turn, ok := count(get(data, "turn"))
	trigger, err := members(get(data, "trigger"))
	kind, _ := jsonString(get(trigger, "kind"))
	if !ok || turn < 1 || err != nil || kind == "" {
		return nil, st.malformed(e)
	}
	return []member{{"turn", get(data, "turn")}}, nil
}

func (st *v0Migration) turnEnd(e *event.Event, data []member) ([]member, error) {
	if e.Type != TypeTurnEnd {
		return data, nil
	}
	if err := exactMembers(0, e, data, []string{"turn", "reason"}, nil, "data"); err != nil {
		return nil, err
	}
	if turn, ok := count(get(data, "turn")); !ok || turn < 1 {
		return nil, st.malformed(e)
	}
	reason, err := members(get(data, "reason"))
	kind, ok := jsonString(get(reason, "kind"))
	if err != nil || !ok {
		return nil, st.malformed(e)
	}
	bare := func() error { return exactMembers(0, e, reason, []string{"kind"}, nil, "reason") }
	var current json.RawMessage
	switch kind {
	case "completed", "blocked", "max-tokens", "interrupted":
		return data, bare()
	case "aborted":
		if get(reason, "reason") != nil {
			return data, nil
		}
		if err := bare(); err != nil {
			return nil, err
		}
		current = json.RawMessage(`{"kind":"aborted","reason":{"kind":"legacy"}}`)
	case "disposed":
		if err := bare(); err != nil {
			return nil, err
		}
		current = json.RawMessage(`{"kind":"aborted","reason":{"kind":"disposed"}}`)
	case "error":
		if get(reason, "error") != nil {
			return data, nil
		}
		if current, err = st.errorReason(e, reason); err != nil {
			return nil, err
		}
	default:
		return data, nil
	}
	return set(data, "reason", current), nil
}

func (st *v0Migration) errorReason(e *event.Event, reason []member) (json.RawMessage, error) {
	if _, ok := count(get(reason, "step")); !ok {
		return nil, refuseV0(e, "turn/end %d error step must be a non-negative safe integer", e.Seq)
	}
	if failure := get(reason, "failure"); failure != nil {
		if err := exactMembers(0, e, reason, []string{"kind", "step", "failure"}, nil, "reason"); err != nil {
			return nil, err
		}
		f, err := members(failure)
		if err != nil {
			return nil, refuseV0(e, "turn/end %d failure must be an object", e.Seq)
		}
		if err := exactMembers(0, e, f, []string{"message", "code"}, []string{"status", "providerRetryAfterMs", "requestId"}, "failure"); err != nil {
			return nil, err
		}
		_, okM := jsonString(get(f, "message"))
		_, okC := jsonString(get(f, "code"))
		if !okM || !okC {
			return nil, st.malformed(e)
		}
		return object("kind", json.RawMessage(`"error"`), "error", failure), nil
	}
	if err := exactMembers(0, e, reason, []string{"kind", "step", "message"}, []string{"code"}, "reason"); err != nil {
		return nil, err
	}
	msg, okM := jsonString(get(reason, "message"))
	code, okC := jsonString(get(reason, "code"))
	if !okM || (get(reason, "code") != nil && !okC) {
		return nil, st.malformed(e)
	}
	if !okC {
		code = "UNKNOWN"
	}
	return object("kind", json.RawMessage(`"error"`), "error", object("message", jsonText(msg), "code", jsonText(code))), nil
}

func (st *v0Migration) requestHeader(e *event.Event, data []member) ([]member, error) {
	if e.Type != "request/header" {
		return data, nil
	}
	header, err := members(get(data, "header"))
	if err != nil {
		return nil, refuseV0(e, "request/header %d header must be an object", e.Seq)
	}
	prefix := get(header, "messagePrefix")
	if prefix == nil {
		return data, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(prefix, &items) != nil || prefix[0] != '[' {
		return nil, refuseV0(e, "session %s contains malformed request/header messagePrefix at seq %d", jsonText(st.s.ID), e.Seq)
	}
	return set(data, "header", encode(without(header, "messagePrefix"))), nil
}

func (st *v0Migration) steering(e *event.Event, data []member) ([]member, error) {
	if e.Type != "steering/message" {
		return data, nil
	}
	if wrapped := get(data, "message"); wrapped != nil {
		if err := exactMembers(0, e, data, []string{"turn", "message"}, nil, "data"); err != nil {
			return nil, err
		}
		if _, ok := count(get(data, "turn")); !ok {
			return nil, refuseV0(e, "steering/message %d turn must be a non-negative safe integer", e.Seq)
		}
		msg, err := members(wrapped)
		if err != nil {
			return nil, refuseV0(e, "steering/message %d message must be an object", e.Seq)
		}
		e.Type = TypeUserMessage
		return msg, nil
	}
	if err := exactMembers(0, e, data, []string{"turn", "content", "source"}, nil, "data"); err != nil {
		return nil, err
	}
	if _, ok := count(get(data, "turn")); !ok {
		return nil, refuseV0(e, "steering/message %d turn must be a non-negative safe integer", e.Seq)
	}
	e.Type = TypeUserMessage
	msg := without(data, "turn")
	msg = set(msg, "id", st.legacyID("message", e.Seq))
	return set(msg, "role", json.RawMessage(`"user"`)), nil
}

func (st *v0Migration) retry(e *event.Event, data []member) ([]member, error) {
	if e.Type != "llm/retry" {
		return data, nil
	}
	chain := ""
	for _, k := range []string{"turn", "step", "provider", "policyKey"} {
		chain += orUndefined(get(data, k)) + "\x00"
	}
	raw := get(data, "retryId")
	if id, ok := jsonString(raw); ok && id != "" {
		st.retryIDs[chain] = id
		return data, nil
	}
	if raw != nil {
		return data, nil
	}
	id, ok := st.retryIDs[chain]
	if !ok {
		id = "legacy-retry:" + st.s.ID + ":" + strconv.FormatUint(e.Seq, 10)
	}
	st.retryIDs[chain] = id
	return set(data, "retryId", jsonText(id)), nil
}

func (st *v0Migration) compaction(e *event.Event, data []member) ([]member, error) {
	switch e.Type {
	case TypeEndSeed:
		st.compactionID = ""
		return data, nil
	case "compaction/start":
		raw := get(data, "compactionId")
		if id, ok := jsonString(raw); ok && id != "" {
			st.compactionID = id
			return data, nil
		}
		if raw != nil {
			return data, nil
		}
		id := "legacy-compaction:" + st.s.ID + ":" + strconv.FormatUint(e.Seq, 10)
		st.compactionID = id
		return set(data, "compactionId", jsonText(id)), nil
	}
	if st.compactionID == "" {
		return data, nil
	}
	switch e.Type {
	case "compaction/summary", "compaction/end":
		if e.Type == "compaction/end" {
			defer func() { st.compactionID = "" }()
		}
		if get(data, "compactionId") != nil {
			return data, nil
		}
		return set(data, "compactionId", jsonText(st.compactionID)), nil
	case TypeUserMessage:
		source, err := members(get(data, "source"))
		if err != nil {
			return data, nil
		}
		kind, _ := jsonString(get(source, "kind"))
		plugin, _ := jsonString(get(source, "plugin"))
		if kind != "plugin" || plugin != "compact" || get(source, "compactionId") != nil {
			return data, nil
		}
		return set(data, "source", encode(set(source, "compactionId", jsonText(st.compactionID)))), nil
	}
	return data, nil
}

func (st *v0Migration) message(e *event.Event, data []member) ([]member, error) {
	has := func(k string) bool { return get(data, k) != nil }
	switch e.Type {
	case TypeUserMessage:
		if has("id") || has("role") || has("message") || !has("content") || !has("source") {
			return data, nil
		}
		data = set(data, "id", st.legacyID("message", e.Seq))
		return set(data, "role", json.RawMessage(`"user"`)), nil
	case TypeAssistantMessage:
		if has("message") || !has("content") || !has("provenance") {
			return data, nil
		}
		source, err := members(get(data, "provenance"))
		if err != nil {
			return nil, refuseV0(e, "assistant/message %d legacy source must be an object", e.Seq)
		}
		msg := object("id", st.legacyID("message", e.Seq), "role", json.RawMessage(`"assistant"`),
			"content", get(data, "content"), "source", encode(set(source, "kind", json.RawMessage(`"model"`))))
		return set(without(data, "content", "provenance"), "message", msg), nil
	case TypeToolResult:
		if has("message") || !has("callId") || !has("content") || !has("isError") {
			return data, nil
		}
		callID, okID := jsonString(get(data, "callId"))
		isErr := string(get(data, "isError"))
		if !okID || (isErr != "true" && isErr != "false") {
			return data, nil
		}
		id := st.legacyID("message", e.Seq)
		if start, ok := replaceStart(e.SurfaceOp); ok {
			prior, ok := st.messageIDs[start]
			if !ok {
				return nil, refuseV0(e, "tool/result %d replacement cites a message without identity", e.Seq)
			}
			id = jsonText(prior)
		}
		content := "[" + string(object("type", json.RawMessage(`"tool-result"`), "toolCallId", jsonText(callID),
			"content", get(data, "content"), "isError", get(data, "isError"))) + "]"
		msg := object("id", id, "role", json.RawMessage(`"user"`), "content", json.RawMessage(content),
			"source", object("kind", json.RawMessage(`"tool"`), "callId", jsonText(callID)))
		return set(without(data, "callId", "content", "isError"), "message", msg), nil
	}
	return data, nil
}

// replaceStart returns the start of a replace surfaceOp.
func replaceStart(op json.RawMessage) (uint64, bool) {
	ms, err := members(op)
	if err != nil {
		return 0, false
	}
	if o, _ := jsonString(get(ms, "op")); o != "replace" {
		return 0, false
	}
	return count(get(ms, "start"))
}

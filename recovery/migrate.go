package recovery

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/seglog/seglog/event"
)

// SystemPromptPlugin is the source of the system head a v2 → v3 migration
// inserts.
const SystemPromptPlugin = "@deepseek-ai/dsh-system-prompt"

// MigrateV2 converts the events of a format-v2 session (id) into the v3
// shape, as the reference's v2-to-v3 upgrade does (REFERENCE-cases.md,
// "Migrated"):
//
//   - an empty system/message head is inserted right after the first
//     step/start, at that event's time, with id "v2-to-v3-system-" and the
//     hex SHA-256 of the session id and the step/start's seq (deterministic,
//     so migrating twice gives the same log); the events after it move up
//     one seq, and so do the seqs that refer to them: sourceEventSeqs,
//     replace spans, and the seqs event data carries (remapDataSeqs:
//     command/done's sourceEventSeq, compaction's shadowedRange and
//     shadowedSeqs, session/title's and session/title-llm-request's
//     messageSeqs), where a data seq that is not a count naming an earlier
//     event is refused with a *MigrationError (ErrMigration);
//   - a v2 replace envelope {"op":"replace","start":a,"end":b} becomes
//     {"op":"replace","startSeq":a',"endSeq":b'};
//   - every type outside the built-in catalog is refused, even an
//     ignorable one (historical migration knows only the historical
//     catalog), with an *event.UnsupportedError naming the seq and type.
//
// The input is not modified. A log without a step/start gets no head.
func MigrateV2(id string, events []event.Event) ([]event.Event, error) {
	cat := event.NewCatalog()
	at := -1 // index of the first step/start
	for i := range events {
		e := &events[i]
		if e.Seq != uint64(i) {
			return nil, &SequenceError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("seq %d at position %d", e.Seq, i)}
		}
		if !cat.Known(e.Type) {
			return nil, &event.UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("unknown historical event type %q at seq %d", e.Type, e.Seq)}
		}
		if at < 0 && e.Type == TypeStepStart {
			at = i
		}
	}
	if at < 0 {
		out := make([]event.Event, len(events))
		same := func(s uint64) uint64 { return s }
		for i := range events {
			out[i] = events[i].Clone()
			if err := remapDataSeqs(&out[i], same); err != nil {
				return nil, err
			}
			if err := upgradeSurfaceOp(&out[i], same); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	pos := uint64(at + 1) // the head's seq; everything from here moves up one
	shift := func(s uint64) uint64 {
		if s >= pos {
			return s + 1
		}
		return s
	}
	out := make([]event.Event, 0, len(events)+1)
	for i := range events {
		e := events[i].Clone()
		if err := remapDataSeqs(&e, shift); err != nil {
			return nil, err
		}
		e.Seq = shift(e.Seq)
		for j, s := range e.SourceEventSeqs {
			e.SourceEventSeqs[j] = shift(s)
		}
		if err := upgradeSurfaceOp(&e, shift); err != nil {
			return nil, err
		}
		out = append(out, e)
		if i == at {
			out = append(out, systemHead(id, &events[at], pos))
		}
	}
	return out, nil
}

func systemHead(id string, step *event.Event, seq uint64) event.Event {
	// The reference's identity: the SHA-256 of the JSON array
	// ["session-format-v2-to-v3", <session id>, <anchor seq>, <anchor type>]
	// (the anchor: the source's first step/start, at its source seq).
	var key bytes.Buffer
	enc := json.NewEncoder(&key)
	enc.SetEscapeHTML(false) // as JSON.stringify writes it
	enc.Encode([]any{"session-format-v2-to-v3", id, step.Seq, step.Type})
	sum := sha256.Sum256(bytes.TrimSuffix(key.Bytes(), []byte("\n")))
	msg := struct {
		ID      string            `json:"id"`
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
		Source  map[string]string `json:"source"`
	}{
		ID:      "v2-to-v3-system-" + hex.EncodeToString(sum[:]),
		Role:    "system",
		Content: []json.RawMessage{},
		Source:  map[string]string{"kind": "plugin", "plugin": SystemPromptPlugin},
	}
	m, _ := json.Marshal(msg)
	return event.Event{
		Seq:       seq,
		Type:      TypeSystemMessage,
		Time:      step.Time,
		Data:      object("turn", field(step.Data, "turn"), "step", field(step.Data, "step"), "message", json.RawMessage(m)),
		SurfaceOp: json.RawMessage(`"append"`), // the first head cites nothing
	}
}

// upgradeSurfaceOp rewrites a replace span to v3's keys, with its seqs
// mapped by shift. "append" and other shapes are left as they are.
func upgradeSurfaceOp(e *event.Event, shift func(uint64) uint64) error {
	if len(e.SurfaceOp) == 0 || e.SurfaceOp[0] != '{' {
		return nil
	}
	var op struct {
		Op       string  `json:"op"`
		Start    *uint64 `json:"start"`
		End      *uint64 `json:"end"`
		StartSeq *uint64 `json:"startSeq"`
		EndSeq   *uint64 `json:"endSeq"`
	}
	if err := json.Unmarshal(e.SurfaceOp, &op); err != nil {
		return &SequenceError{Seq: e.Seq, Type: e.Type, Reason: "surfaceOp: " + err.Error()}
	}
	if op.Op != "replace" {
		return nil
	}
	start, end := op.StartSeq, op.EndSeq
	if op.Start != nil || op.End != nil {
		start, end = op.Start, op.End
	}
	if start == nil || end == nil || *start > *end {
		return &SequenceError{Seq: e.Seq, Type: e.Type, Reason: "replace surfaceOp without a valid span"}
	}
	b, _ := json.Marshal(struct {
		Op       string `json:"op"`
		StartSeq uint64 `json:"startSeq"`
		EndSeq   uint64 `json:"endSeq"`
	}{"replace", shift(*start), shift(*end)})
	e.SurfaceOp = b
	return nil
}

// remapDataSeqs maps by shift the seqs of the session that e's data cites,
// the ones the reference's v2-to-v3 edge maps (its remapEvent,
// session-format-v2-to-v3/src/references.ts): command/done's
// sourceEventSeq when present; compaction/summary's and compaction/prune's
// shadowedRange start and end (its other members kept) and shadowedSeqs;
// session/title's and session/title-llm-request's messageSeqs. Each must be
// a count naming an event before e (e.Seq is still its source seq), or e
// is refused. Other numbers in data (delivery watermarks, session-reference
// captures, workflow-local seq, model input, tool JSON) are not seqs of
// the session and stay. The data is left byte for byte as it is unless a
// seq moves; then only the members holding seqs are rewritten, in place.
func remapDataSeqs(e *event.Event, shift func(uint64) uint64) error {
	switch e.Type {
	case "command/done", "compaction/summary", "compaction/prune", "session/title", "session/title-llm-request":
	default:
		return nil
	}
	fail := func(format string, args ...any) error {
		return &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
	}
	data, err := members(e.Data)
	if err != nil {
		return fail("data must be an object")
	}
	moved := false
	one := func(raw json.RawMessage, what string) (json.RawMessage, error) {
		n, ok := count(raw)
		if !ok {
			return nil, fail("%s %s is not a seq", what, orUndefined(raw))
		}
		if n >= e.Seq {
			return nil, fail("%s %d does not name an earlier event", what, n)
		}
		t := shift(n)
		moved = moved || t != n
		return jsonText(t), nil
	}
	list := func(key string) error {
		raw := get(data, key)
		var items []json.RawMessage
		if raw == nil || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			return fail("%s %s must be an array", key, orUndefined(raw))
		}
		for i, it := range items {
			v, err := one(it, key)
			if err != nil {
				return err
			}
			items[i] = v
		}
		data = set(data, key, jsonText(items))
		return nil
	}
	switch e.Type {
	case "command/done":
		if raw := get(data, "sourceEventSeq"); raw != nil {
			v, err := one(raw, "sourceEventSeq")
			if err != nil {
				return err
			}
			data = set(data, "sourceEventSeq", v)
		}
	case "compaction/summary", "compaction/prune":
		raw := get(data, "shadowedRange")
		rng, err := members(raw)
		if err != nil {
			return fail("shadowedRange %s must be an object", orUndefined(raw))
		}
		for _, k := range []string{"start", "end"} {
			v, err := one(get(rng, k), "shadowedRange "+k)
			if err != nil {
				return err
			}
			rng = set(rng, k, v)
		}
		data = set(data, "shadowedRange", encode(rng))
		if err := list("shadowedSeqs"); err != nil {
			return err
		}
	default: // the titles
		if err := list("messageSeqs"); err != nil {
			return err
		}
	}
	if moved {
		e.Data = encode(data)
	}
	return nil
}

package recovery

import (
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
// "Migrated"; docs/DESIGN.md, Catalog, formats, seeds), in one pass:
//
//   - system prompts become system/message events: an empty head is
//     inserted right after the first step/start, and a request/header whose
//     header.system (a string; anything else counts as "") differs from the
//     prompt in force gets, right before it, a system/message carrying the
//     new prompt (an empty content list for ""), which replaces the head
//     (surfaceOp replace of the last one, sourceEventSeqs citing it) and is
//     the head from then on; header.system is removed from every
//     request/header. A changed prompt outside an open step (before the
//     first step/start, or after a step/end or turn/end) is refused, and so
//     is a surface event before the first step/start: the reference will
//     not move events to give them a head. Each inserted message is at its
//     anchor's time, in the anchor's turn and step (the open step's), from
//     the system-prompt plugin, with id "v2-to-v3-system-" and the hex
//     SHA-256 of the JSON array ["session-format-v2-to-v3", id, anchor
//     source seq, anchor type] (deterministic, so migrating twice gives the
//     same log). An id that equals a message id of the log (user/message's,
//     assistant/message's and tool/result's message, agent/inbox/spliced's
//     inserted and session/title-llm-request's messages), before or after
//     it, is refused;
//   - every source event moves to its target seq, and so do the seqs that
//     refer to earlier events: sourceEventSeqs, replace spans, and the seqs
//     event data carries (remapDataSeqs: command/done's sourceEventSeq,
//     compaction's shadowedRange and shadowedSeqs, session/title's and
//     session/title-llm-request's messageSeqs); one that is not a count
//     naming an earlier event is refused with a *MigrationError
//     (ErrMigration);
//   - a v2 replace envelope {"op":"replace","start":a,"end":b} becomes
//     {"op":"replace","startSeq":a',"endSeq":b'};
//   - the code-mode vocabulary is renamed (renameCodeMode): the
//     tool/code-dispatch events become tool/ptc-dispatch ones, preset
//     "code" becomes "ptc", plugin "tools-code-mode" "tools-ptc";
//   - every type outside the built-in catalog is refused, even an
//     ignorable one (historical migration knows only the historical
//     catalog), with an *event.UnsupportedError naming the seq and type.
//
// Before any of that, each event is admitted as the reference's v2 → v3
// edge admits it (admitV2: the released v2 inventory and exact data
// members, content kinds, message sources, delivery markers), and a
// delivery marker claiming format v3 is refused. MigrateV2 takes the
// session as unseeded and without a parent: a delivery marker of format
// v2 naming another session is refused; MigrateV2Session knows the
// header.
//
// The input is not modified. A log without a step/start gets no head.
func MigrateV2(id string, events []event.Event) ([]event.Event, error) {
	return MigrateV2Session(LegacySession{ID: id}, events)
}

// MigrateV2Session is MigrateV2 for the session s (its id, parent and
// whether it is seeded; Inherited and CreatedAt are not used): a delivery
// marker of format v2 naming another session than s is the parent's, and
// is refused unless s has a parent and the marker is before the inherited
// end-seed marker ("current-generation delivery marker names the wrong
// Session", as the reference's v2 → v3 edge has it).
func MigrateV2Session(s LegacySession, events []event.Event) ([]event.Event, error) {
	cat := event.NewCatalog()
	id := s.ID
	m := v2Migration{id: id, head: -1, original: map[string]bool{}, generated: map[string]bool{}}
	foreign := int64(-1) // the source seq of the last v2 delivery marker naming another session
	cut := int64(-1)     // the source seq of the inherited end-seed marker (0 for an unseeded session)
	if !s.IsSeeded {
		cut = 0
	}
	m.out = make([]event.Event, 0, len(events)+1)
	m.mapping = make([]uint64, 0, len(events))
	for i := range events {
		src := &events[i]
		if src.Seq != uint64(i) {
			return nil, &SequenceError{Seq: src.Seq, Type: src.Type, Reason: fmt.Sprintf("seq %d at position %d", src.Seq, i)}
		}
		if !cat.Known(src.Type) {
			return nil, &event.UnsupportedError{Seq: src.Seq, Type: src.Type, Reason: fmt.Sprintf("unknown historical event type %q at seq %d", src.Type, src.Seq)}
		}
		if err := m.event(src); err != nil {
			return nil, err
		}
		switch src.Type {
		case "session/end-seed":
			if string(field(src.Data, "inherited")) == "true" {
				cut = int64(src.Seq)
			}
		case "session-log-deepseek/delivery-accepted":
			if v := numberOf(field(src.Data, "sessionFormatVersion")); v.ok && v.v == 2 {
				if sid, _ := jsonString(field(src.Data, "sessionId")); sid != id {
					foreign = int64(src.Seq)
				}
			}
		}
	}
	// A seeded log without its marker has no cut: the seed rules report it.
	if foreign >= 0 && (s.ParentSession == "" || (cut >= 0 && foreign >= cut)) {
		e := &events[foreign]
		return nil, &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: "current-generation delivery marker names the wrong Session"}
	}
	return m.out, nil
}

// v2Migration is the state of one MigrateV2 pass.
type v2Migration struct {
	id      string
	out     []event.Event
	mapping []uint64 // source seq → target seq, for the events done
	// step is the open step's turn and step (nil outside a step).
	step      []json.RawMessage
	head      int64  // the target seq of the system head in force, -1 before the first
	prompt    string // the system prompt in force
	original  map[string]bool
	generated map[string]bool
}

func (m *v2Migration) refuse(e *event.Event, format string, args ...any) error {
	return &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
}

func (m *v2Migration) event(src *event.Event) error {
	if err := admitV2(src); err != nil {
		return err
	}
	if err := m.observeIDs(src); err != nil {
		return err
	}
	e := src.Clone()
	if e.Type == "request/header" {
		data, err := members(e.Data)
		if err != nil {
			return m.refuse(src, "request/header data must be an object")
		}
		header, err := members(get(data, "header"))
		if err != nil {
			return m.refuse(src, "request header must be an object")
		}
		if sys := get(header, "system"); sys != nil {
			prompt, _ := jsonString(sys) // a non-string prompt counts as none
			if prompt != m.prompt {
				if err := m.system(prompt, src); err != nil {
					return err
				}
			}
			e.Data = encode(set(data, "header", encode(without(header, "system"))))
		} else if m.prompt != "" {
			if err := m.system("", src); err != nil {
				return err
			}
		}
	}
	if isSurfaceType(e.Type) && m.head < 0 {
		return m.refuse(src, "format v2 surface before first step cannot acquire a system head without changing chronology")
	}
	if e.Type == "session-log-deepseek/delivery-accepted" {
		if v := numberOf(field(src.Data, "sessionFormatVersion")); v.ok && v.v == 3 {
			return m.refuse(src, "format v2 delivery marker claims target format v3")
		}
	}
	target := uint64(len(m.out))
	mapped := func(s uint64) (uint64, bool) {
		if s >= src.Seq || s >= uint64(len(m.mapping)) {
			return 0, false
		}
		return m.mapping[s], true
	}
	if err := remapDataSeqs(&e, mapped); err != nil {
		return err
	}
	for j, s := range e.SourceEventSeqs {
		e.SourceEventSeqs[j], _ = mapped(s) // v2SurfaceMetadata checked them
	}
	if err := upgradeSurfaceOp(&e, mapped); err != nil {
		return err
	}
	if err := renameCodeMode(&e); err != nil {
		return err
	}
	e.Seq = target
	m.mapping = append(m.mapping, target)
	m.out = append(m.out, e)
	switch src.Type {
	case TypeStepStart:
		m.step = []json.RawMessage{field(src.Data, "turn"), field(src.Data, "step")}
		if m.head < 0 {
			return m.system("", src)
		}
	case TypeStepEnd, TypeTurnEnd:
		m.step = nil
	}
	return nil
}

// v2SurfaceMetadata checks a v2 surface event's surfaceOp and
// sourceEventSeqs as the reference's v2 admission does, with its reasons:
// user/message, assistant/message and tool/result need a surfaceOp,
// "append" or exactly {"op":"replace","start":a,"end":b} naming earlier
// events; sourceEventSeqs are unique earlier seqs, and an assistant/message
// has none (v2 embeds its stream).
func v2SurfaceMetadata(e *event.Event) error {
	switch e.Type {
	case "user/message", "assistant/message", "tool/result":
	default:
		return nil
	}
	fail := func(format string, args ...any) error {
		return &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
	}
	if e.Type == "assistant/message" && e.SourceEventSeqs != nil {
		return fail("%s %d retains obsolete chunk references", e.Type, e.Seq)
	}
	seen := map[uint64]bool{}
	for _, s := range e.SourceEventSeqs {
		if s >= e.Seq || seen[s] {
			return fail("%s %d sourceEventSeqs must be unique earlier seqs", e.Type, e.Seq)
		}
		seen[s] = true
	}
	if len(e.SurfaceOp) == 0 {
		return fail("%s requires surfaceOp", e.Type)
	}
	if string(e.SurfaceOp) == `"append"` {
		return nil
	}
	op, err := members(e.SurfaceOp)
	if err != nil {
		return fail("%s %d surfaceOp must be a JSON object", e.Type, e.Seq)
	}
	if err := exactMembers(2, e, op, []string{"op", "start", "end"}, nil, fmt.Sprintf("%s %d surfaceOp", e.Type, e.Seq)); err != nil {
		return err
	}
	if k, _ := jsonString(get(op, "op")); k != "replace" {
		return fail("%s %d surfaceOp must replace", e.Type, e.Seq)
	}
	start, okS := count(get(op, "start"))
	end, okE := count(get(op, "end"))
	if !okS || !okE || start >= e.Seq || end >= e.Seq {
		return fail("%s %d has an invalid surface replacement", e.Type, e.Seq)
	}
	return nil
}

// isSurfaceType reports whether typ is one of the reference's v2 surface
// types, the ones that need a system head before them.
func isSurfaceType(typ string) bool {
	switch typ {
	case TypeSystemMessage, "user/message", "assistant/message", "tool/result":
		return true
	}
	return false
}

// observeIDs records the message ids src carries, refusing one that a
// system message inserted earlier already has.
func (m *v2Migration) observeIDs(src *event.Event) error {
	var msgs []json.RawMessage
	switch src.Type {
	case "user/message":
		msgs = []json.RawMessage{src.Data}
	case "assistant/message", "tool/result":
		msgs = []json.RawMessage{field(src.Data, "message")}
	case "agent/inbox/spliced", "session/title-llm-request":
		json.Unmarshal(field(src.Data, messagesKey(src.Type)), &msgs)
	}
	for _, msg := range msgs {
		id, ok := jsonString(field(msg, "id"))
		if !ok {
			continue
		}
		if m.generated[id] {
			return m.refuse(src, "source message id collides with a generated system message id")
		}
		m.original[id] = true
	}
	return nil
}

// system appends a system/message carrying prompt (empty content for ""),
// anchored at the source event anchor: the first head (after the first
// step/start) or a prompt change (before the request/header that makes
// it), which replaces the head in force.
func (m *v2Migration) system(prompt string, anchor *event.Event) error {
	if m.step == nil {
		return m.refuse(anchor, "format v2 changed request prompt outside an open step cannot retain source chronology")
	}
	// The reference's identity: the SHA-256 of the JSON array
	// ["session-format-v2-to-v3", <session id>, <anchor seq>, <anchor type>]
	// (the anchor at its source seq).
	sum := sha256.Sum256(jsonText([]any{"session-format-v2-to-v3", m.id, anchor.Seq, anchor.Type}))
	id := "v2-to-v3-system-" + hex.EncodeToString(sum[:])
	if m.original[id] || m.generated[id] {
		return m.refuse(anchor, "generated system message id collides with an existing message id")
	}
	m.generated[id] = true
	content := json.RawMessage(`[]`)
	if prompt != "" {
		block := object("type", json.RawMessage(`"text"`), "text", jsonText(prompt))
		content = append(append(json.RawMessage{'['}, block...), ']')
	}
	msg := object("id", jsonText(id), "role", json.RawMessage(`"system"`),
		"source", object("kind", json.RawMessage(`"plugin"`), "plugin", jsonText(SystemPromptPlugin)), "content", content)
	e := event.Event{
		Seq:       uint64(len(m.out)),
		Type:      TypeSystemMessage,
		Time:      anchor.Time,
		Data:      object("turn", m.step[0], "step", m.step[1], "message", msg),
		SurfaceOp: json.RawMessage(`"append"`), // the first head cites nothing
	}
	if m.head >= 0 {
		e.SurfaceOp = jsonText(struct {
			Op       string `json:"op"`
			StartSeq int64  `json:"startSeq"`
			EndSeq   int64  `json:"endSeq"`
		}{"replace", m.head, m.head})
		e.SourceEventSeqs = []uint64{uint64(m.head)}
	}
	m.head = int64(e.Seq)
	m.prompt = prompt
	m.out = append(m.out, e)
	return nil
}

// renameCodeMode renames the reference's code-mode vocabulary to its
// programmatic-tool-calling one, as its v2-to-v3 edge does: the
// tool/code-dispatch-start and tool/code-dispatch types become
// tool/ptc-dispatch-start and tool/ptc-dispatch; agent-preset/selected's
// agentPreset "code" becomes "ptc"; a message source {kind: "plugin",
// plugin: "tools-code-mode"} (user/message's, and the messages of
// agent/inbox/spliced's inserted and session/title-llm-request's
// messages) becomes plugin "tools-ptc". Nothing else (content, tool
// arguments, ids) is touched, and data is rewritten only where a name
// changes.
func renameCodeMode(e *event.Event) error {
	switch e.Type {
	case "tool/code-dispatch-start":
		e.Type = "tool/ptc-dispatch-start"
	case "tool/code-dispatch":
		e.Type = "tool/ptc-dispatch"
	case "agent-preset/selected":
		data, err := members(e.Data)
		if p, _ := jsonString(get(data, "agentPreset")); err == nil && p == "code" {
			e.Data = encode(set(data, "agentPreset", json.RawMessage(`"ptc"`)))
		}
	case "user/message":
		if msg, ok := renameSource(e.Data); ok {
			e.Data = msg
		}
	case "agent/inbox/spliced", "session/title-llm-request":
		key := "inserted"
		if e.Type == "session/title-llm-request" {
			key = "messages"
		}
		data, err := members(e.Data)
		if err != nil {
			return nil
		}
		var msgs []json.RawMessage
		if json.Unmarshal(get(data, key), &msgs) != nil {
			return nil
		}
		changed := false
		for i, msg := range msgs {
			if r, ok := renameSource(msg); ok {
				msgs[i], changed = r, true
			}
		}
		if changed {
			e.Data = encode(set(data, key, jsonText(msgs)))
		}
	}
	return nil
}

// renameSource returns msg with its source's plugin "tools-code-mode"
// renamed "tools-ptc", and whether it had one.
func renameSource(msg json.RawMessage) (json.RawMessage, bool) {
	ms, err := members(msg)
	if err != nil {
		return nil, false
	}
	src, err := members(get(ms, "source"))
	kind, _ := jsonString(get(src, "kind"))
	plugin, _ := jsonString(get(src, "plugin"))
	if err != nil || kind != "plugin" || plugin != "tools-code-mode" {
		return nil, false
	}
	return encode(set(ms, "source", encode(set(src, "plugin", json.RawMessage(`"tools-ptc"`))))), true
}

// V3AgentPreset is a session header's agentPreset as the reference's
// v2-to-v3 edge carries it over: "code" is renamed "ptc".
func V3AgentPreset(p string) string {
	if p == "code" {
		return "ptc"
	}
	return p
}

// upgradeSurfaceOp rewrites a replace span to v3's keys, with its seqs
// mapped by mapped (which refuses a seq that names no earlier source
// event). "append" and other shapes are left as they are.
func upgradeSurfaceOp(e *event.Event, mapped func(uint64) (uint64, bool)) error {
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
	s, okS := mapped(*start)
	t, okE := mapped(*end)
	if !okS || !okE {
		return &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: "replace surfaceOp span does not name earlier source events"}
	}
	b, _ := json.Marshal(struct {
		Op       string `json:"op"`
		StartSeq uint64 `json:"startSeq"`
		EndSeq   uint64 `json:"endSeq"`
	}{"replace", s, t})
	e.SurfaceOp = b
	return nil
}

// remapDataSeqs maps by mapped the seqs of the session that e's data cites,
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
func remapDataSeqs(e *event.Event, mapped func(uint64) (uint64, bool)) error {
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
		t, ok := mapped(n)
		if n >= e.Seq || !ok {
			return nil, fail("%s %d does not name an earlier event", what, n)
		}
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

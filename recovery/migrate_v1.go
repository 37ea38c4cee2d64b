package recovery

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/seglog/seglog/event"
)

// MigrateV1 converts the events of a format-v1 session into the v3 shape:
// MigrateV1ToV2, then MigrateV2. It returns the migrated events and the
// seq of the inherited end-seed marker of a seeded session (0 for an
// unseeded one). The input is not modified.
func MigrateV1(s LegacySession, events []event.Event) ([]event.Event, uint64, error) {
	v2, cut, err := MigrateV1ToV2(s, events)
	if err != nil {
		return nil, 0, err
	}
	v3, err := MigrateV2Session(s, v2)
	if err != nil {
		return nil, 0, err
	}
	if s.IsSeeded { // v2 → v3 may move the marker (a system head before it)
		for i := range v3 {
			if isTaggedMarker(&v3[i]) {
				cut = v3[i].Seq
			}
		}
	}
	return v3, cut, nil
}

// MigrateV1ToV2 converts the events of a format-v1 session into the v2
// shape, as the reference's v1-to-v2 edge does:
//
//   - v1 writes each model stream delta as a top-level assistant/chunk;
//     v2 embeds the timed stream of an attempt, compacted (runs of text,
//     reasoning and tool-call deltas of one index become *-chunks records
//     with time gaps; other chunks stay whole), in data.stream of the
//     assistant/message that cites the whole attempt, in order, in its
//     sourceEventSeqs (which v2 drops). An attempt no message claims (a
//     failed, retried or cancelled one: closed by step/end, turn/end,
//     llm/retry, llm/retry-started, a chunk of another step, a chunk after
//     a finish) becomes one assistant/attempt at its last chunk's place.
//     A message citing part of an attempt, or none while one is pending,
//     is refused; a message without citations and no attempt gets an
//     empty stream. Events between an attempt's chunks keep their order.
//   - The surviving events are renumbered densely, and every reference to
//     an earlier seq is mapped (sourceEventSeqs, a replace surfaceOp,
//     command/done's sourceEventSeq, compaction's shadowedRange and
//     shadowedSeqs, session/title's messageSeqs); a reference to a
//     consumed chunk is refused.
//   - A legacy restart (a non-empty next-turn agent/inbox/spliced, then
//     the next turn/start without the prior turn's turn/end) gets that
//     turn/end, with reason interrupted; any other turn/start inside an
//     open turn is refused. A legacy goal message (user/message whose
//     source is {"kind":"goal","change":…}) becomes a goal/change of that
//     change followed by the message with source {"kind":"plugin",
//     "plugin":"goal"}.
//   - A seeded session's cut, the v1 header's seedLength, becomes a tagged
//     session/end-seed {"inherited":true}: the untagged marker at the cut
//     is tagged, or a marker is inserted before the first event at or
//     after the cut (at the end if there is none). The cut moves with the
//     events before it; a cut splitting an attempt is refused. The second
//     result is the marker's seq (0 for an unseeded session).
//   - Only the released v0/v1 event types are taken (an unknown type is
//     refused even when ignorable, with an *event.UnsupportedError), and
//     their data members are checked against the released inventory.
//
// Refusals are *MigrationError (ErrMigration), *SequenceError for seqs
// that are not dense, *event.UnsupportedError for unknown types.
func MigrateV1ToV2(s LegacySession, events []event.Event) ([]event.Event, uint64, error) {
	if !s.IsSeeded && s.Inherited != 0 {
		return nil, 0, &MigrationError{From: 1, Reason: fmt.Sprintf("unseeded session with an inherited count of %d", s.Inherited)}
	}
	if s.Inherited > uint64(len(events)) {
		return nil, 0, &MigrationError{From: 1, Reason: fmt.Sprintf("inherited count %d exceeds the session's %d events", s.Inherited, len(events))}
	}
	m := &v1Migration{s: s, mapping: make(map[uint64]uint64, len(events)), lastTime: s.CreatedAt, out: make([]event.Event, 0, len(events)+1)}
	if !s.IsSeeded {
		m.cutSet = true
	}
	for i := range events {
		e := &events[i]
		if e.Seq != uint64(i) {
			return nil, 0, &SequenceError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("seq %d at position %d", e.Seq, i)}
		}
		if err := m.event(e); err != nil {
			return nil, 0, err
		}
	}
	if err := m.finishAttempt(); err != nil {
		return nil, 0, err
	}
	if !m.cutSet {
		m.cut, m.cutSet = m.next, true
		m.out = append(m.out, marker(m.next, m.lastTime))
		m.next++
	}
	return m.out, m.cut, nil
}

type v1Migration struct {
	s        LegacySession
	mapping  map[uint64]uint64 // source seq → target seq of the events kept
	pending  *attempt          // the attempt not settled yet
	after    []event.Event     // events after its last chunk, held until it settles
	next     uint64            // the next target seq
	cut      uint64            // the target cut, once cutSet
	cutSet   bool
	lastTime int64
	out      []event.Event

	// the legacy turn state
	openTurn, openStep *number
	previous           *event.Event
}

// attempt is one model stream attempt being gathered from its chunks.
type attempt struct {
	turn, step number
	spans      []span // the source seqs of its chunks
	chunks     uint64
	lastSeq    uint64
	lastTime   int64
	terminal   bool // a finish chunk seen
	stream     accumulator
}

type span struct{ first, n uint64 }

func (m *v1Migration) refuse(e *event.Event, format string, args ...any) error {
	return &MigrationError{From: 1, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
}

func (m *v1Migration) event(e *event.Event) error {
	if e.Type == "assistant/chunk" && len(e.Data) == 0 {
		return m.refuse(e, "assistant/chunk %d lacks required member data", e.Seq)
	}
	if _, ok := legacyInventory[e.Type]; !ok {
		return &event.UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("format v1 contains unknown event type %q at seq %d", e.Type, e.Seq)}
	}
	if e.Type != "assistant/chunk" {
		if err := checkLegacyPayload(1, e); err != nil {
			return err
		}
	}
	data, err := members(e.Data)
	if err != nil {
		return m.refuse(e, "data must be an object")
	}
	interrupted := m.interruptedTurn(e, data)
	if e.Type == "turn/start" && m.openTurn != nil && interrupted == nil {
		return m.refuse(e, "turn/start %s does not close the prior turn", orUndefined(get(data, "turn")))
	}
	if e.Type == "session-log-deepseek/delivery-accepted" {
		inherited := m.s.ParentSession != "" && e.Seq < m.s.Inherited
		id, _ := jsonString(get(data, "sessionId"))
		if string(get(data, "sessionFormatVersion")) == "1" && !inherited && id != m.s.ID {
			return m.refuse(e, "current-generation delivery marker names the wrong Session")
		}
	}
	m.observeTurn(e, data)
	m.lastTime = e.Time
	if interrupted != nil {
		if err := m.finishAttempt(); err != nil {
			return err
		}
		if err := m.emitGenerated(e.Seq, *interrupted); err != nil {
			return err
		}
	}
	if change, msg, ok := splitGoalChange(e, data); ok {
		if err := m.emitGenerated(e.Seq, change); err != nil {
			return err
		}
		return m.emitSource(msg)
	}
	switch {
	case e.Type == "assistant/chunk":
		return m.chunk(e, data)
	case e.Type == "assistant/message":
		return m.message(e, data)
	case e.Type == "turn/end" || e.Type == "step/end" || e.Type == "llm/retry" || e.Type == "llm/retry-started":
		if err := m.finishAttempt(); err != nil {
			return err
		}
		return m.emitSource(*e)
	case m.pending != nil:
		m.after = append(m.after, *e)
		return nil
	}
	return m.emitSource(*e)
}

func orUndefined(raw json.RawMessage) string {
	if raw == nil {
		return "undefined"
	}
	return string(raw)
}

// interruptedTurn returns the turn/end a legacy restart lacks: a
// turn/start of the next turn right after a non-empty next-turn inbox
// splice, in a turn with no step open.
func (m *v1Migration) interruptedTurn(e *event.Event, data []member) *event.Event {
	if e.Type != "turn/start" || m.openTurn == nil || m.openStep != nil || m.previous == nil || m.previous.Type != "agent/inbox/spliced" {
		return nil
	}
	if t := numberOf(get(data, "turn")); !t.ok || !m.openTurn.ok || t.v != m.openTurn.v+1 {
		return nil
	}
	splice, err := members(m.previous.Data)
	if err != nil {
		return nil
	}
	var inserted []json.RawMessage
	if target, _ := jsonString(get(splice, "target")); target != "next-turn" || json.Unmarshal(get(splice, "inserted"), &inserted) != nil || len(inserted) == 0 {
		return nil
	}
	return &event.Event{Type: TypeTurnEnd, Seq: e.Seq, Time: e.Time,
		Data: object("turn", m.openTurn.raw, "reason", json.RawMessage(`{"kind":"interrupted"}`))}
}

func (m *v1Migration) observeTurn(e *event.Event, data []member) {
	switch e.Type {
	case TypeTurnStart:
		t := numberOf(get(data, "turn"))
		m.openTurn, m.openStep = &t, nil
	case TypeTurnEnd:
		m.openTurn, m.openStep = nil, nil
	case TypeStepStart:
		s := numberOf(get(data, "step"))
		m.openStep = &s
	case TypeStepEnd:
		m.openStep = nil
	}
	m.previous = e
}

// splitGoalChange splits a legacy goal message into its goal/change and
// the message with plugin attribution.
func splitGoalChange(e *event.Event, data []member) (event.Event, event.Event, bool) {
	if e.Type != "user/message" {
		return event.Event{}, event.Event{}, false
	}
	source, err := members(get(data, "source"))
	if err != nil {
		return event.Event{}, event.Event{}, false
	}
	change := get(source, "change")
	if kind, _ := jsonString(get(source, "kind")); kind != "goal" || change == nil {
		return event.Event{}, event.Event{}, false
	}
	ch := event.Event{Type: "goal/change", Seq: e.Seq, Time: e.Time, Data: change}
	msg := e.Clone()
	msg.Data = encode(set(data, "source", json.RawMessage(`{"kind":"plugin","plugin":"goal"}`)))
	return ch, msg, true
}

func (m *v1Migration) chunk(e *event.Event, data []member) error {
	turn, step := numberOf(get(data, "turn")), numberOf(get(data, "step"))
	if p := m.pending; p != nil && (p.terminal || !p.turn.same(turn) || !p.step.same(step)) {
		if err := m.finishAttempt(); err != nil {
			return err
		}
	} else if p != nil {
		if err := m.flushAfter(); err != nil {
			return err
		}
	}
	if m.pending == nil {
		m.pending = &attempt{turn: turn, step: step}
	}
	p := m.pending
	if err := m.checkCut(p, e); err != nil {
		return err
	}
	chunk := get(data, "chunk")
	typ, err := p.stream.push(e.Time, chunk)
	if err != nil {
		return m.refuse(e, "%v", err)
	}
	if n := len(p.spans); n > 0 && p.spans[n-1].first+p.spans[n-1].n == e.Seq {
		p.spans[n-1].n++
	} else {
		p.spans = append(p.spans, span{e.Seq, 1})
	}
	p.chunks++
	p.lastSeq, p.lastTime = e.Seq, e.Time
	if typ == "finish" {
		p.terminal = true
	}
	return nil
}

// checkCut refuses an attempt whose chunks (or message) lie on both sides
// of the inherited cut.
func (m *v1Migration) checkCut(p *attempt, e *event.Event) error {
	first := e.Seq
	if len(p.spans) > 0 {
		first = p.spans[0].first
	}
	if cut := m.s.Inherited; (first < cut) != (e.Seq < cut) {
		return m.refuse(e, "inherited Session cut %d splits one Assistant attempt", cut)
	}
	return nil
}

func (m *v1Migration) message(e *event.Event, data []member) error {
	turn, step := numberOf(get(data, "turn")), numberOf(get(data, "step"))
	p := m.pending
	if p != nil && (!p.turn.same(turn) || !p.step.same(step)) {
		if err := m.finishAttempt(); err != nil {
			return err
		}
		return m.emitSource(withStream(e, data, &attempt{}))
	}
	// A v1 message without citations and one with an empty list are alike
	// here: the store keeps no empty sourceEventSeqs.
	if len(e.SourceEventSeqs) == 0 {
		if p != nil {
			return m.refuse(e, "assistant/message %d does not cite its complete v1 chunk attempt", e.Seq)
		}
		return m.emitSource(withStream(e, data, &attempt{}))
	}
	if p == nil || !p.citedBy(e.SourceEventSeqs) {
		return m.refuse(e, "assistant/message %d chunk references are not one complete ordered attempt", e.Seq)
	}
	if err := m.checkCut(p, e); err != nil {
		return err
	}
	if err := m.flushAfter(); err != nil {
		return err
	}
	m.pending = nil
	return m.emitSource(withStream(e, data, p))
}

// citedBy reports whether sources are exactly the attempt's chunks, in
// order.
func (p *attempt) citedBy(sources []uint64) bool {
	if uint64(len(sources)) != p.chunks {
		return false
	}
	i := 0
	for _, sp := range p.spans {
		for k := uint64(0); k < sp.n; k++ {
			if sources[i] != sp.first+k {
				return false
			}
			i++
		}
	}
	return true
}

// withStream is message e carrying the stream of p, without citations.
func withStream(e *event.Event, data []member, p *attempt) event.Event {
	out := e.Clone()
	out.Data = encode(set(data, "stream", p.stream.json()))
	out.SourceEventSeqs = nil
	return out
}

// finishAttempt settles the pending attempt that no message claimed: an
// assistant/attempt at its last chunk's place, then the events held
// after it.
func (m *v1Migration) finishAttempt() error {
	p := m.pending
	if p == nil {
		return nil
	}
	att := event.Event{Type: "assistant/attempt", Seq: p.lastSeq, Time: p.lastTime,
		Data: object("turn", p.turn.raw, "step", p.step.raw, "stream", p.stream.json())}
	if err := m.emitGenerated(p.lastSeq, att); err != nil {
		return err
	}
	m.pending = nil
	return m.flushAfter()
}

func (m *v1Migration) flushAfter() error {
	held := m.after
	m.after = nil
	for i := range held {
		if err := m.emitSource(held[i]); err != nil {
			return err
		}
	}
	return nil
}

// emitSource emits a source event (or its rewrite) at the next target seq,
// recording where its seq went.
func (m *v1Migration) emitSource(e event.Event) error {
	if m.s.IsSeeded && e.Seq == m.s.Inherited && e.Type == TypeEndSeed {
		e.Data = json.RawMessage(`{"inherited":true}`)
	}
	m.ensureCut(e.Seq, e.Time, e.Type)
	m.mapping[e.Seq] = m.next
	return m.emit(e)
}

// emitGenerated emits an event the migration makes, standing at source
// seq origin.
func (m *v1Migration) emitGenerated(origin uint64, e event.Event) error {
	m.ensureCut(origin, e.Time, e.Type)
	return m.emit(e)
}

func (m *v1Migration) emit(e event.Event) error {
	out, err := m.remap(e)
	if err != nil {
		return err
	}
	out.Seq = m.next
	m.out = append(m.out, out)
	m.next++
	return nil
}

// ensureCut places the tagged marker before the first event at or after
// the source cut (the cut's own end-seed marker, tagged, is that marker).
func (m *v1Migration) ensureCut(origin uint64, time int64, typ string) {
	if m.cutSet || origin < m.s.Inherited {
		return
	}
	m.cut, m.cutSet = m.next, true
	if origin == m.s.Inherited && typ == TypeEndSeed {
		return
	}
	m.out = append(m.out, marker(m.next, time))
	m.next++
}

func marker(seq uint64, time int64) event.Event {
	return event.Event{Type: TypeEndSeed, Seq: seq, Time: time, Data: json.RawMessage(`{"inherited":true}`)}
}

// remap maps the seqs e refers to (the source seqs of its original) to
// their target seqs.
func (m *v1Migration) remap(e event.Event) (event.Event, error) {
	label := func(what string) string { return e.Type + " " + strconv.FormatUint(e.Seq, 10) + " " + what }
	one := func(raw json.RawMessage, what string) (json.RawMessage, error) {
		if n, ok := count(raw); ok {
			if t, ok := m.mapping[n]; ok {
				return jsonText(t), nil
			}
		}
		return nil, &MigrationError{From: 1, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s targets consumed assistant/chunk %s", label(what), orUndefined(raw))}
	}
	list := func(raw json.RawMessage, what string) (json.RawMessage, error) {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, &MigrationError{From: 1, Seq: e.Seq, Type: e.Type, Reason: label(what) + " must be an array"}
		}
		out := make([]json.RawMessage, len(items))
		for i, it := range items {
			v, err := one(it, what)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return jsonText(out), nil
	}
	out := e.Clone()
	for i, s := range out.SourceEventSeqs {
		t, ok := m.mapping[s]
		if !ok {
			return out, &MigrationError{From: 1, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s targets consumed assistant/chunk %d", label("sources"), s)}
		}
		out.SourceEventSeqs[i] = t
	}
	if len(out.SurfaceOp) > 0 && string(out.SurfaceOp) != `"append"` {
		op, _ := members(out.SurfaceOp)
		start, err := one(get(op, "start"), "surface start")
		if err != nil {
			return out, err
		}
		end, err := one(get(op, "end"), "surface end")
		if err != nil {
			return out, err
		}
		out.SurfaceOp = object("op", json.RawMessage(`"replace"`), "start", start, "end", end)
	}
	var rewrite func(data []member) ([]member, error)
	switch e.Type {
	case "command/done":
		rewrite = func(data []member) ([]member, error) {
			raw := get(data, "sourceEventSeq")
			if raw == nil {
				return data, nil
			}
			v, err := one(raw, "sourceEventSeq")
			return set(data, "sourceEventSeq", v), err
		}
	case "compaction/prune", "compaction/summary":
		rewrite = func(data []member) ([]member, error) {
			rng, _ := members(get(data, "shadowedRange"))
			start, err := one(get(rng, "start"), "shadowedRange start")
			if err != nil {
				return nil, err
			}
			end, err := one(get(rng, "end"), "shadowedRange end")
			if err != nil {
				return nil, err
			}
			seqs, err := list(get(data, "shadowedSeqs"), "shadowedSeqs")
			if err != nil {
				return nil, err
			}
			data = set(data, "shadowedRange", object("start", start, "end", end))
			return set(data, "shadowedSeqs", seqs), nil
		}
	case "session/title", "session/title-llm-request":
		rewrite = func(data []member) ([]member, error) {
			seqs, err := list(get(data, "messageSeqs"), "messageSeqs")
			return set(data, "messageSeqs", seqs), err
		}
	}
	if rewrite != nil {
		data, err := members(out.Data)
		if err != nil {
			return out, &MigrationError{From: 1, Seq: e.Seq, Type: e.Type, Reason: "data must be an object"}
		}
		if data, err = rewrite(data); err != nil {
			return out, err
		}
		out.Data = encode(data)
	}
	return out, nil
}

func isTaggedMarker(e *event.Event) bool {
	if e.Type != TypeEndSeed {
		return false
	}
	var d struct {
		Inherited bool `json:"inherited"`
	}
	return json.Unmarshal(e.Data, &d) == nil && d.Inherited
}

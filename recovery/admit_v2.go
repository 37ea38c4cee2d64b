package recovery

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"

	"github.com/seglog/seglog/event"
)

// v2Inventory is the released event inventory of format v2: for each type,
// the members its data must have and those it may have. It is v0/v1's
// (legacyInventory) without assistant/chunk (v2 embeds the stream), with
// assistant/message carrying its stream, assistant/attempt, the delivery
// marker's sessionFormatVersion and the seed marker's inherited flag.
var v2Inventory = func() map[string]payloadKeys {
	inv := make(map[string]payloadKeys, len(legacyInventory)+1)
	for t, k := range legacyInventory {
		if t != "assistant/chunk" {
			inv[t] = k
		}
	}
	inv["assistant/attempt"] = keys("turn,step,stream")
	inv["assistant/message"] = keys("turn,step,message,stream", "usage", "interrupted")
	inv["session-log-deepseek/delivery-accepted"] = keys("sessionId,throughSeq", "sessionFormatVersion")
	inv["session/end-seed"] = keys("", "inherited")
	return inv
}()

// v2SourceKinds are the message source kinds the v2 → v3 edge knows how
// to carry over; any other is refused.
var v2SourceKinds = map[string]bool{
	"user": true, "plugin": true, "model": true, "tool": true, "agent-instructions": true,
	"session-reference": true, "team-message": true, "goal": true, "skill-invocation": true,
	"skill-catalog": true, "coordinator": true, "subagent-report": true, "subagent-settled": true,
	"webhook": true, "agent-message": true,
}

// v2ContentKinds are the message content block kinds the v2 → v3 edge
// knows.
var v2ContentKinds = map[string]bool{
	"text": true, "reasoning": true, "image": true, "file": true, "tool-call": true, "tool-result": true,
}

// admitV2 checks one event of a v2 log (or of a v0/v1 log taken to v2) as
// the reference's v2 → v3 edge admits it, in its order and with its
// reasons, before anything is migrated:
//
//  1. the type is in the released v2 inventory (v2Inventory): "format v2
//     to v3 cannot safely transform unclassified event <type>";
//  2. a log-only event carries no surfaceOp or sourceEventSeqs ("<type>
//     has unexpected field surfaceOp"; surfaceOp is named first when both
//     are there);
//  3. the surface metadata (v2SurfaceMetadata);
//  4. data is an object with exactly the inventory's members, a missing
//     one reported before an unexpected one ("<type> data lacks required
//     field <k>", "<type> data has unexpected field <k>"; unexpected ones
//     in JavaScript's key order: integer-like keys first);
//  5. the content kinds of every message, summary and stream block the
//     event owns (v2Content);
//  6. a delivery marker of format v2 names a session (non-empty string)
//     and an earlier event (throughSeq);
//  7. an assistant/message's or assistant/attempt's turn and step are
//     positive counts; a seed marker's inherited is true when present;
//  8. the message sources (v2Source) of user/message, of the message of
//     assistant/message and tool/result, and of the messages of
//     agent/inbox/spliced and session/title-llm-request; a tool/result
//     with error code TOOL_NOT_STARTED has its canonical repair id
//     "interrupted-tool-result-<callId>-<n>".
//
// Refusals are *MigrationError (From 2).
func admitV2(e *event.Event) error {
	fail := func(format string, args ...any) error {
		return &MigrationError{From: 2, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
	}
	inv, ok := v2Inventory[e.Type]
	if !ok {
		return fail("format v2 to v3 cannot safely transform unclassified event %s", e.Type)
	}
	surface := isSurfaceType(e.Type)
	if !surface {
		if len(e.SurfaceOp) > 0 {
			return fail("%s has unexpected field surfaceOp", e.Type)
		}
		if e.SourceEventSeqs != nil {
			return fail("%s has unexpected field sourceEventSeqs", e.Type)
		}
	}
	if err := v2SurfaceMetadata(e); err != nil {
		return err
	}
	data, err := members(e.Data)
	if err != nil {
		return fail("%s data must be an object", e.Type)
	}
	if err := v2Keys(data, inv.required, inv.optional, e.Type+" data"); err != "" {
		return fail("%s", err)
	}
	if err := v2Content(e, data); err != "" {
		return fail("%s", err)
	}
	if e.Type == "session-log-deepseek/delivery-accepted" {
		if err := v2Delivery(e, data); err != "" {
			return fail("%s", err)
		}
	}
	switch e.Type {
	case "assistant/message", "assistant/attempt":
		for _, k := range []string{"turn", "step"} {
			n, ok := count(get(data, k))
			if !ok {
				return fail("%s must be a non-negative safe integer", k)
			}
			if n == 0 {
				return fail("%s must be positive", k)
			}
		}
	case "session/end-seed":
		if raw := get(data, "inherited"); raw != nil && string(raw) != "true" {
			return fail("session/end-seed inherited must be true")
		}
	}
	var sources []json.RawMessage
	switch e.Type {
	case "user/message":
		sources = []json.RawMessage{e.Data}
	case "assistant/message", "tool/result":
		msg := get(data, "message")
		if !isObject(msg) {
			return fail("message must be an object")
		}
		sources = []json.RawMessage{msg}
	}
	for _, msg := range sources {
		if err := v2Source(msg); err != "" {
			return fail("%s", err)
		}
	}
	if e.Type == "tool/result" {
		if errv, err := members(get(data, "error")); err == nil {
			if code, _ := jsonString(get(errv, "code")); code == "TOOL_NOT_STARTED" {
				msg, _ := members(get(data, "message"))
				src, err := members(get(msg, "source"))
				if err != nil {
					return fail("tool result source must be an object")
				}
				if !isRepairIdentity(get(msg, "id"), get(src, "callId")) {
					return fail("TOOL_NOT_STARTED repair requires its canonical historical message id")
				}
			}
		}
	}
	if e.Type == "agent/inbox/spliced" || e.Type == "session/title-llm-request" {
		var msgs []json.RawMessage
		json.Unmarshal(get(data, messagesKey(e.Type)), &msgs) // v2Content checked: an array of objects
		for _, msg := range msgs {
			if err := v2Source(msg); err != "" {
				return fail("%s", err)
			}
		}
	}
	return nil
}

// messagesKey is the member holding the messages of agent/inbox/spliced
// (inserted) and session/title-llm-request (messages).
func messagesKey(typ string) string {
	if typ == "agent/inbox/spliced" {
		return "inserted"
	}
	return "messages"
}

// v2Keys checks that ms has every required member, then no member outside
// required and optional, with the reference's v2 words ("field"); "" if
// it does.
func v2Keys(ms []member, required, optional []string, label string) string {
	for _, r := range required {
		if get(ms, r) == nil {
			return label + " lacks required field " + r
		}
	}
	if k, ok := unexpectedKey(jsKeyOrder(ms), required, optional); ok {
		return label + " has unexpected field " + k
	}
	return ""
}

// jsKeyOrder returns ms in the order JavaScript's Object.keys lists an
// object's keys: the integer-like ones (array indices) first, ascending,
// then the others in the order they were given.
func jsKeyOrder(ms []member) []member {
	var ints, rest []member
	for _, m := range ms {
		if n, err := strconv.ParseUint(m.key, 10, 32); err == nil && n < 1<<32-1 && strconv.FormatUint(n, 10) == m.key {
			ints = append(ints, m)
		} else {
			rest = append(rest, m)
		}
	}
	if ints == nil {
		return ms
	}
	sort.SliceStable(ints, func(i, j int) bool {
		a, _ := strconv.ParseUint(ints[i].key, 10, 32)
		b, _ := strconv.ParseUint(ints[j].key, 10, 32)
		return a < b
	})
	return append(ints, rest...)
}

// v2Source checks a message's source as the v2 → v3 edge does: an object
// of a known kind (v2SourceKinds); an agent-message source is exactly
// {kind, form: "relay", senderSessionId: non-empty string}. "" if it is.
func v2Source(msg json.RawMessage) string {
	ms, _ := members(msg)
	src, err := members(get(ms, "source"))
	if err != nil {
		return "message source must be an object"
	}
	kind, ok := jsonString(get(src, "kind"))
	if !ok || !v2SourceKinds[kind] {
		return "cannot safely transform unclassified message source"
	}
	if kind == "agent-message" {
		if err := v2Keys(src, []string{"kind", "form", "senderSessionId"}, nil, "agent-message source"); err != "" {
			return err
		}
		form, _ := jsonString(get(src, "form"))
		sender, ok := jsonString(get(src, "senderSessionId"))
		if form != "relay" || !ok || sender == "" {
			return "agent-message source requires relay form and senderSessionId"
		}
	}
	return ""
}

// v2Content checks the content kinds of what event e (its data members
// data) owns, as the v2 → v3 edge does: the content of user/message and
// tool/code-dispatch, of the message of assistant/message, tool/result
// and team/message/queued, of every message of agent/inbox/spliced and
// session/title-llm-request, compaction/summary's summary and rawOutput,
// and in the stream of assistant/message and assistant/attempt the block
// of a block-end chunk and the blockType of a block-start one (packed
// records and other chunks are opaque). Each path is named from "format
// v2 <type> at seq <seq> data". "" if all is well.
func v2Content(e *event.Event, data []member) string {
	label := fmt.Sprintf("format v2 %s at seq %d data", e.Type, e.Seq)
	switch e.Type {
	case "user/message", "tool/code-dispatch":
		if err := contentKinds(get(data, "content"), label+".content"); err != "" {
			return err
		}
	case "assistant/message", "tool/result", "team/message/queued":
		msg, err := members(get(data, "message"))
		if err != nil {
			return label + ".message must be an object"
		}
		if err := contentKinds(get(msg, "content"), label+".message.content"); err != "" {
			return err
		}
	case "agent/inbox/spliced", "session/title-llm-request":
		key := messagesKey(e.Type)
		items, ok := jsonArray(get(data, key))
		if !ok {
			return label + "." + key + ": content must be an array"
		}
		for i, it := range items {
			path := fmt.Sprintf("%s.%s[%d]", label, key, i)
			msg, err := members(it)
			if err != nil {
				return path + " must be an object"
			}
			if err := contentKinds(get(msg, "content"), path+".content"); err != "" {
				return err
			}
		}
	case "compaction/summary":
		if err := contentKinds(get(data, "summary"), label+".summary"); err != "" {
			return err
		}
		if raw := get(data, "rawOutput"); raw != nil {
			if err := contentKinds(raw, label+".rawOutput"); err != "" {
				return err
			}
		}
	}
	if e.Type == "assistant/message" || e.Type == "assistant/attempt" {
		items, ok := jsonArray(get(data, "stream"))
		if !ok {
			return label + ".stream: content must be an array"
		}
		for i, it := range items {
			path := fmt.Sprintf("%s.stream[%d]", label, i)
			rec, err := members(it)
			if err != nil {
				return path + " must be an object"
			}
			if t, _ := jsonString(get(rec, "type")); t != "chunk" {
				continue
			}
			chunk, err := members(get(rec, "chunk"))
			if err != nil {
				return path + ".chunk must be an object"
			}
			switch t, _ := jsonString(get(chunk, "type")); t {
			case "block-end":
				if err := contentBlock(get(chunk, "block"), path+".chunk.block"); err != "" {
					return err
				}
			case "block-start":
				if err := contentKind(get(chunk, "blockType"), path+".chunk.blockType"); err != "" {
					return err
				}
			}
		}
	}
	return ""
}

// jsonArray returns the items of raw, and whether it is a JSON array.
func jsonArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	return items, true
}

func contentKinds(raw json.RawMessage, label string) string {
	items, ok := jsonArray(raw)
	if !ok {
		return label + ": content must be an array"
	}
	for i, it := range items {
		if err := contentBlock(it, fmt.Sprintf("%s[%d]", label, i)); err != "" {
			return err
		}
	}
	return ""
}

func contentKind(raw json.RawMessage, label string) string {
	if k, ok := jsonString(raw); !ok || !v2ContentKinds[k] {
		return label + ": cannot safely transform unclassified message content kind " + orUndefined(raw)
	}
	return ""
}

// contentBlock checks one content block: an object of a known kind; a
// tool-result's content an array of known blocks; a file block exactly
// {type, attachment: {attachmentId: non-empty string, name: string,
// bytes: count}}.
func contentBlock(raw json.RawMessage, label string) string {
	block, err := members(raw)
	if err != nil {
		return label + " must be an object"
	}
	if err := contentKind(get(block, "type"), label); err != "" {
		return err
	}
	switch k, _ := jsonString(get(block, "type")); k {
	case "tool-result":
		if _, ok := jsonArray(get(block, "content")); !ok {
			return label + `.content: invalid message content kind "tool-result": content must be an array`
		}
		return contentKinds(get(block, "content"), label+".content")
	case "file":
		what := label + ` kind "file"`
		if err := v2Keys(block, []string{"type", "attachment"}, nil, what); err != "" {
			return err
		}
		att, err := members(get(block, "attachment"))
		if err != nil {
			return what + " attachment must be an object"
		}
		if err := v2Keys(att, []string{"attachmentId", "name", "bytes"}, nil, what+" attachment"); err != "" {
			return err
		}
		id, okID := jsonString(get(att, "attachmentId"))
		_, okName := jsonString(get(att, "name"))
		if !okID || id == "" || !okName {
			return what + ": file attachment requires attachmentId and name"
		}
		if _, ok := count(get(att, "bytes")); !ok {
			return what + " attachment bytes must be a non-negative safe integer"
		}
	}
	return ""
}

// v2Delivery checks a delivery marker as the reference's payload rules do
// for format v2: a sessionFormatVersion, when given, is a count; a marker
// of format v2 (the current generation of a v2 log) names a session and
// an event before it. "" if it does.
func v2Delivery(e *event.Event, data []member) string {
	label := fmt.Sprintf("%s %d", e.Type, e.Seq)
	var version uint64
	if raw := get(data, "sessionFormatVersion"); raw != nil {
		n, ok := count(raw)
		if !ok {
			return label + " sessionFormatVersion must be a non-negative safe integer"
		}
		version = n
	}
	if version != 2 {
		return ""
	}
	if id, ok := jsonString(get(data, "sessionId")); !ok || id == "" {
		return label + " sessionId must be a non-empty string"
	}
	n, ok := count(get(data, "throughSeq"))
	if !ok {
		return label + " throughSeq must be a non-negative safe integer"
	}
	if n >= e.Seq {
		return label + " throughSeq must identify an earlier event"
	}
	return ""
}

var repairSuffix = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// isRepairIdentity reports whether id is the canonical id of a repair
// result for the call callID: "interrupted-tool-result-<callId>-<n>", n a
// safe integer without leading zeros.
func isRepairIdentity(idRaw, callRaw json.RawMessage) bool {
	call, ok := jsonString(callRaw)
	if !ok {
		return false
	}
	id, ok := jsonString(idRaw)
	prefix := "interrupted-tool-result-" + call + "-"
	if !ok || len(id) < len(prefix) || id[:len(prefix)] != prefix {
		return false
	}
	suffix := id[len(prefix):]
	n, err := strconv.ParseUint(suffix, 10, 64)
	return repairSuffix.MatchString(suffix) && err == nil && n <= maxSafe
}

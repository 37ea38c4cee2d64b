package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/seglog/seglog/event"
)

// LegacySession is what the migrations of the released formats v0 and v1
// need to know of a session besides its events: its header (the v0/v1
// header has no isSeeded; a seedLength makes the session seeded) and its
// inherited count, the header's seedLength (0 without one).
type LegacySession struct {
	ID            string
	CreatedAt     int64
	ParentSession string
	IsSeeded      bool
	Inherited     uint64
}

// ErrMigration is the kind of every *MigrationError.
var ErrMigration = errors.New("recovery: format migration refused")

// MigrationError reports a log of an older format that its migration
// refuses: an event of a shape the released format did not write, a
// reference the migration cannot carry over, an inherited cut splitting an
// assistant attempt. errors.Is(err, ErrMigration) is true for it.
type MigrationError struct {
	From   int    // the format version migrated from
	Seq    uint64 // the source event's seq
	Type   string // the source event's type ("" if the error is not an event's)
	Reason string
}

func (e *MigrationError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("recovery: format v%d migration: %s", e.From, e.Reason)
	}
	return fmt.Sprintf("recovery: format v%d migration: event seq %d (%s): %s", e.From, e.Seq, e.Type, e.Reason)
}

// Is reports whether target is ErrMigration.
func (e *MigrationError) Is(target error) bool { return target == ErrMigration }

// payloadKeys is the released event inventory of formats v0 and v1: for
// each type, the members its data must have and those it may have.
// Historical migration knows these types only.
type payloadKeys struct{ required, optional []string }

func keys(required string, optional ...string) payloadKeys {
	var r []string
	if required != "" {
		r = strings.Split(required, ",")
	}
	return payloadKeys{required: r, optional: optional}
}

var legacyInventory = map[string]payloadKeys{
	"agent-preset/selected":                  keys("agentPreset"),
	"agent/inbox/spliced":                    keys("target,start,inserted", "removedCount", "outcome"),
	"approval/asked":                         keys("id,toolName", "callId", "reason"),
	"approval/decided":                       keys("id,outcome"),
	"approval/policy":                        keys("policy", "source"),
	"assistant/chunk":                        keys("turn,step,chunk"),
	"assistant/message":                      keys("turn,step,message", "usage", "interrupted"),
	"command/done":                           keys("commandId,kind", "text", "sourceEventSeq"),
	"command/run":                            keys("commandId,name,source", "args"),
	"compaction/end":                         keys("compactionId,turn", "sourceCommandId", "error"),
	"compaction/prune":                       keys("shadowedRange,shadowedSeqs,shadowedTokenCount"),
	"compaction/start":                       keys("compactionId,turn", "sourceCommandId"),
	"compaction/summary":                     keys("compactionId,summary,shadowedRange,shadowedSeqs,shadowedTokenCount,provider,model", "sourceCommandId", "maxTokens", "usage", "rawOutput", "llmStreamCall"),
	"feedback/record":                        keys("text"),
	"goal/change":                            keys("kind,version,operation", "goal", "roundsStarted", "createdAt", "updatedAt", "cleared", "clearedAt"),
	"hook/invoked":                           keys("turn,point,dialect,handlerId", "matcher"),
	"hook/result":                            keys("turn,point,handlerId,decision,durationMs", "exitCode", "stderrSummary"),
	"llm/retry":                              keys("retryId,turn,step,provider,mode,policyKey,retry,delayMs,failure", "maxRetries"),
	"llm/retry-started":                      keys("retryId,turn,step,retry"),
	"model/selection":                        keys("provider,model", "reasoningEffort"),
	"permission/preset":                      keys("preset"),
	"plan/mode":                              keys("active"),
	"request/context":                        keys("provider,model", "contextWindow"),
	"request/header":                         keys("header,reason", "startsSeries"),
	"sandbox/mode":                           keys("mode", "source"),
	"schedule/change":                        keys("version,operation", "schedule", "id", "acceptedAt"),
	"session-log-deepseek/delivery-accepted": keys("sessionId,throughSeq"),
	"session/end-seed":                       keys(""),
	"session/title":                          keys("title,messageSeqs,source"),
	"session/title-llm-request":              keys("titleProvider,messageSeqs,route,system,messages,maxTokens"),
	"step/end":                               keys("turn,step"),
	"step/start":                             keys("turn,step"),
	"subagent/descriptor":                    keys("mode,version,provider", "label", "agentProvider", "agentModel", "agentReasoningEffort", "persona", "toolFilter"),
	"subagent/model-selection-policy":        keys("allowedModels"),
	"team/member":                            keys("version,teamId,member"),
	"team/message/delivered":                 keys("version,teamId,messageId,targetId"),
	"team/message/queued":                    keys("version,teamId,message"),
	"team/task":                              keys("version,teamId,task"),
	"todo/write":                             keys("todos"),
	"tool-workflow/agent-end":                keys("runId,seq,outcome"),
	"tool-workflow/agent-start":              keys("runId,seq,label,childId", "phase"),
	"tool-workflow/run-end":                  keys("runId,stopReason"),
	"tool-workflow/run-start":                keys("runId,name"),
	"tool/call":                              keys("turn,step,callId,name,arguments"),
	"tool/code-dispatch":                     keys("rootCallId,parentCallId,subCallId,name,arguments,isError,content"),
	"tool/code-dispatch-start":               keys("rootCallId,parentCallId,subCallId,name,arguments"),
	"tool/result":                            keys("turn,step,message", "error", "meta"),
	"turn/end":                               keys("turn,reason"),
	"turn/start":                             keys("turn"),
	"user/message":                           keys("role,id,content,source"),
	"web/deepseek-search-llm-request":        keys("endpoint,apiVersion,body"),
	// The fork's one addition to the released vocabulary.
	"fork/session-source": keys("source"),
}

// LegacyTypes returns the event types of the released formats v0 and v1
// (after v0's renames), sorted: the only types their migrations take.
func LegacyTypes() []string {
	out := make([]string, 0, len(legacyInventory))
	for t := range legacyInventory {
		out = append(out, t)
	}
	sortStrings(out)
	return out
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// checkLegacyPayload checks the data members of a known event of format v
// (0 or 1) against the released inventory.
func checkLegacyPayload(v int, e *event.Event) error {
	k, ok := legacyInventory[e.Type]
	if !ok {
		return &event.UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("format v%d contains unknown historical event type %q at seq %d; migration refuses unknown historical events even when ignorable", v, e.Type, e.Seq)}
	}
	ms, err := members(e.Data)
	if err != nil {
		return &MigrationError{From: v, Seq: e.Seq, Type: e.Type, Reason: "data must be an object"}
	}
	if e.Type == "subagent/descriptor" {
		// The reference checks only version-3 descriptors; another version
		// must be a count, and a v0 log may hold none (a v1 log's is kept
		// unchecked).
		raw := get(ms, "version")
		if n := numberOf(raw); !n.ok || n.v != 3 {
			dv, ok := count(raw)
			if !ok {
				return &MigrationError{From: v, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s %d version must be a non-negative safe integer", e.Type, e.Seq)}
			}
			if v == 0 {
				return &MigrationError{From: v, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s %d uses unsupported descriptor version %d", e.Type, e.Seq, dv)}
			}
			return nil
		}
	}
	optional := k.optional
	if v == 1 && e.Type == "session-log-deepseek/delivery-accepted" {
		optional = append(optional[:len(optional):len(optional)], "sessionFormatVersion")
	}
	return exactMembers(v, e, ms, k.required, optional, "data")
}

// exactMembers checks that ms has no key outside required and optional,
// and every required one, in the reference's order and words (what: the
// subject, such as "data").
func exactMembers(v int, e *event.Event, ms []member, required, optional []string, what string) error {
	if k, ok := unexpectedKey(ms, required, optional); ok {
		return &MigrationError{From: v, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s has unexpected member %s", what, jsonText(k))}
	}
	for _, r := range required {
		if get(ms, r) == nil {
			return &MigrationError{From: v, Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf("%s lacks required member %s", what, jsonText(r))}
		}
	}
	return nil
}

// unexpectedKey returns the first key of ms, in their order, that is
// neither in required nor in optional.
func unexpectedKey(ms []member, required, optional []string) (string, bool) {
	for _, m := range ms {
		if !slices.Contains(required, m.key) && !slices.Contains(optional, m.key) {
			return m.key, true
		}
	}
	return "", false
}

// member is one member of a JSON object, in the order the object has it.
type member struct {
	key string
	val json.RawMessage
}

// members parses a JSON object into its members, in order. A key given
// twice keeps its last value (as JavaScript's JSON.parse does).
func members(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	t, err := dec.Token()
	if err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []member
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = set(out, kt.(string), v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// get returns the value of key, nil if ms has none.
func get(ms []member, key string) json.RawMessage {
	for _, m := range ms {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// set replaces the value of key where ms has it, or appends it (as a
// JavaScript object spread does).
func set(ms []member, key string, val json.RawMessage) []member {
	for i := range ms {
		if ms[i].key == key {
			out := append([]member(nil), ms...)
			out[i].val = val
			return out
		}
	}
	return append(ms[:len(ms):len(ms)], member{key, val})
}

// without returns ms without the given keys.
func without(ms []member, keys ...string) []member {
	var out []member
outer:
	for _, m := range ms {
		for _, k := range keys {
			if m.key == k {
				continue outer
			}
		}
		out = append(out, m)
	}
	return out
}

// encode renders members as a JSON object.
func encode(ms []member) json.RawMessage {
	b := []byte{'{'}
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, jsonText(m.key)...)
		b = append(b, ':')
		b = append(b, m.val...)
	}
	return append(b, '}')
}

// jsonText renders v as JSON without HTML escaping (as JavaScript's
// JSON.stringify writes strings).
func jsonText(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // plain values only
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

// jsonString returns raw as a string, and whether it is one.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// count returns raw as a non-negative safe integer, and whether it is one.
func count(raw json.RawMessage) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n > maxSafe {
		return 0, false
	}
	return n, true
}

// number is a JSON number as JavaScript compares it (a coordinate: a turn
// or step), absent when the member is missing or not a number.
type number struct {
	v   float64
	ok  bool
	raw json.RawMessage
}

func numberOf(raw json.RawMessage) number {
	var f float64
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil {
		return number{raw: raw}
	}
	return number{v: f, ok: true, raw: raw}
}

// same is JavaScript's === on two coordinates (undefined === undefined).
func (n number) same(o number) bool { return n.ok == o.ok && (!n.ok || n.v == o.v) }

package recovery

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/seglog/seglog/event"
)

// The v3 surface rules (docs/EVENTS.md, "Surface rules") as the reference
// harness's v3 surface fold and its v3 restore validation apply them. The
// surface is the model-visible transcript: an ordered list of the seqs of
// surface events (system/message, user/message, assistant/message,
// tool/result), which each such event appends to or replaces a span of.

// Surface event types other than those the fold already names.
const TypeUserMessage = "user/message"

// surfaceTypes are the v3 surface types; every other type is log-only.
var surfaceTypes = map[string]bool{
	TypeSystemMessage: true, TypeUserMessage: true, TypeAssistantMessage: true, TypeToolResult: true,
}

// IsSurfaceType reports whether typ is a v3 surface type.
func IsSurfaceType(typ string) bool { return surfaceTypes[typ] }

// ErrSurface is the kind of every *SurfaceError.
var ErrSurface = errors.New("recovery: surface rule broken")

// SurfaceError names the event that breaks a v3 surface rule: its Seq, its
// Type, and the rule (Reason). errors.Is(err, ErrSurface) is true for it;
// errors.As finds it through the store's wrappers.
type SurfaceError struct {
	Seq    uint64
	Type   string
	Reason string
}

func (e *SurfaceError) Error() string {
	return fmt.Sprintf("recovery: event seq %d (%s) breaks the v3 surface rules: %s", e.Seq, e.Type, e.Reason)
}

// Is reports whether target is ErrSurface.
func (e *SurfaceError) Is(target error) bool { return target == ErrSurface }

// maxSafe is JavaScript's largest safe integer: the reference's seqs are
// safe integers.
const maxSafe = 1<<53 - 1

// surfaceNode is one entry of the surface.
type surfaceNode struct {
	seq    uint64
	system bool     // a system/message: at index 0, the protected head
	tool   bool     // a tool/result
	rest   [32]byte // a tool/result's data without its result content (toolRest)
	restOK bool     // rest was computed (the data has a message with content)
}

// surfaceScalars is the checker's state beside the surface.
type surfaceScalars struct {
	next         uint64          // the seq the next event must carry
	stepSeen     bool            // a step/start came
	stepOpen     bool            // a step is open (no step/end or turn/end since its step/start)
	turn, stepNo json.RawMessage // the open step's data.turn and data.step
}

// surfaceUndo takes back one change of the surface: the nodes at index at
// were removed (nil: none) and added nodes were put there.
type surfaceUndo struct {
	at      int
	removed []surfaceNode
	added   int
}

// SurfaceChecker applies the v3 surface rules to a log one batch at a
// time: Check takes the events that follow those it has taken (from seq 0)
// and reports the first that breaks a rule. The zero value is not ready;
// make one with NewSurfaceChecker. It is not safe for concurrent use.
//
// The rules, as the reference applies them:
//
//   - A surface event (system/message, user/message, assistant/message,
//     tool/result) carries surfaceOp: "append" (it joins the end of the
//     surface) or exactly {"op": "replace", "startSeq": a, "endSeq": b},
//     a and b seqs of earlier events, which replaces the surface nodes from
//     a to b inclusive (both on the surface, a not after b) with the event.
//   - sourceEventSeqs is forbidden on assistant/message; on the other
//     surface types it is optional, and when present its seqs are
//     unique, earlier than the event's own, and, for a replace, include
//     every node the replace removes. (An empty list cannot be told from
//     none in an event.Event: it counts as none.)
//   - A tool/result replace removes exactly one node, a tool/result, and
//     changes only the content of its result (the first content block's
//     "content"); the rest of its data is equal.
//   - No surface event before the first step/start. A system/message
//     belongs to the open step (its turn and step equal the last
//     step/start's, with no step/end or turn/end since). The first
//     surface node, when it is a system/message, is the protected head:
//     only a system/message replacing exactly it may replace it, no span
//     (nor a compaction/prune or compaction/summary's shadowedSeqs) may
//     cover it, and once a surface started without a head no
//     system/message may come.
//   - A log-only event (any other type) carries neither surfaceOp nor
//     sourceEventSeqs, except an ignorable event of a type the catalog
//     does not know: its fields are opaque and not checked.
//   - Seqs are dense from 0.
type SurfaceChecker struct {
	known *event.Catalog
	nodes []surfaceNode
	surfaceScalars

	// The last Check's changes, for Undo (and for a Check that fails).
	saved surfaceScalars
	undo  []surfaceUndo
	valid bool // undo holds the last successful Check's changes
}

// NewSurfaceChecker returns a checker of a log from seq 0. known is the
// catalog that tells which types are known (an unknown ignorable event is
// opaque); nil means event.NewCatalog() (the built-in v3 catalog).
func NewSurfaceChecker(known *event.Catalog) *SurfaceChecker {
	if known == nil {
		known = event.NewCatalog()
	}
	return &SurfaceChecker{known: known}
}

// CheckSurface applies the v3 surface rules to a whole log (seqs from 0),
// with the built-in catalog: nil, or a *SurfaceError naming the first
// event that breaks one.
func CheckSurface(evs []event.Event) error {
	return NewSurfaceChecker(nil).Check(evs...)
}

// Len returns the seq of the next event the checker expects: the number
// of events it has taken.
func (c *SurfaceChecker) Len() uint64 { return c.next }

// Check takes evs, the events that follow those taken so far, if they all
// keep the rules, and returns nil. Otherwise it returns a *SurfaceError
// naming the first that breaks one and takes none of them (the checker is
// as before the call).
func (c *SurfaceChecker) Check(evs ...event.Event) error {
	c.saved = c.surfaceScalars
	c.undo = c.undo[:0]
	c.valid = false
	for i := range evs {
		if err := c.take(&evs[i]); err != nil {
			c.rollback()
			return err
		}
	}
	c.valid = true
	return nil
}

// Undo takes back the events of the last Check that returned nil (a write
// that failed after the check stored none of them). It does nothing if
// there is none, or if Undo already took it back.
func (c *SurfaceChecker) Undo() {
	if c.valid {
		c.rollback()
		c.valid = false
	}
}

func (c *SurfaceChecker) rollback() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		u := c.undo[i]
		c.nodes = slices.Replace(c.nodes, u.at, u.at+u.added, u.removed...)
	}
	c.undo = c.undo[:0]
	c.surfaceScalars = c.saved
}

// take checks e and, if it keeps the rules, applies it.
func (c *SurfaceChecker) take(e *event.Event) error {
	fail := func(format string, args ...any) error {
		return &SurfaceError{Seq: e.Seq, Type: e.Type, Reason: fmt.Sprintf(format, args...)}
	}
	if e.Seq != c.next {
		return fail("seq is not contiguous: expected %d", c.next)
	}
	if !surfaceTypes[e.Type] {
		if err := c.logOnly(e, fail); err != nil {
			return err
		}
		c.next++
		return nil
	}
	op, err := parseSurfaceOp(e.SurfaceOp)
	if err != "" {
		return fail("%s", err)
	}
	if op.replace && (op.start >= e.Seq || op.end >= e.Seq) {
		return fail("replace span %d..%d must name earlier events", op.start, op.end)
	}
	sources := map[uint64]bool{}
	if len(e.SourceEventSeqs) > 0 {
		if e.Type == TypeAssistantMessage {
			return fail("assistant/message embeds its source stream and cannot carry sourceEventSeqs")
		}
		for _, s := range e.SourceEventSeqs {
			if s > maxSafe {
				return fail("sourceEventSeqs holds %d, not a safe integer", s)
			}
			if sources[s] {
				return fail("sourceEventSeqs holds %d twice", s)
			}
			sources[s] = true
		}
		for _, s := range e.SourceEventSeqs {
			if s >= e.Seq {
				return fail("sourceEventSeqs must name earlier events: %d is not before %d", s, e.Seq)
			}
		}
	}
	if !c.stepSeen {
		return fail("surface before first step: a surface event before the first step/start")
	}
	system := e.Type == TypeSystemMessage
	head := len(c.nodes) > 0 && c.nodes[0].system
	if system {
		if !c.stepOpen || !jsEqual(c.turn, field(e.Data, "turn")) || !jsEqual(c.stepNo, field(e.Data, "step")) {
			return fail("system/message does not belong to the open step (its turn and step must be the last step/start's)")
		}
		if len(c.nodes) > 0 && !head {
			return fail("system/message requires a protected first surface head (the surface started without one)")
		}
	}
	node := surfaceNode{seq: e.Seq, system: system, tool: e.Type == TypeToolResult}
	if node.tool {
		node.rest, node.restOK = toolRest(e.Data)
	}
	if !op.replace {
		c.nodes = append(c.nodes, node)
		c.undo = append(c.undo, surfaceUndo{at: len(c.nodes) - 1, added: 1})
		c.next++
		return nil
	}
	si, ei := c.index(op.start), c.index(op.end)
	switch {
	case si < 0:
		return fail("replace start seq %d is not on the surface", op.start)
	case ei < 0:
		return fail("replace end seq %d is not on the surface", op.end)
	case si > ei:
		return fail("replace start seq %d (surface index %d) is after end seq %d (index %d)", op.start, si, op.end, ei)
	}
	shadowed := c.nodes[si : ei+1]
	var missing []string
	for _, n := range shadowed {
		if !sources[n.seq] {
			missing = append(missing, strconv.FormatUint(n.seq, 10))
		}
	}
	if len(missing) > 0 {
		return fail("replace: sourceEventSeqs must include every replaced surface node; missing %s", strings.Join(missing, ", "))
	}
	if node.tool {
		if len(shadowed) != 1 {
			return fail("tool/result replace must replace exactly one surface node, not %d", len(shadowed))
		}
		if !shadowed[0].tool {
			return fail("tool/result replace must replace a tool/result (seq %d is not one)", shadowed[0].seq)
		}
		if !node.restOK || !shadowed[0].restOK || node.rest != shadowed[0].rest {
			return fail("tool/result replace may change only the result's content (seq %d)", shadowed[0].seq)
		}
	}
	if si == 0 && head && (!system || len(shadowed) != 1) {
		return fail("replace: surface node 0 (seq %d) is the protected system head; only a system/message replacing exactly it may replace it", c.nodes[0].seq)
	}
	removed := slices.Clone(shadowed)
	c.nodes = slices.Replace(c.nodes, si, ei+1, node)
	c.undo = append(c.undo, surfaceUndo{at: si, removed: removed, added: 1})
	c.next++
	return nil
}

// logOnly checks (and applies) an event of a log-only type.
func (c *SurfaceChecker) logOnly(e *event.Event, fail func(string, ...any) error) error {
	if e.Ignorable && !c.known.Known(e.Type) {
		return nil // opaque: a reader that does not know the type skips it
	}
	if len(e.SurfaceOp) > 0 {
		return fail("log-only event type cannot carry surfaceOp")
	}
	if len(e.SourceEventSeqs) > 0 {
		return fail("log-only event type cannot carry sourceEventSeqs")
	}
	switch e.Type {
	case TypeStepStart:
		c.stepSeen, c.stepOpen = true, true
		c.turn, c.stepNo = field(e.Data, "turn"), field(e.Data, "step")
	case TypeStepEnd, TypeTurnEnd:
		c.stepOpen = false
	case "compaction/prune", "compaction/summary":
		if len(c.nodes) > 0 && c.nodes[0].system {
			var seqs []json.RawMessage
			json.Unmarshal(field(e.Data, "shadowedSeqs"), &seqs)
			for _, s := range seqs {
				if v, ok := jsonSeq(s); ok && v == c.nodes[0].seq {
					return fail("compaction cannot shadow the protected system head (seq %d)", v)
				}
			}
		}
	}
	return nil
}

// index returns the surface index of the node seq, or -1.
func (c *SurfaceChecker) index(seq uint64) int {
	return slices.IndexFunc(c.nodes, func(n surfaceNode) bool { return n.seq == seq })
}

// surfaceOp is a parsed surfaceOp.
type surfaceOp struct {
	replace    bool
	start, end uint64
}

// parseSurfaceOp parses a surface event's surfaceOp, or returns why it is
// not one.
func parseSurfaceOp(raw json.RawMessage) (surfaceOp, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return surfaceOp{}, "a surface event requires surfaceOp"
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil && s == "append" {
			return surfaceOp{}, ""
		}
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || len(m) != 3 {
			break
		}
		var op string
		if json.Unmarshal(m["op"], &op) != nil || op != "replace" {
			break
		}
		start, ok1 := jsonSeq(m["startSeq"])
		end, ok2 := jsonSeq(m["endSeq"])
		if !ok1 || !ok2 {
			break
		}
		return surfaceOp{replace: true, start: start, end: end}, ""
	}
	if raw[0] == '{' {
		return surfaceOp{}, `invalid replace surfaceOp: want exactly {"op":"replace","startSeq":N,"endSeq":N}`
	}
	return surfaceOp{}, `invalid surfaceOp: want "append" or a replace object`
}

// jsonSeq parses a JSON number that is a non-negative safe integer (not
// -0), as the reference's seqs are.
func jsonSeq(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
		return 0, false // absent, or a string (json.Number would take "3")
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f < 0 || f > maxSafe || f != math.Trunc(f) || math.Signbit(f) {
		return 0, false
	}
	return uint64(f), true
}

// jsEqual is JavaScript's === on two JSON values of a field (nil: absent):
// absent equals absent; numbers, strings, booleans and null by value; an
// object or array equals nothing.
func jsEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	switch x.(type) {
	case map[string]any, []any:
		return false
	}
	switch y.(type) {
	case map[string]any, []any:
		return false
	}
	return x == y
}

// toolRest digests a tool/result's data with its result's content left
// out (message.content[0].content set to null): two results with equal
// digests differ only there. ok is false when the data has no message
// object with a content array.
func toolRest(data json.RawMessage) (sum [32]byte, ok bool) {
	var d map[string]any
	if json.Unmarshal(data, &d) != nil {
		return sum, false
	}
	msg, isObj := d["message"].(map[string]any)
	if !isObj {
		return sum, false
	}
	content, isArr := msg["content"].([]any)
	if !isArr {
		return sum, false
	}
	first := map[string]any{}
	if len(content) > 0 {
		if b, isObj := content[0].(map[string]any); isObj {
			for k, v := range b {
				first[k] = v
			}
		}
	}
	first["content"] = nil
	m := map[string]any{}
	for k, v := range msg {
		m[k] = v
	}
	m["content"] = []any{first}
	d["message"] = m
	b, err := json.Marshal(d) // map keys sorted: canonical
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(b), true
}

package jsonl

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/klauspost/compress/zstd"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// Version is the log format version this package writes.
const Version = 3

// OldestVersion is the oldest log format version it reads. A v1 or v2 log
// is imported as it is and migrated by the engine; a v0 log goes through
// the v0 → v1 edge at import (recovery.MigrateV0).
const OldestVersion = 0

// FileName returns the log file name of the current version, compressed
// or not.
func FileName(compressed bool) string { return FileNameOf(Version, compressed) }

// FileNameOf returns the log file name of format version v: session.jsonl
// for v0, session.v<N>.jsonl for the others.
func FileNameOf(v int, compressed bool) string {
	name := fmt.Sprintf("session.v%d.jsonl", v)
	if v == 0 {
		name = "session.jsonl"
	}
	if compressed {
		name += ".zstd"
	}
	return name
}

func isSafe(u uint16) bool {
	return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '.' || u == '_' || u == '-'
}

func escape(b *strings.Builder, u uint16) { fmt.Fprintf(b, "~%04X", u) }

// EncodeID maps a session id to its directory name, injectively: safe
// characters stay, every other UTF-16 unit becomes ~XXXX, and "." and ".."
// are escaped whole.
func EncodeID(id string) (string, error) {
	switch id {
	case "":
		return "", errors.New("jsonl: empty session id")
	case ".":
		return "~002E", nil
	case "..":
		return "~002E~002E", nil
	}
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(id)) {
		if isSafe(u) {
			b.WriteByte(byte(u))
		} else {
			escape(&b, u)
		}
	}
	return b.String(), nil
}

// ProjectDir maps a cwd to its project directory: "_no-cwd" without one,
// else "--<slug>--", where runs of / \ : become one '-', leading '-' go,
// an empty slug is "root", other unsafe units (and '~') become ~XXXX, and
// the slug is cut at 251 characters. The mapping is lossy on purpose.
func ProjectDir(cwd string) string {
	if cwd == "" {
		return "_no-cwd"
	}
	var b strings.Builder
	sep := false
	for _, u := range utf16.Encode([]rune(cwd)) {
		if u == '/' || u == '\\' || u == ':' {
			sep = true
			continue
		}
		if sep {
			b.WriteByte('-')
			sep = false
		}
		if isSafe(u) {
			b.WriteByte(byte(u))
		} else {
			escape(&b, u)
		}
	}
	slug := strings.TrimLeft(b.String(), "-")
	if slug == "" {
		slug = "root"
	}
	if len(slug) > 251 {
		slug = slug[:251]
	}
	return "--" + slug + "--"
}

// LogPath is the log file of a session under a root.
func LogPath(root string, h store.Header, compressed bool) (string, error) {
	enc, err := EncodeID(h.ID)
	if err != nil {
		return "", err
	}
	return path.Join(root, ProjectDir(h.Cwd), enc, FileName(compressed)), nil
}

// HeaderLine renders the header line, keys in the reference's order.
func HeaderLine(h store.Header) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":3,"id":`)
	writeJSON(&b, h.ID)
	b.WriteString(`,"createdAt":`)
	writeJSON(&b, h.CreatedAt)
	if h.Cwd != "" {
		b.WriteString(`,"cwd":`)
		writeJSON(&b, h.Cwd)
	}
	if h.ParentSession != "" {
		b.WriteString(`,"parentSession":`)
		writeJSON(&b, h.ParentSession)
	}
	b.WriteString(`,"isSeeded":`)
	writeJSON(&b, h.IsSeeded)
	if h.Origin != "" {
		b.WriteString(`,"origin":`)
		writeJSON(&b, h.Origin)
	}
	b.WriteString(`,"delegationDepth":`)
	writeJSON(&b, h.DelegationDepth)
	if h.AgentPreset != "" {
		b.WriteString(`,"agentPreset":`)
		writeJSON(&b, h.AgentPreset)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// ErrUnsupported is the kind of a log this package refuses (another format
// version, a malformed header).
var ErrUnsupported = errors.New("jsonl: unsupported log")

var headerKeys = map[string]bool{"type": true, "version": true, "id": true, "createdAt": true, "cwd": true,
	"parentSession": true, "isSeeded": true, "origin": true, "delegationDepth": true, "agentPreset": true}

// legacyHeaderKeys are the header keys of formats v0 and v1: no isSeeded,
// and a seeded session's cut as seedLength.
var legacyHeaderKeys = map[string]bool{"type": true, "version": true, "id": true, "createdAt": true, "cwd": true,
	"parentSession": true, "seedLength": true, "origin": true, "delegationDepth": true, "agentPreset": true}

// ParseHeader parses a header line. The version is checked first: a log
// of another version is refused before its shape is looked at. A v0 or v1
// header (see ParseLegacyHeader) is seeded if it has a seedLength.
func ParseHeader(line []byte) (store.Header, error) {
	h, _, err := ParseLegacyHeader(line)
	return h, err
}

// ParseLegacyHeader is ParseHeader that also returns the seedLength of a
// v0 or v1 header (0 without one, and for v2 and v3 headers, which keep
// no cut: theirs is the seq of the last tagged end-seed marker).
func ParseLegacyHeader(line []byte) (store.Header, uint64, error) { return parseHeader(line) }

func parseHeader(line []byte) (store.Header, uint64, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return store.Header{}, 0, fmt.Errorf("%w: first line is not a JSON object", ErrUnsupported)
	}
	var v int
	if err := json.Unmarshal(m["version"], &v); err != nil {
		return store.Header{}, 0, fmt.Errorf("%w: first line is not a session header", ErrUnsupported)
	}
	if v > Version {
		return store.Header{}, 0, fmt.Errorf("%w: uses log format v%d, but this build reads only up to v%d: upgrade seglog", ErrUnsupported, v, Version)
	}
	if v < OldestVersion {
		return store.Header{}, 0, fmt.Errorf("%w: log format v%d is no format the reference harness wrote (this build reads v%d..v%d)", ErrUnsupported, v, OldestVersion, Version)
	}
	if v <= 1 {
		return parseLegacyHeader(line, m, v)
	}
	for k := range m {
		if !headerKeys[k] {
			return store.Header{}, 0, fmt.Errorf("%w: header key %q", ErrUnsupported, k)
		}
	}
	if string(m["type"]) != `"session"` {
		return store.Header{}, 0, fmt.Errorf("%w: first line is not a session header", ErrUnsupported)
	}
	var h store.Header
	if err := json.Unmarshal(line, &h); err != nil {
		return store.Header{}, 0, fmt.Errorf("%w: session header: %v", ErrUnsupported, err)
	}
	if _, ok := m["isSeeded"]; !ok {
		return store.Header{}, 0, fmt.Errorf("%w: session header lacks isSeeded", ErrUnsupported)
	}
	return h, 0, nil
}

// parseLegacyHeader parses the header of a v0 or v1 log (m: its members)
// with the reference's checks and reasons for a released v0/v1 physical
// header: the keys of legacyHeaderKeys only; type, version, id and
// createdAt required; type "session"; an id string; createdAt, seedLength
// and delegationDepth non-negative safe integers; cwd, parentSession and
// agentPreset strings; origin "subagent". One leniency: a header without
// delegationDepth (logs of hosts that left it out when it was 0) reads as
// depth 0, the header's default (the reference's SessionHeader's), though
// the reference's released-header codec lists the member as required.
func parseLegacyHeader(line []byte, m map[string]json.RawMessage, v int) (store.Header, uint64, error) {
	label := fmt.Sprintf("released v%d physical header", v)
	refuse := func(format string, args ...any) (store.Header, uint64, error) {
		return store.Header{}, 0, fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !legacyHeaderKeys[k] {
			return refuse("%s has unexpected member %q", label, k)
		}
	}
	for _, k := range []string{"type", "version", "id", "createdAt"} {
		if _, ok := m[k]; !ok {
			return refuse("%s lacks required member %q", label, k)
		}
	}
	if string(m["type"]) != `"session"` {
		return refuse("expected %s Session header", label)
	}
	var h store.Header
	h.Version = v
	if json.Unmarshal(m["id"], &h.ID) != nil || m["id"][0] != '"' {
		return refuse("released v%d header id must be a string", v)
	}
	counts := []struct {
		key string
		to  *uint64
	}{{"createdAt", new(uint64)}, {"delegationDepth", new(uint64)}, {"seedLength", new(uint64)}}
	for _, c := range counts {
		raw, ok := m[c.key]
		if !ok {
			continue
		}
		if string(raw) == "null" || json.Unmarshal(raw, c.to) != nil || *c.to > maxSafe {
			return refuse("released v%d header %s must be a non-negative safe integer", v, c.key)
		}
	}
	h.CreatedAt, h.DelegationDepth = int64(*counts[0].to), int(*counts[1].to)
	for _, f := range []struct {
		key string
		to  *string
	}{{"cwd", &h.Cwd}, {"parentSession", &h.ParentSession}, {"agentPreset", &h.AgentPreset}} {
		raw, ok := m[f.key]
		if !ok {
			continue
		}
		if json.Unmarshal(raw, f.to) != nil || raw[0] != '"' {
			return refuse("released v%d header %s must be a string", v, f.key)
		}
	}
	if raw, ok := m["origin"]; ok {
		if string(raw) != `"subagent"` {
			return refuse("released v%d header origin must be \"subagent\"", v)
		}
		h.Origin = "subagent"
	}
	_, h.IsSeeded = m["seedLength"]
	return h, *counts[2].to, nil
}

const maxSafe = 1<<53 - 1

// compactSeqs writes each increasing run of three or more consecutive
// seqs as [start,end]; a list that is not strictly increasing is kept.
func compactSeqs(seqs []uint64) any {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			return seqs
		}
	}
	var out []any
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if j-i+1 >= 3 {
			out = append(out, [2]uint64{seqs[i], seqs[j]})
		} else {
			for k := i; k <= j; k++ {
				out = append(out, seqs[k])
			}
		}
		i = j + 1
	}
	return out
}

// expandSeqs undoes compactSeqs and checks the result is increasing.
func expandSeqs(raw json.RawMessage, seq uint64) ([]uint64, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	var out []uint64
	for _, it := range items {
		var one uint64
		if json.Unmarshal(it, &one) == nil {
			out = append(out, one)
			continue
		}
		var rg [2]uint64
		if err := json.Unmarshal(it, &rg); err != nil || rg[1] < rg[0] {
			return nil, fmt.Errorf("bad sourceEventSeqs item %s", it)
		}
		for s := rg[0]; s <= rg[1]; s++ {
			out = append(out, s)
		}
	}
	return out, nil
}

// EventLine renders one event line (type, seq, time, data, then the
// optional ignorable, sourceEventSeqs, surfaceOp).
func EventLine(e *event.Event) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	writeJSON(&b, e.Type)
	fmt.Fprintf(&b, `,"seq":%d,"time":%d,"data":`, e.Seq, e.Time)
	b.Write(e.Data)
	if e.Ignorable {
		b.WriteString(`,"ignorable":true`)
	}
	if len(e.SourceEventSeqs) > 0 {
		b.WriteString(`,"sourceEventSeqs":`)
		writeJSON(&b, compactSeqs(e.SourceEventSeqs))
	}
	if len(e.SurfaceOp) > 0 {
		b.WriteString(`,"surfaceOp":`)
		b.Write(e.SurfaceOp)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

var eventKeys = map[string]bool{"type": true, "seq": true, "time": true, "data": true, "ignorable": true, "sourceEventSeqs": true, "surfaceOp": true}

// ParseEvent parses one event line.
func ParseEvent(line []byte) (event.Event, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return event.Event{}, errors.New("not a JSON object")
	}
	for k := range m {
		if !eventKeys[k] {
			return event.Event{}, fmt.Errorf("unknown key %q", k)
		}
	}
	var e event.Event
	if json.Unmarshal(m["type"], &e.Type) != nil || json.Unmarshal(m["seq"], &e.Seq) != nil || json.Unmarshal(m["time"], &e.Time) != nil {
		return event.Event{}, errors.New("type, seq and time are required")
	}
	e.Data = bytes.Clone(m["data"])
	if v, ok := m["ignorable"]; ok {
		if string(v) != "true" {
			return event.Event{}, errors.New(`ignorable may only be true`)
		}
		e.Ignorable = true
	}
	if v, ok := m["sourceEventSeqs"]; ok {
		seqs, err := expandSeqs(v, e.Seq)
		if err != nil {
			return event.Event{}, err
		}
		e.SourceEventSeqs = seqs
	}
	if v, ok := m["surfaceOp"]; ok {
		e.SurfaceOp = bytes.Clone(v)
	}
	return e, e.Validate(0)
}

// Log is a parsed session log.
type Log struct {
	Header store.Header
	Events []event.Event
	// Inherited is the seeded session's cut: in v2 and v3 the seq of the
	// last session/end-seed {inherited: true}, in v0 and v1 the header's
	// seedLength.
	Inherited uint64
	// Cut is what Parse dropped from the end of the log under the torn-tail
	// rule (Parse), nil if it dropped nothing: Events are then the rows
	// before Cut.Line.
	Cut *Cut
}

// CutKind is the problem at the start of a Cut.
type CutKind int

const (
	// CutIncompleteLine: the log's last line has no newline, as a write
	// that a crash interrupted leaves it. The cut is that one line.
	CutIncompleteLine CutKind = iota + 1
	// CutBadRow: a complete row that is no event (it does not parse, or
	// breaks the envelope's shape) or whose seq is not the next one (a
	// gap or a repeat), and no turn/end row after it. The cut is that row
	// and every row after it, good ones too.
	CutBadRow
	// CutTornFrame: in a .zstd log, the bytes after the last whole
	// Zstandard frame are no whole frame (the last frame is damaged or
	// incomplete, or the write that was to hold it left other bytes).
	// The cut is those bytes; the rows they held cannot be counted.
	CutTornFrame
)

// String is the kind's name: incomplete-line, bad-row or torn-frame.
func (k CutKind) String() string {
	switch k {
	case CutIncompleteLine:
		return "incomplete-line"
	case CutBadRow:
		return "bad-row"
	case CutTornFrame:
		return "torn-frame"
	}
	return fmt.Sprintf("CutKind(%d)", int(k))
}

// Cut is the tail of a log that Parse dropped under the torn-tail rule:
// everything from the first problem to the end of the file. A log has at
// most one.
type Cut struct {
	// Kind is the problem the cut starts at; Reason says it in words,
	// for a bad row its error ("not a JSON object", "seq 1 repeats: 2
	// events before it, so seq 2 was next", ...).
	Kind   CutKind
	Reason string
	// Line is the line of the file where the dropped rows begin: the bad
	// row, or the incomplete last line (line 1 is the header, the first
	// event row is line 2); for a torn frame with no row dropped before
	// it, the line its rows would have begun at. In a .zstd log, lines
	// count in its decompressed text.
	Line int
	// Rows is the number of lines dropped from Line on: the bad row, every
	// row after it, and an incomplete last line, each one. The rows of a
	// torn frame are not counted (they cannot be read).
	Rows int
	// Bytes is the number of bytes of those lines (decompressed text in a
	// .zstd log), newlines included.
	Bytes int
	// FrameAt and FrameBytes are, in a .zstd log with a torn last frame,
	// where in the file the bytes it dropped begin and how many there
	// are (compressed); FrameBytes is 0 otherwise. A torn frame after a
	// bad row is part of the bad row's cut (Kind is CutBadRow).
	FrameAt, FrameBytes int
}

// ErrCorrupt is the kind of a committed record that does not parse.
var ErrCorrupt = errors.New("jsonl: corrupt log")

// Parse reads a whole log file's bytes, applying the reference's
// torn-tail rule: a log ends where the first problem starts, unless the
// log shows that what follows was committed.
//
//   - A last line without a newline (an interrupted write) is dropped.
//   - A complete row that is no event, or whose seq is not the next one,
//     is taken for the tail of an interrupted write: it is dropped with
//     every row after it, but if a row after it is a turn/end the bad
//     row was committed, and Parse fails with ErrCorrupt, naming its line
//     and its problem: "unparsable committed event" for a row that is no
//     event, "committed event ... out of order" for one that parses but
//     whose seq skips ahead or repeats.
//   - In a .zstd log, a damaged or incomplete last frame is dropped (its
//     rows with it); a damaged frame with a whole frame after it is
//     ErrCorrupt.
//
// What was dropped is Log.Cut (nil if nothing): the line it begins at,
// the rows, and the problem. The reference drops the same rows silently;
// a caller that imports a log should tell which it lost.
//
// In a v0 or v1 log, a packed assistant row ({"type":"text-chunks" (or
// reasoning-chunks, tool-call-chunks), "seq0", "time0", "data"}: one row
// for a run of stream deltas) is expanded into the assistant/chunk events
// it stands for, one per member, at seqs seq0.. and the times time0 plus
// the gaps in data.dt, as the reference reads it (it is one row of a
// Cut). A seedLength beyond the log's events is ErrCorrupt.
func Parse(b []byte, compressed bool) (*Log, error) {
	var torn *tornFrame
	if compressed {
		var err error
		if b, torn, err = decodeFrames(b); err != nil {
			return nil, err
		}
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("%w: header-less session log", ErrUnsupported)
	}
	h, seed, err := parseHeader(b[:nl])
	if err != nil {
		return nil, err
	}
	legacy := h.Version <= 1
	log := &Log{Header: h, Inherited: seed}
	rest := b[nl+1:]
	var cut *Cut
	cutOutOfOrder := false // the bad row parsed: only its seq is not the next
	line := 2              // of the file: the header is line 1
	for ; len(rest) > 0; line++ {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			if cut == nil {
				cut = &Cut{Kind: CutIncompleteLine, Reason: "the last line has no newline: a write cut short", Line: line}
			}
			cut.Rows++
			cut.Bytes += len(rest)
			line++
			break
		}
		row := rest[:nl]
		rest = rest[nl+1:]
		if cut != nil {
			if isTurnEnd(row) {
				if cutOutOfOrder {
					return nil, fmt.Errorf("%w: committed event at line %d out of order: it parses, but its %s (a turn/end follows, at line %d)", ErrCorrupt, cut.Line, cut.Reason, line)
				}
				return nil, fmt.Errorf("%w: unparsable committed event at line %d: %s (a turn/end follows, at line %d)", ErrCorrupt, cut.Line, cut.Reason, line)
			}
			cut.Rows++
			cut.Bytes += nl + 1
			continue
		}
		var evs []event.Event
		if legacy && isPackedRow(row) {
			evs, err = expandPackedRow(row)
		} else {
			var e event.Event
			e, err = ParseEvent(row)
			evs = []event.Event{e}
		}
		if next := uint64(len(log.Events)); err == nil && evs[0].Seq != next {
			err, cutOutOfOrder = seqError(evs[0].Seq, next), true
		}
		if ie := (*event.InvalidError)(nil); errors.As(err, &ie) {
			ie.Index = len(log.Events) // its place in the log, not in the one-row batch
		}
		if err != nil {
			cut = &Cut{Kind: CutBadRow, Reason: err.Error(), Line: line, Rows: 1, Bytes: nl + 1}
			continue
		}
		for _, e := range evs {
			if !legacy && e.Type == "session/end-seed" && isInherited(e.Data) {
				log.Inherited = e.Seq
			}
		}
		log.Events = append(log.Events, evs...)
	}
	if torn != nil {
		if cut == nil {
			cut = &Cut{Kind: CutTornFrame, Line: line,
				Reason: fmt.Sprintf("the last %d bytes of the file, from byte %d, are no whole Zstandard frame: a damaged or incomplete last frame", torn.bytes, torn.at)}
		}
		cut.FrameAt, cut.FrameBytes = torn.at, torn.bytes
	}
	log.Cut = cut
	if legacy && log.Inherited > uint64(len(log.Events)) {
		return nil, fmt.Errorf("%w: header seedLength %d exceeds the log's %d events", ErrCorrupt, log.Inherited, len(log.Events))
	}
	return log, nil
}

// isTurnEnd says whether row is a turn/end event row, however its JSON is
// spaced (a log written by another tool may put blanks around the colon).
func isTurnEnd(row []byte) bool {
	return bytes.Contains(row, []byte("turn/end")) && rowType(row) == "turn/end"
}

// rowType is the "type" member of row, "" if row is no JSON object or has
// none (a string type).
func rowType(row []byte) string {
	var r struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(row, &r) != nil {
		return ""
	}
	return r.Type
}

// seqError says how seq breaks the order of a log whose next seq is next.
func seqError(seq, next uint64) error {
	if seq < next {
		return fmt.Errorf("seq %d repeats: %d events before it, so seq %d was next", seq, next, next)
	}
	return fmt.Errorf("seq %d skips ahead: %d events before it, so seq %d was next", seq, next, next)
}

// packedTypes are the packed assistant rows of v0 and v1 logs, and the
// chunk type each member stands for.
var packedTypes = map[string]string{"text-chunks": "text-delta", "reasoning-chunks": "reasoning-delta", "tool-call-chunks": "tool-call-delta"}

func isPackedRow(row []byte) bool { return packedTypes[rowType(row)] != "" }

// expandPackedRow expands a packed assistant row of a v0 or v1 log into
// its assistant/chunk events.
func expandPackedRow(row []byte) ([]event.Event, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		return nil, errors.New("not a JSON object")
	}
	var typ string
	json.Unmarshal(m["type"], &typ)
	for k := range m {
		if k != "type" && k != "seq0" && k != "time0" && k != "data" {
			return nil, fmt.Errorf("%s row: unexpected field %q", typ, k)
		}
	}
	var seq0 uint64
	var time0 int64
	if json.Unmarshal(m["seq0"], &seq0) != nil || json.Unmarshal(m["time0"], &time0) != nil || seq0 > maxSafe {
		return nil, fmt.Errorf("%s row: seq0 and time0 must be safe integers", typ)
	}
	var d map[string]json.RawMessage
	if err := json.Unmarshal(m["data"], &d); err != nil || d == nil {
		return nil, fmt.Errorf("%s row: data must be an object", typ)
	}
	tool := typ == "tool-call-chunks"
	allowed := map[string]bool{"turn": true, "step": true, "index": true, "dt": true, "texts": !tool, "args": tool, "id": tool, "name": tool}
	for k := range d {
		if !allowed[k] {
			return nil, fmt.Errorf("%s row: unexpected data member %q", typ, k)
		}
	}
	payloadKey := "texts"
	if tool {
		payloadKey = "args"
	}
	var payload []string
	var dt []int64
	var turn, step, index uint64
	if json.Unmarshal(d[payloadKey], &payload) != nil || len(payload) == 0 {
		return nil, fmt.Errorf("%s row: %s must be a non-empty string array", typ, payloadKey)
	}
	if json.Unmarshal(d["dt"], &dt) != nil || len(dt) != len(payload)-1 {
		return nil, fmt.Errorf("%s row: dt length must match its payload", typ)
	}
	if json.Unmarshal(d["turn"], &turn) != nil || json.Unmarshal(d["step"], &step) != nil || json.Unmarshal(d["index"], &index) != nil ||
		turn > maxSafe || step > maxSafe || index > maxSafe {
		return nil, fmt.Errorf("%s row: turn, step and index must be non-negative safe integers", typ)
	}
	var id, name string
	_, hasName := d["name"]
	if tool {
		if json.Unmarshal(d["id"], &id) != nil || id == "" || (hasName && json.Unmarshal(d["name"], &name) != nil) {
			return nil, fmt.Errorf("%s row: id and optional name must be strings", typ)
		}
	}
	out := make([]event.Event, len(payload))
	t := time0
	for i, member := range payload {
		if i > 0 {
			t += dt[i-1]
		}
		if t < event.MinTime || t > event.MaxTime {
			return nil, fmt.Errorf("%s row: member time %d is not a safe integer", typ, t)
		}
		var chunk bytes.Buffer
		fmt.Fprintf(&chunk, `{"type":%q,"index":%d,`, packedTypes[typ], index)
		if tool {
			chunk.WriteString(`"id":`)
			writeJSON(&chunk, id)
			if hasName {
				chunk.WriteString(`,"name":`)
				writeJSON(&chunk, name)
			}
			chunk.WriteString(`,"argumentsDelta":`)
		} else {
			chunk.WriteString(`"text":`)
		}
		writeJSON(&chunk, member)
		chunk.WriteByte('}')
		out[i] = event.Event{Seq: seq0 + uint64(i), Type: "assistant/chunk", Time: t,
			Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":%d,"chunk":%s}`, turn, step, chunk.Bytes()))}
	}
	return out, nil
}

func isInherited(data json.RawMessage) bool {
	var d struct {
		Inherited bool `json:"inherited"`
	}
	return json.Unmarshal(data, &d) == nil && d.Inherited
}

// tornFrame is the end of a .zstd log that is no whole frame: at bytes
// from byte at of the file.
type tornFrame struct{ at, bytes int }

// decodeFrames decodes a series of independent zstd frames. If the last
// frame is incomplete or damaged, the frames before it are kept and torn
// says where the bytes dropped begin (the caller reports them in its
// Cut). A damaged frame with a good frame after it is no torn tail (the
// write after it completed): that is ErrCorrupt, naming its offset.
func decodeFrames(b []byte) (_ []byte, torn *tornFrame, _ error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, nil, err
	}
	defer dec.Close()
	out, err := dec.DecodeAll(b, nil)
	if err == nil {
		return out, nil, nil
	}
	// Find the damaged frame: decode frame by frame, each frame exactly
	// (its length from its block headers), so that bytes after a complete
	// frame never count against it.
	out = out[:0]
	at := 0
	for at < len(b) {
		n, ok := frameLen(b[at:])
		if !ok {
			break
		}
		frame, err := dec.DecodeAll(b[at:at+n], nil)
		if err != nil {
			break
		}
		out, at = append(out, frame...), at+n
	}
	if at == len(b) {
		return out, nil, nil
	}
	for _, q := range frameStarts(b[at+1:]) {
		q += at + 1
		if n, ok := frameLen(b[q:]); ok {
			if frame, err := dec.DecodeAll(b[q:q+n], nil); err == nil && len(frame) > 0 {
				return nil, nil, fmt.Errorf("%w: damaged Zstandard frame at byte %d, with complete frames after it (from byte %d)", ErrCorrupt, at, q)
			}
		}
	}
	if bytes.IndexByte(out, '\n') < 0 {
		return nil, nil, fmt.Errorf("%w: empty or header-less Zstandard session log", ErrUnsupported)
	}
	return out, &tornFrame{at: at, bytes: len(b) - at}, nil
}

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xB5, 0x2F, 0xFD}

// frameStarts returns the offsets of b where a zstd frame may start (its
// magic; compressed bytes may hold it too: callers try each).
func frameStarts(b []byte) []int {
	var out []int
	for i := 0; ; {
		j := bytes.Index(b[i:], zstdMagic)
		if j < 0 {
			return out
		}
		out = append(out, i+j)
		i += j + 1
	}
}

// frameLen returns the length of the zstd frame (or skippable frame) at
// the start of b, from its header and block headers (RFC 8878, 3.1), and
// false if b does not start with a whole one. It checks no content: the
// decoder does.
func frameLen(b []byte) (int, bool) {
	if len(b) < 8 {
		return 0, false
	}
	if magic := binary.LittleEndian.Uint32(b); magic&^0xF == 0x184D2A50 { // skippable
		n := 8 + int64(binary.LittleEndian.Uint32(b[4:]))
		return int(n), n <= int64(len(b))
	}
	if !bytes.HasPrefix(b, zstdMagic) {
		return 0, false
	}
	fhd := b[4]
	single := fhd&0x20 != 0
	n := 5
	if !single {
		n++ // window descriptor
	}
	n += [4]int{0, 1, 2, 4}[fhd&3] // dictionary ID
	switch fcs := fhd >> 6; {
	case fcs == 0 && single:
		n++
	case fcs > 0:
		n += 1 << fcs // 2, 4, 8
	}
	for {
		if n+3 > len(b) {
			return 0, false
		}
		bh := uint32(b[n]) | uint32(b[n+1])<<8 | uint32(b[n+2])<<16
		n += 3
		switch size := int(bh >> 3); bh >> 1 & 3 {
		case 0, 2: // raw, compressed
			n += size
		case 1: // RLE
			n++
		default:
			return 0, false
		}
		if bh&1 != 0 { // last block
			break
		}
	}
	if fhd&4 != 0 {
		n += 4 // content checksum
	}
	return n, n <= len(b)
}

// Encode renders a log. With compressed, the header is one zstd frame and
// each batch (a run of events; batches gives their lengths, nil for one
// batch) another, as the reference writes a frame per durable batch.
func Encode(h store.Header, evs []event.Event, compressed bool, batches []int) ([]byte, error) {
	head := HeaderLine(h)
	if !compressed {
		var b bytes.Buffer
		b.Write(head)
		for i := range evs {
			b.Write(EventLine(&evs[i]))
		}
		return b.Bytes(), nil
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	out := enc.EncodeAll(head, nil)
	if batches == nil && len(evs) > 0 {
		batches = []int{len(evs)}
	}
	i := 0
	for _, n := range batches {
		var b bytes.Buffer
		for ; n > 0 && i < len(evs); n-- {
			b.Write(EventLine(&evs[i]))
			i++
		}
		out = enc.EncodeAll(b.Bytes(), out)
	}
	return out, nil
}

package recovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// accumulator compacts the timed chunks of one model stream attempt into
// the records v2 embeds in data.stream (the reference's assistant stream
// records): consecutive text-delta (reasoning-delta) chunks of one index
// become one text-chunks (reasoning-chunks) record {time0, index, dt,
// texts}, where dt holds the time gaps between members; tool-call-delta
// chunks of one index, call id and name become one tool-call-chunks record
// {time0, index, dt, id, name?, args}; every other chunk (block-start,
// block-end, usage, finish, and a tool-call delta with an empty id or
// name) is a record {type:"chunk", time, chunk} of its own. A gap that is
// not a safe integer starts a new record. Nothing is lost: the records
// expand back to the exact chunks and times.
type accumulator struct{ recs []*streamRecord }

type streamRecord struct {
	kind     string // text-chunks, reasoning-chunks, tool-call-chunks, chunk
	time0    int64
	index    uint64
	dt       []int64
	texts    []string // texts, or args of a tool-call run
	id       string
	name     *string
	lastTime int64
	time     int64           // of a chunk record
	chunk    json.RawMessage // of a chunk record
}

// push adds one chunk at time t and returns its type.
func (a *accumulator) push(t int64, raw json.RawMessage) (string, error) {
	c, err := members(raw)
	if err != nil {
		return "", errors.New("assistant/chunk data.chunk must be an object")
	}
	typ, _ := jsonString(get(c, "type"))
	var prev *streamRecord
	if n := len(a.recs); n > 0 {
		prev = a.recs[n-1]
	}
	switch typ {
	case "text-delta", "reasoning-delta":
		idx, ok := count(get(c, "index"))
		if !ok {
			return "", fmt.Errorf("%s index must be a non-negative safe integer", typ)
		}
		text, ok := jsonString(get(c, "text"))
		if !ok {
			return "", fmt.Errorf("%s text must be a string", typ)
		}
		kind := "text-chunks"
		if typ == "reasoning-delta" {
			kind = "reasoning-chunks"
		}
		if prev != nil && prev.kind == kind && prev.index == idx {
			if gap, ok := safeGap(prev.lastTime, t); ok {
				prev.dt, prev.texts, prev.lastTime = append(prev.dt, gap), append(prev.texts, text), t
				return typ, nil
			}
		}
		a.recs = append(a.recs, &streamRecord{kind: kind, time0: t, index: idx, dt: []int64{}, texts: []string{text}, lastTime: t})
	case "tool-call-delta":
		idx, ok := count(get(c, "index"))
		if !ok {
			return "", fmt.Errorf("%s index must be a non-negative safe integer", typ)
		}
		id, ok := jsonString(get(c, "id"))
		if !ok {
			return "", errors.New("tool-call-delta id must be a string")
		}
		var name *string
		if raw := get(c, "name"); raw != nil {
			s, ok := jsonString(raw)
			if !ok {
				return "", errors.New("tool-call-delta name must be a string")
			}
			name = &s
		}
		args, ok := jsonString(get(c, "argumentsDelta"))
		if !ok {
			return "", errors.New("tool-call-delta argumentsDelta must be a string")
		}
		if id == "" || (name != nil && *name == "") {
			a.recs = append(a.recs, &streamRecord{kind: "chunk", time: t, chunk: raw})
			return typ, nil
		}
		if prev != nil && prev.kind == "tool-call-chunks" && prev.index == idx && prev.id == id && sameName(prev.name, name) {
			if gap, ok := safeGap(prev.lastTime, t); ok {
				prev.dt, prev.texts, prev.lastTime = append(prev.dt, gap), append(prev.texts, args), t
				return typ, nil
			}
		}
		a.recs = append(a.recs, &streamRecord{kind: "tool-call-chunks", time0: t, index: idx, dt: []int64{}, id: id, name: name, texts: []string{args}, lastTime: t})
	case "block-start", "block-end", "usage", "finish":
		a.recs = append(a.recs, &streamRecord{kind: "chunk", time: t, chunk: raw})
	default:
		return "", fmt.Errorf("unknown assistant stream chunk type %s", orUndefined(get(c, "type")))
	}
	return typ, nil
}

func sameName(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// safeGap returns next-prev if it is a safe integer.
func safeGap(prev, next int64) (int64, bool) {
	gap := next - prev
	return gap, gap >= -maxSafe && gap <= maxSafe
}

// json renders the records as the stream array.
func (a *accumulator) json() json.RawMessage {
	b := []byte{'['}
	for i, r := range a.recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r.json()...)
	}
	return append(b, ']')
}

func (r *streamRecord) json() json.RawMessage {
	if r.kind == "chunk" {
		return object("type", jsonText(r.kind), "time", json.RawMessage(strconv.FormatInt(r.time, 10)), "chunk", r.chunk)
	}
	head := []any{"type", jsonText(r.kind), "time0", json.RawMessage(strconv.FormatInt(r.time0, 10)), "index", json.RawMessage(strconv.FormatUint(r.index, 10)), "dt", jsonText(r.dt)}
	if r.kind != "tool-call-chunks" {
		return object(append(head, "texts", jsonText(r.texts))...)
	}
	head = append(head, "id", jsonText(r.id))
	if r.name != nil {
		head = append(head, "name", jsonText(*r.name))
	}
	return object(append(head, "args", jsonText(r.texts))...)
}

package testgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/seglog/seglog/event"
)

var words = strings.Fields(`the a of to and in is it that for on with as was at by this be from or
have an are not but which they you we his her can all there their will one would what so if out up
about into when who them more some could time no like other than then its our only new just two also
tool call result file read write error step turn model user message assistant function return value
session event log index segment frame flush sync append offset batch token stream chunk delta text
reasoning plan mode header request context provider config path line code test build run go json
struct field type string number array object null true false key map list set get put delete open
close lock lease handle writer reader buffer cache page disk memory thread core process signal`)

var types = []string{"turn/start", "assistant/message", "tool/result", "step/end"}

// Events returns n events with seqs first..first+n-1, each about size bytes
// of JSON data. Every optional field occurs: some events are ignorable, some
// carry sourceEventSeqs and a surfaceOp, and times are not monotonic. Each
// event is a pure function of its seq.
func Events(first uint64, n, size int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = Event(first+uint64(i), size)
	}
	return evs
}

// Event returns the event Events would put at seq.
func Event(seq uint64, size int) event.Event {
	r := rand.New(rand.NewPCG(seq, 99))
	var text strings.Builder
	for text.Len() < size-60 {
		text.WriteString(words[r.IntN(len(words))])
		text.WriteByte(' ')
	}
	e := event.Event{
		Seq:  seq,
		Type: types[seq%4],
		Time: 1_700_000_000_000 + int64(seq)*7 - int64(seq%3)*11,
		Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"text":%q}`, seq, text.String())),
	}
	if seq%5 == 1 {
		e.Ignorable = true
	}
	if seq%4 == 2 && seq > 0 {
		e.SourceEventSeqs = []uint64{seq - 1}
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	return e
}

// V3Events is Events for logs that keep the v3 surface rules
// (recovery.SurfaceChecker), as a reference import requires: the same
// data, times and ignorable events, but the types cycle step/start,
// user/message (citing the event before it), assistant/message,
// tool/result (citing the event before it), each surface event with
// surfaceOp "append". Each event is a pure function of its seq; a log
// from seq 0 starts with a step/start.
func V3Events(first uint64, n, size int) []event.Event {
	evs := Events(first, n, size)
	for i := range evs {
		e := &evs[i]
		e.SourceEventSeqs, e.SurfaceOp = nil, nil
		switch e.Seq % 4 {
		case 0:
			e.Type = "step/start"
			continue
		case 1:
			e.Type = "user/message"
			e.SourceEventSeqs = []uint64{e.Seq - 1}
		case 2:
			e.Type = "assistant/message"
		case 3:
			e.Type = "tool/result"
			e.SourceEventSeqs = []uint64{e.Seq - 1}
		}
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	return evs
}

// Size returns the bytes a user hands over for evs: the JSON lengths of
// type, data and surfaceOp plus 16 bytes of seq and time each, 8 per source
// seq. Throughput figures divide by it.
func Size(evs []event.Event) int {
	n := 0
	for _, e := range evs {
		n += len(e.Type) + len(e.Data) + len(e.SurfaceOp) + 8*len(e.SourceEventSeqs) + 16
	}
	return n
}

// V2Turns returns a format-v2 session log of turns turns (REFERENCE-cases
// J31's shape): turn/start, step/start, a user message citing the turn
// start, in the first turn a second user message replacing it with a v2
// replace envelope ({"op":"replace","start","end"}), step/end and
// turn/end. The turns are named prefix+"t<n>". Its user messages have the
// released v2 shape ({id, role, content, source}), which the reference's
// v2 → v3 admission requires.
func V2Turns(prefix string, turns int) []event.Event {
	evs := V2TurnsPre38(prefix, turns)
	for i := range evs {
		if evs[i].Type == "user/message" {
			var d struct{ Message json.RawMessage }
			json.Unmarshal(evs[i].Data, &d)
			evs[i].Data = d.Message
		}
	}
	return evs
}

// V2TurnsPre38 is V2Turns as builds before issue 38 made it: its user
// messages are {turn, step, message}, a shape the reference's v2 → v3
// admission refuses ("user/message data lacks required field role"). A
// store checked in then (engine's testdata/golden) holds such a session.
func V2TurnsPre38(prefix string, turns int) []event.Event {
	var evs []event.Event
	add := func(typ, data string) *event.Event {
		evs = append(evs, event.Event{Seq: uint64(len(evs)), Type: typ, Time: int64(1000 + len(evs)), Data: json.RawMessage(data)})
		return &evs[len(evs)-1]
	}
	for t := range turns {
		turn := fmt.Sprintf(`"turn":%q`, fmt.Sprintf("%st%d", prefix, t))
		add("turn/start", "{"+turn+"}")
		add("step/start", "{"+turn+`,"step":"s"}`)
		u := add("user/message", "{"+turn+`,"step":"s","message":{"id":"u","role":"user","content":[],"source":{"kind":"user"}}}`)
		u.SurfaceOp, u.SourceEventSeqs = json.RawMessage(`"append"`), []uint64{u.Seq - 2}
		if t == 0 {
			r := add("user/message", "{"+turn+`,"step":"s","message":{"id":"u2","role":"user","content":[],"source":{"kind":"user"}}}`)
			r.SurfaceOp = json.RawMessage(fmt.Sprintf(`{"op":"replace","start":%d,"end":%d}`, u.Seq, u.Seq))
			r.SourceEventSeqs = []uint64{u.Seq}
		}
		add("step/end", "{"+turn+`,"step":"s"}`)
		add("turn/end", "{"+turn+`,"reason":{"kind":"completed"}}`)
	}
	return evs
}

// V2Filler returns what Events returns, as a log the reference's v2 → v3
// migration takes: no surface events (which need a step/start and a
// surfaceOp before them in v2), so the events are feedback/record ones
// (data exactly {text}) and cite nothing, and the migration leaves them as they are (no step/start:
// no system head).
func V2Filler(first uint64, n, size int) []event.Event {
	evs := Events(first, n, size)
	for i := range evs {
		var d struct{ Text string }
		json.Unmarshal(evs[i].Data, &d)
		evs[i].Type, evs[i].SurfaceOp, evs[i].SourceEventSeqs = "feedback/record", nil, nil
		evs[i].Data, _ = json.Marshal(struct {
			Text string `json:"text"`
		}{d.Text}) // the released shape: exactly {text}
	}
	return evs
}

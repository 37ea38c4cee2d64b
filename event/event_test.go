package event

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	ok := Event{Seq: 3, Type: "turn/start", Data: json.RawMessage(` {"turn":1}`)}
	tests := []struct {
		name   string
		edit   func(*Event)
		reason string // "" means valid
	}{
		{"valid", func(*Event) {}, ""},
		{"missing type", func(e *Event) { e.Type = "" }, "missing type"},
		{"long type", func(e *Event) { e.Type = strings.Repeat("x", MaxTypeLen+1) }, "type is"},
		{"data not object", func(e *Event) { e.Data = json.RawMessage(`[1]`) }, "not a JSON object"},
		{"data not UTF-8", func(e *Event) { e.Data = json.RawMessage("{\"a\":\"\xff\xfe\"}") }, "data is not valid UTF-8 (byte 0xff at offset 6)"},
		{"type not UTF-8", func(e *Event) { e.Type = "turn/\xc3" }, "type is not valid UTF-8"},
		{"surfaceOp not UTF-8", func(e *Event) { e.SurfaceOp = json.RawMessage("\"\xe2\x82\"") }, "surfaceOp is not valid UTF-8"},
		{"data UTF-8 multibyte", func(e *Event) { e.Data = json.RawMessage(`{"a":"héllo €𝄞"}`) }, ""},
		{"data invalid", func(e *Event) { e.Data = json.RawMessage(`{"a":}`) }, "not a JSON object"},
		{"data empty", func(e *Event) { e.Data = nil }, "not a JSON object"},
		{"surfaceOp invalid", func(e *Event) { e.SurfaceOp = json.RawMessage(`{`) }, "surfaceOp"},
		{"surfaceOp valid", func(e *Event) { e.SurfaceOp = json.RawMessage(`"append"`) }, ""},
		{"time max", func(e *Event) { e.Time = MaxTime }, ""},
		{"time min", func(e *Event) { e.Time = MinTime }, ""},
		{"time past max", func(e *Event) { e.Time = MaxTime + 1 }, "time 9007199254740992 is not a safe integer"},
		{"time before min", func(e *Event) { e.Time = MinTime - 1 }, "time -9007199254740992 is not a safe integer"},
		{"time MaxInt64", func(e *Event) { e.Time = math.MaxInt64 }, "time"},
		{"time MinInt64", func(e *Event) { e.Time = math.MinInt64 }, "time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ok.Clone()
			tt.edit(&e)
			err := e.Validate(2)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var ie *InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Index != 2 || ie.Seq != 3 || !strings.Contains(ie.Reason, tt.reason) {
				t.Fatalf("Validate = %v, want *InvalidError at index 2 with %q", err, tt.reason)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	e := Event{Type: "x", Data: json.RawMessage(`{}`), SourceEventSeqs: []uint64{1}, SurfaceOp: json.RawMessage(`"append"`)}
	c := e.Clone()
	c.Data[0], c.SourceEventSeqs[0], c.SurfaceOp[0] = 'X', 9, 'X'
	if e.Data[0] != '{' || e.SourceEventSeqs[0] != 1 || e.SurfaceOp[0] != '"' {
		t.Error("Clone shares memory")
	}
}

// An event with a huge type gets an error of a few hundred bytes that
// names the limit, not one that quotes the whole type.
func TestInvalidErrorCutsALongType(t *testing.T) {
	e := Event{Type: strings.Repeat("q", 1<<20), Time: 1, Data: []byte(`{}`)}
	err := e.Validate(3)
	var ie *InvalidError
	if !errors.As(err, &ie) || len(ie.Type) != 1<<20 {
		t.Fatalf("Validate = %v, want an *InvalidError keeping the type", err)
	}
	msg := err.Error()
	if len(msg) > 2*MaxTypeLen || !strings.Contains(msg, "type is 1048576 bytes, more than 256") || !strings.Contains(msg, "index 3") {
		t.Errorf("message of %d bytes: %.300s", len(msg), msg)
	}
}

// CloneBatch's copies share no memory with the events they copy, nor with
// each other beyond their arena: writing into the originals changes no
// copy, and each copy's bytes are its own event's.
func TestCloneBatch(t *testing.T) {
	evs := []Event{
		{Seq: 1, Type: "user/message", Data: []byte(`{"a":1}`), SurfaceOp: []byte(`{"op":"append"}`), SourceEventSeqs: []uint64{0}},
		{Seq: 2, Type: "assistant/message", Data: []byte(`{"b":2}`)},
		{Seq: 3, Type: "x", Data: nil},
	}
	cl := CloneBatch(evs)
	for i := range evs {
		for j := range evs[i].Data {
			evs[i].Data[j] = '#'
		}
		for j := range evs[i].SurfaceOp {
			evs[i].SurfaceOp[j] = '#'
		}
		for j := range evs[i].SourceEventSeqs {
			evs[i].SourceEventSeqs[j] = 99
		}
	}
	want := []Event{
		{Seq: 1, Type: "user/message", Data: []byte(`{"a":1}`), SurfaceOp: []byte(`{"op":"append"}`), SourceEventSeqs: []uint64{0}},
		{Seq: 2, Type: "assistant/message", Data: []byte(`{"b":2}`)},
		{Seq: 3, Type: "x", Data: nil},
	}
	if diff := cmp.Diff(want, cl); diff != "" {
		t.Errorf("CloneBatch after its originals changed (-want +got):\n%s", diff)
	}
	cl[0].Data = append(cl[0].Data, 'x') // (capped: reallocates, the next copy's bytes stay)
	if string(cl[1].Data) != `{"b":2}` {
		t.Errorf("appending to one copy's Data changed the next: %q", cl[1].Data)
	}
}

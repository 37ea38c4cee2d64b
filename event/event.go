package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Event is one entry of a session log.
//
// Data is the event payload and must be a JSON object. SurfaceOp, when set,
// is a JSON value ("append" or a replace object, see the event catalog).
// Seq is dense from 0 within a session.
type Event struct {
	Seq             uint64          `json:"seq"`
	Type            string          `json:"type"`
	Time            int64           `json:"time"` // milliseconds since the Unix epoch, in [MinTime, MaxTime]
	Data            json.RawMessage `json:"data"`
	Ignorable       bool            `json:"ignorable,omitempty"`
	SourceEventSeqs []uint64        `json:"sourceEventSeqs,omitempty"`
	SurfaceOp       json.RawMessage `json:"surfaceOp,omitempty"`
}

// Limits on one event. They bound what a hostile or buggy caller can make
// the store hold in one row; the on-disk format allows more.
const (
	MaxTypeLen = 256      // bytes of Type
	MaxDataLen = 16 << 20 // bytes of Data
)

// The range of Time: JavaScript's safe integers, as the reference harness
// requires of an event time. A segment stores each time as the difference
// from the previous event's, which for times in this range always fits an
// int64; a time outside it could make a log that reads back as corrupt.
const (
	MaxTime = 1<<53 - 1
	MinTime = -MaxTime
)

// ErrInvalid is the kind of every *InvalidError.
var ErrInvalid = errors.New("event: invalid")

// InvalidError names the event that failed validation and why.
// errors.Is(err, ErrInvalid) is true for every InvalidError.
type InvalidError struct {
	Index  int    // position in the batch
	Seq    uint64 // the event's Seq
	Type   string // the event's Type (may be empty: that can be the reason)
	Reason string
}

// Error names the event; a Type longer than MaxTypeLen (the reason, then)
// is cut to its first MaxTypeLen bytes, so that the message stays short.
func (e *InvalidError) Error() string {
	typ := e.Type
	if len(typ) > MaxTypeLen {
		typ = typ[:MaxTypeLen] + "..."
	}
	return fmt.Sprintf("event: invalid event at index %d (seq %d, type %q): %s", e.Index, e.Seq, typ, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Validate checks the shape of e: a non-empty Type of at most MaxTypeLen
// bytes, Time in [MinTime, MaxTime], Data a JSON object of at most
// MaxDataLen bytes, SurfaceOp empty or valid JSON, and all three valid
// UTF-8. It does not check the
// Type against a catalog. index is reported in the error.
func (e *Event) Validate(index int) error {
	bad := func(reason string) error {
		return &InvalidError{Index: index, Seq: e.Seq, Type: e.Type, Reason: reason}
	}
	switch {
	case e.Type == "":
		return bad("missing type")
	case len(e.Type) > MaxTypeLen:
		return bad(fmt.Sprintf("type is %d bytes, more than %d", len(e.Type), MaxTypeLen))
	case e.Time < MinTime || e.Time > MaxTime:
		return bad(fmt.Sprintf("time %d is not a safe integer (at most %d from 0)", e.Time, int64(MaxTime)))
	case len(e.Data) > MaxDataLen:
		return bad(fmt.Sprintf("data is %d bytes, more than %d", len(e.Data), MaxDataLen))
	case !isObject(e.Data):
		return bad("data is not a JSON object")
	case len(e.SurfaceOp) > 0 && !validJSON(e.SurfaceOp):
		return bad("surfaceOp is not valid JSON")
	}
	// JSON text is UTF-8 (RFC 8259 §8.1): what is stored must read back
	// and export as JSON.
	// (The type is checked as a string: a conversion would be a copy per
	// event.)
	if !utf8.ValidString(e.Type) {
		at := invalidUTF8([]byte(e.Type))
		return bad(fmt.Sprintf("type is not valid UTF-8 (byte %#x at offset %d)", e.Type[at], at))
	}
	for _, f := range [...]struct {
		name string
		b    []byte
	}{{"data", e.Data}, {"surfaceOp", e.SurfaceOp}} {
		if at := invalidUTF8(f.b); at >= 0 {
			return bad(fmt.Sprintf("%s is not valid UTF-8 (byte %#x at offset %d)", f.name, f.b[at], at))
		}
	}
	return nil
}

// invalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && validJSON(b)
}

// Clone returns a deep copy of e that shares no memory with it.
func (e Event) Clone() Event {
	e.Data = bytes.Clone(e.Data)
	e.SurfaceOp = bytes.Clone(e.SurfaceOp)
	e.SourceEventSeqs = slices.Clone(e.SourceEventSeqs)
	return e
}

// CloneBatch returns deep copies of evs that share no memory with them:
// Clone of each, with their Data and SurfaceOp bytes in one allocation.
func CloneBatch(evs []Event) []Event {
	n := 0
	for i := range evs {
		n += len(evs[i].Data) + len(evs[i].SurfaceOp)
	}
	arena := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	out := make([]Event, len(evs))
	for i, e := range evs {
		e.Data = take(e.Data)
		e.SurfaceOp = take(e.SurfaceOp)
		e.SourceEventSeqs = slices.Clone(e.SourceEventSeqs)
		out[i] = e
	}
	return out
}

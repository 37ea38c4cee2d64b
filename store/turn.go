package store

import (
	"encoding/json"
	"strconv"

	"github.com/seglog/seglog/event"
)

// TurnState is where a session's log stands in its turns, as the
// recovery fold (package recovery) sees it at the log's end: what a host
// needs to go on after Resume (the next turn's number), and, while a turn
// is open, its step and the tool calls that have no result. A backend
// computes it from the open turn alone (the events after the last
// turn/start or turn/end), never from the whole log, where it knows where
// that turn starts.
type TurnState struct {
	// Len is the session's length the state is of: the seq of the next
	// event.
	Len uint64
	// Open reports whether a turn is open (a turn/start without its
	// turn/end): the closers Resume would append close it.
	Open bool
	// Turn is data.turn of the open turn, or of the last closed one if
	// none is open (as its turn/end carries it); nil before the first
	// turn.
	Turn json.RawMessage
	// NextTurn is the number the next turn/start takes: Turn + 1 where
	// Turn is an unsigned integer, 0 before the first turn (or if Turn is
	// not one).
	NextTurn uint64
	// Step is data.step of the open step, nil if no step is open.
	Step json.RawMessage
	// Pending are the tool calls of the open turn asked for (a tool-call
	// block of an assistant/message) without a result yet, in the order
	// they were asked for: Resume answers each with an error result.
	Pending []PendingCall
}

// PendingCall is a tool call asked for without a result.
type PendingCall struct {
	CallID string
	Name   string
	Step   json.RawMessage // data.step of the assistant message that asked for it
	// Started reports whether a tool/call recorded its start, at seq
	// CallSeq: its outcome is then unknown; otherwise it never started.
	Started bool
	CallSeq uint64
}

// NextTurnAfter is TurnState.NextTurn of a state whose Turn is turn.
func NextTurnAfter(turn json.RawMessage) uint64 {
	n, err := strconv.ParseUint(string(turn), 10, 64)
	if err != nil || n == ^uint64(0) {
		return 0
	}
	return n + 1
}

// InspectOption configures Inspect.
type InspectOption func(*InspectOptions)

// InspectOptions is what Inspect's options set; a backend reads them with
// InspectOptionsOf.
type InspectOptions struct {
	// Offset and Limit are the window of the log Inspection.Events holds,
	// as Read(Offset, Limit) takes it: by default (Offset 0, Limit -1) the
	// whole log.
	Offset, Limit int
}

// InspectEvents makes Inspect read only the events Read(offset, limit)
// would return (limit < 0: to the end; limit 0: none) into
// Inspection.Events. The closers, the turn state and the holder do not
// depend on it: Inspect computes them from the open turn, so an observer
// that wants only those (InspectEvents(0, 0)) reads no more of the log.
func InspectEvents(offset, limit int) InspectOption {
	return func(o *InspectOptions) { o.Offset, o.Limit = max(offset, 0), limit }
}

// InspectOptionsOf applies opts.
func InspectOptionsOf(opts []InspectOption) InspectOptions {
	o := InspectOptions{Limit: -1}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Resumed is one session of a ResumeMany: its write handle and the
// closers its resume appended (none if its log was balanced), or the
// error that kept it from being resumed (then Handle is the zero value).
type Resumed[H Handle] struct {
	ID      string
	Handle  H
	Closers []event.Event
	Err     error
}

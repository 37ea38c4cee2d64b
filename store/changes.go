package store

import (
	"errors"
	"fmt"

	"github.com/seglog/seglog/event"
)

// Cursor is a position in a store's change feed (Store.Changes): an
// opaque, printable token (ASCII letters, digits and '-') that survives
// restarts, compaction, index rebuilds and migrations. The zero Cursor
// ("") is the start of the feed: everything the store still holds. Each
// Change carries the cursor just past it; pass it back to resume after
// that change. A cursor belongs to the store that issued it.
type Cursor string

// String returns the cursor as printed (and parsed back by Cursor(s)).
func (c Cursor) String() string { return string(c) }

// ChangeKind says what a Change records.
type ChangeKind uint8

const (
	// ChangeCreate: a session was created (Header set). Its events
	// follow as ChangeAppend.
	ChangeCreate ChangeKind = iota + 1
	// ChangeAppend: events Seq.. of a session became durable (Events set,
	// Events[0].Seq == Seq).
	ChangeAppend
	// ChangeFork: a session was created as a fork of Parent at N events
	// (Header set): its events before N are the parent's as of the fork
	// and are not repeated; its own, from its inherited end-seed marker
	// at seq N on, follow as ChangeAppend.
	ChangeFork
	// ChangeDelete: the session was deleted. Its ID may be created again
	// later (a new ChangeCreate or ChangeFork).
	ChangeDelete
)

var kindNames = [...]string{ChangeCreate: "create", ChangeAppend: "append", ChangeFork: "fork", ChangeDelete: "delete"}

func (k ChangeKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("ChangeKind(%d)", uint8(k))
}

// MarshalText writes the kind's name ("create", "append", "fork", "delete").
func (k ChangeKind) MarshalText() ([]byte, error) {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return []byte(kindNames[k]), nil
	}
	return nil, fmt.Errorf("store: unknown change kind %d", uint8(k))
}

// UnmarshalText reads a kind's name.
func (k *ChangeKind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n != "" && n == string(b) {
			*k = ChangeKind(i)
			return nil
		}
	}
	return fmt.Errorf("store: unknown change kind %q", b)
}

// Change is one entry of the change feed: what became durable in a
// store, in the order it did.
type Change struct {
	Kind    ChangeKind `json:"kind"`
	Session string     `json:"session"`
	// Cursor is the position just past this change: Changes(ctx,
	// c.Cursor) resumes with the next one.
	Cursor Cursor `json:"cursor"`
	// Header: the session's header (ChangeCreate, ChangeFork).
	Header *Header `json:"header,omitempty"`
	// Parent and N: the session forked and the events inherited from it
	// (ChangeFork).
	Parent string `json:"parent,omitempty"`
	N      uint64 `json:"n,omitempty"`
	// Seq and Events: the events appended, Seq the first's (ChangeAppend).
	Seq    uint64        `json:"seq,omitempty"`
	Events []event.Event `json:"events,omitempty"`
}

// ChangesOption configures Store.Changes.
type ChangesOption func(*ChangesOptions)

// ChangesOptions is what the ChangesOption values set; a backend reads
// them with ChangesConfig.
type ChangesOptions struct {
	// Follow: after the last durable change, wait for the next ones (as
	// Handle.Wait does, woken by writes of any process) until the
	// context ends, instead of ending the iteration.
	Follow bool
}

// Follow makes Changes wait for new changes past the end instead of
// ending there: the iteration ends only with the context (its error is
// then yielded) or a failure.
func Follow() ChangesOption { return func(o *ChangesOptions) { o.Follow = true } }

// ChangesConfig applies opts.
func ChangesConfig(opts []ChangesOption) ChangesOptions {
	var o ChangesOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Errors of the change feed.
var (
	// ErrCursorExpired: Changes from a cursor older than what the store
	// still holds (the frames or messages it follows were removed, e.g.
	// by compaction of a deleted session the consumer had not seen
	// deleted yet, or by a stream's limits). The consumer must start
	// again from the zero Cursor (and drop what it built). See
	// *CursorError.
	ErrCursorExpired = errors.New("cursor is older than what the store still holds")
	// ErrInvalidCursor: Changes from a cursor that is malformed or was
	// issued by another store or backend. See *CursorError.
	ErrInvalidCursor = errors.New("invalid change cursor")
)

// CursorError is the error of Changes given a cursor it cannot resume
// from: Kind is ErrCursorExpired or ErrInvalidCursor, Reason says why.
type CursorError struct {
	Cursor Cursor
	Kind   error
	Reason string
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("changes from cursor %q: %v: %s", string(e.Cursor), e.Kind, e.Reason)
}

func (e *CursorError) Unwrap() error { return e.Kind }

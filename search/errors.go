package search

import (
	"errors"
	"fmt"
)

// ErrQuery is the kind of every malformed query (errors.Is): a *QueryError.
var ErrQuery = errors.New("search: malformed query")

// ErrClosed is returned by the calls of a closed Index.
var ErrClosed = errors.New("search: index closed")

// ErrIndex is the kind of an index file that cannot be used (damaged, of
// another format): Open moves it aside and rebuilds, so a caller sees it
// only when that fails too.
var ErrIndex = errors.New("search: index unusable")

// QueryError says what is wrong with a query: the problem, and the byte
// offset in the query where it was found (-1 for the query as a whole).
type QueryError struct {
	Query   string // the query, cut to 80 bytes
	Offset  int
	Problem string
}

func (e *QueryError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("search: query %q: %s", e.Query, e.Problem)
	}
	return fmt.Sprintf("search: query %q: at byte %d: %s", e.Query, e.Offset, e.Problem)
}

// Is reports ErrQuery.
func (e *QueryError) Is(target error) bool { return target == ErrQuery }

// SessionError is a session whose events could not be read for indexing
// (a damaged segment: Err is the store's *store.CorruptionError): its
// events after Seq are not in the index. A search whose filters admit the
// session reports it in Result.Failed; the rest of the store stays
// searchable.
type SessionError struct {
	Session string
	Seq     uint64 // the first event not indexed
	Err     error
}

func (e *SessionError) Error() string {
	return fmt.Sprintf("search: session %q: events from seq %d not searchable: %v", e.Session, e.Seq, e.Err)
}

func (e *SessionError) Unwrap() error { return e.Err }

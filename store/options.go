package store

import (
	"fmt"
	"time"

	"github.com/seglog/seglog/event"
)

// ForkOption configures Fork.
type ForkOption func(*ForkOptions)

// ForkOptions is what Fork's options set; a backend reads them with
// ForkOptionsOf.
type ForkOptions struct {
	// MarkerTime is the time of the fork's marker (ForkMarker), in
	// milliseconds since the Unix epoch; HasMarkerTime says it is set
	// (else the marker is stamped with the time of the Fork).
	MarkerTime    int64
	HasMarkerTime bool
}

// MarkerTime makes Fork stamp the fork's marker with time ms instead of
// the time of the Fork: a copy of a fork (Copy) keeps its source's marker
// as it is.
func MarkerTime(ms int64) ForkOption {
	return func(o *ForkOptions) { o.MarkerTime, o.HasMarkerTime = ms, true }
}

// ForkOptionsOf applies opts.
func ForkOptionsOf(opts []ForkOption) ForkOptions {
	var o ForkOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Marker is the fork's marker at n as these options make it: ForkMarker
// at MarkerTime, or at the current time if none is set.
func (o ForkOptions) Marker(n uint64) event.Event {
	if o.HasMarkerTime {
		return ForkMarker(n, o.MarkerTime)
	}
	return ForkMarker(n, time.Now().UnixMilli())
}

// DeleteOption configures Delete.
type DeleteOption func(*DeleteOptions)

// DeleteOptions is what Delete's options set; a backend reads them with
// DeleteOptionsOf.
type DeleteOptions struct {
	// Revision, if not "", is the revision the session must still have
	// once Delete holds its lease (IfRevision).
	Revision string
}

// IfRevision makes Delete delete the session only if its revision
// (Snapshot.Revision) is still rev once Delete holds the session's lease,
// when no writer can change it; otherwise Delete fails with
// ErrRevisionMismatch and the session stays as it is. A janitor that
// chose the session by what Stat or List showed (Retain) loses nothing a
// host wrote since.
func IfRevision(rev string) DeleteOption {
	return func(o *DeleteOptions) { o.Revision = rev }
}

// DeleteOptionsOf applies opts.
func DeleteOptionsOf(opts []DeleteOption) DeleteOptions {
	var o DeleteOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Check is Delete's check of the revision a session has under its lease
// (Revision(uid, events)) against IfRevision: nil, or an error wrapping
// ErrRevisionMismatch that names both.
func (o DeleteOptions) Check(uid, events uint64) error {
	if o.Revision == "" {
		return nil
	}
	if got := Revision(uid, events); got != o.Revision {
		return fmt.Errorf("%w: it is %s, the delete was for %s", ErrRevisionMismatch, got, o.Revision)
	}
	return nil
}

package jetstream

import (
	"errors"
	"fmt"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"strings"
)

// Errors of Open, besides the engine's. Test with errors.Is.
var (
	// ErrNotProvisioned: Open found no stream or no lease bucket of the
	// configured name, and Options.Create is off. The error names which.
	ErrNotProvisioned = errors.New("jetstream: not provisioned")
	// ErrConfigMismatch is the kind of every *ConfigError.
	ErrConfigMismatch = errors.New("jetstream: settings differ from what the store needs")
)

// ConfigError reports an existing stream or lease bucket whose settings
// are not the ones the store needs (Open never changes them): every
// difference, each naming the setting, what the store needs and what it
// found.
type ConfigError struct {
	Kind       string // "stream" or "lease bucket"
	Name       string // the stream's or the bucket's name
	Mismatches []Mismatch
}

// Mismatch is one setting of a *ConfigError.
type Mismatch struct {
	Field string // as NATS names it: "replicas", "storage", "duplicate_window", "ttl", ...
	Want  string // what the store needs ("3", "file", "at least 1m0s")
	Got   string // what the stream or bucket has
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jetstream: %s %s does not have the settings the store needs: ", e.Kind, e.Name)
	for i, m := range e.Mismatches {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: want %s, got %s", m.Field, m.Want, m.Got)
	}
	return b.String()
}

// Is reports whether target is ErrConfigMismatch.
func (e *ConfigError) Is(target error) bool { return target == ErrConfigMismatch }

// EventTooLargeError is Append's or Enqueue's refusal of a batch holding an
// event that cannot travel in one message even alone: the batch writes
// nothing. A message may take Limit bytes: the server's max_payload (NATS
// defaults to 1 MiB), or the stream's max_msg_size if smaller; seglog
// itself takes events of up to event.MaxDataLen (16 MiB) of data. Test
// with errors.As; errors.Is(err, store.ErrInvalidEvent) holds.
type EventTooLargeError struct {
	Index int    // the event's position in the batch
	Seq   uint64 // its seq
	Size  int    // the most bytes a message of it alone takes
	Limit int    // the most bytes a message may take
}

func (e *EventTooLargeError) Error() string {
	return fmt.Sprintf("jetstream: event %d (seq %d) takes up to %d bytes in a message, over the %d bytes the server allows in one (its max_payload, or the stream's max_msg_size if smaller; seglog's own limit is %d bytes of data)",
		e.Index, e.Seq, e.Size, e.Limit, event.MaxDataLen)
}

// Is reports whether target is store.ErrInvalidEvent.
func (e *EventTooLargeError) Is(target error) bool { return target == store.ErrInvalidEvent }

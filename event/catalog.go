package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// ErrUnsupported is the kind of every *UnsupportedError.
var ErrUnsupported = errors.New("event: unsupported")

// UnsupportedError reports a stored event this build (and its catalog)
// does not know and that is not marked ignorable, or a retired shape.
// Reads fail closed on it. errors.Is(err, ErrUnsupported) is true.
type UnsupportedError struct {
	Seq    uint64
	Type   string
	Reason string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("event: unsupported event %q at seq %d: %s", e.Type, e.Seq, e.Reason)
}

// Is reports whether target is ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// v3Types is the reference harness's v3 event catalog (docs/EVENTS.md):
// its documented v3 vocabulary, and the types its release dsh-0.1.1-rc.2
// knows beyond it (assistant/chunk, session/title-llm-request,
// tool/code-dispatch, tool/code-dispatch-start). An entry ending in "/*"
// admits a family of types.
var v3Types = []string{
	"assistant/chunk", "session/title-llm-request", "tool/code-dispatch", "tool/code-dispatch-start",
	"system/message", "user/message", "assistant/message", "tool/result",
	"turn/start", "turn/end", "step/start", "step/end", "assistant/attempt",
	"tool/call", "request/header", "request/context",
	"session/end-seed", "plan/mode", "session/title", "model/selection", "sandbox/mode",
	"approval/*", "permission/preset", "compaction/*", "command/*", "hook/*",
	"todo/write", "goal/change", "schedule/change", "subagent/*", "team/*",
	"tool/ptc-dispatch", "tool/ptc-dispatch-start", "tool-workflow/*",
	"agent/inbox/spliced", "agent-preset/selected", "llm/retry", "llm/retry-started",
	"image/offload", "feedback/*", "deliverables/presented", "fork/session-source",
	"session-log-deepseek/delivery-accepted", "web/deepseek-search-llm-request",
}

// Catalog is the set of event types a host knows. Reads of a stored event
// whose type is not in it fail closed, unless the event is ignorable, and
// so do writes of one. It is safe for concurrent use; Register may be
// called at any time. Make one with NewCatalog (or AnyCatalog): the zero
// Catalog knows no type, and a nil *Catalog is not a catalog.
type Catalog struct {
	all      bool // AnyCatalog's: every type and shape
	mu       sync.RWMutex
	exact    map[string]bool
	families []string // prefixes, with the trailing slash
	// fp caches Fingerprint (0: not computed since the last Register
	// that changed the catalog).
	fp atomic.Uint64
}

// NewCatalog returns a catalog of the v3 types plus extra ones (a type
// ending in "/*" admits the family).
func NewCatalog(extra ...string) *Catalog {
	c := &Catalog{exact: map[string]bool{}}
	c.Register(v3Types...)
	c.Register(extra...)
	return c
}

// AnyCatalog returns a catalog that accepts every event: every type and
// every shape, retired ones too. It is for inspectors (the CLI's cat and
// export), which show and copy what a store holds and interpret none of
// it; a host that writes or resumes sessions uses NewCatalog. Register on
// it changes nothing (it knows every type already).
func AnyCatalog() *Catalog {
	return &Catalog{all: true, exact: map[string]bool{}}
}

// Register declares types the host knows (an extension's events). A type
// ending in "/*" admits the family (every type with that prefix and
// something after it); any other is one exact type ("*" too).
func (c *Catalog) Register(types ...string) {
	if c.all {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range types {
		if strings.HasSuffix(t, "/*") { // a family: the prefix keeps its slash
			p := strings.TrimSuffix(t, "*")
			if !slices.Contains(c.families, p) {
				c.families = append(c.families, p)
				c.fp.Store(0)
			}
		} else if !c.exact[t] {
			c.exact[t] = true
			c.fp.Store(0)
		}
	}
}

// Fingerprint identifies what the catalog accepts: a 64-bit hash (never
// 0) of its kind and its Types. Two catalogs with one fingerprint accept
// the same events (up to a hash collision); a catalog only grows, so an
// event it accepted under an earlier fingerprint it still accepts. A
// store may keep it beside a count of events checked against the catalog
// (the engine's write open skips them only under a catalog with that
// fingerprint), so it is part of the on-disk format: xxhash64 of "any"
// for AnyCatalog, else of "types" and each of Types followed by a zero
// byte, with the low bit set.
func (c *Catalog) Fingerprint() uint64 {
	if v := c.fp.Load(); v != 0 {
		return v
	}
	if c.all {
		return xxhash.Sum64String("any") | 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.fp.Load(); v != 0 {
		return v
	}
	d := xxhash.New()
	d.WriteString("types")
	ts := make([]string, 0, len(c.exact)+len(c.families))
	for t := range c.exact {
		ts = append(ts, t)
	}
	for _, p := range c.families {
		ts = append(ts, p+"*")
	}
	slices.Sort(ts)
	for _, t := range ts {
		d.WriteString(t)
		d.Write([]byte{0})
	}
	v := d.Sum64() | 1
	c.fp.Store(v)
	return v
}

// Types returns the catalog's types, sorted: exact types, and families as
// their prefix followed by "*" ("approval/*"). AnyCatalog's is ["*"].
func (c *Catalog) Types() []string {
	if c.all {
		return []string{"*"}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.exact)+len(c.families))
	for t := range c.exact {
		out = append(out, t)
	}
	for _, p := range c.families {
		out = append(out, p+"*")
	}
	slices.Sort(out)
	return out
}

// Known reports whether typ is in the catalog.
func (c *Catalog) Known(typ string) bool {
	if c.all {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.exact[typ] {
		return true
	}
	for _, p := range c.families {
		if strings.HasPrefix(typ, p) && len(typ) > len(p) {
			return true
		}
	}
	return false
}

// Check returns an *UnsupportedError if e may not be read by a build with
// this catalog: an unknown type that is not ignorable, or a retired shape
// (a request/header with reason "fallback", or one carrying
// header.system).
func (c *Catalog) Check(e *Event) error {
	if c.all {
		return nil
	}
	if !c.Known(e.Type) {
		if e.Ignorable {
			return nil
		}
		return &UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: "unknown event type (not in the catalog and not ignorable)"}
	}
	if e.Type == "request/header" {
		var d struct {
			Reason string `json:"reason"`
			Header struct {
				System json.RawMessage `json:"system"`
			} `json:"header"`
		}
		if json.Unmarshal(e.Data, &d) == nil {
			if d.Reason == "fallback" {
				return &UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: `unsupported legacy reason "fallback"`}
			}
			if d.Header.System != nil {
				return &UnsupportedError{Seq: e.Seq, Type: e.Type, Reason: "retired header.system"}
			}
		}
	}
	return nil
}

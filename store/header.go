package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/seglog/seglog/event"
)

// FormatVersion is the session format version this build writes (the
// reference harness's v3 event catalog).
const FormatVersion = 3

// OldestFormatVersion is the oldest session format version this build
// reads. A session in a version from OldestFormatVersion up to (not
// including) FormatVersion is readable, reported as
// FormatMigrationRequired, seen migrated by read handles, and upgraded in
// place by DB.Migrate. Older ones are refused with a *FormatError.
const OldestFormatVersion = 1

// maxSafeInt is JavaScript's Number.MAX_SAFE_INTEGER: reference logs keep
// times and counts within it.
const maxSafeInt = 1<<53 - 1

// Header is the metadata stored with a session (the reference harness's session header; see the field docs below).
//
// ID names the session: 1..MaxIDLen bytes of valid UTF-8 without control
// characters (U+0000..U+001F, U+007F..U+009F); Create refuses any other
// with ErrInvalidHeader. The header is stored as JSON and exported as
// JSONL, whose strings hold only Unicode text (encoding/json would store
// U+FFFD for a byte that is not UTF-8, and the stored header would no
// longer name its session), and `seglog ls` prints one ID per line. The
// other string fields must be valid UTF-8 too.
type Header struct {
	Version         int    `json:"version"`       // 0 in Create means FormatVersion
	ID              string `json:"id"`            // UTF-8 without control characters: see above
	CreatedAt       int64  `json:"createdAt"`     // milliseconds since the Unix epoch; 0 in Create means now
	Cwd             string `json:"cwd,omitempty"` // absolute
	ParentSession   string `json:"parentSession,omitempty"`
	IsSeeded        bool   `json:"isSeeded"`
	Origin          string `json:"origin,omitempty"` // "" or "subagent"
	DelegationDepth int    `json:"delegationDepth"`
	AgentPreset     string `json:"agentPreset,omitempty"`
}

// MaxIDLen is the longest session ID, in bytes.
const MaxIDLen = 1024

// idProblem says what makes id unfit for a session ID other than its
// length, or "" if nothing does: bytes that are not UTF-8 (encoding/json
// would store U+FFFD instead, so the stored header would not name its
// session) or a control character.
func idProblem(id string) string {
	if p := utf8Problem("id", id); p != "" {
		return p
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Sprintf("id holds control character %U at offset %d", r, i)
		}
	}
	return ""
}

// utf8Problem names the first byte of s that is not UTF-8, or returns "".
func utf8Problem(field, s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("%s is not valid UTF-8 (byte %#x at offset %d)", field, s[i], i)
		}
		i += n
	}
	return ""
}

func (h *Header) validate(inherited uint64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: session %q: %s", ErrInvalidHeader, h.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case h.ID == "":
		return bad("empty id")
	case len(h.ID) > MaxIDLen:
		return bad("id of %d bytes, more than %d", len(h.ID), MaxIDLen)
	case idProblem(h.ID) != "":
		return bad("%s", idProblem(h.ID))
	case utf8Problem("cwd", h.Cwd) != "":
		return bad("%s", utf8Problem("cwd", h.Cwd))
	case utf8Problem("parentSession", h.ParentSession) != "":
		return bad("%s", utf8Problem("parentSession", h.ParentSession))
	case utf8Problem("agentPreset", h.AgentPreset) != "":
		return bad("%s", utf8Problem("agentPreset", h.AgentPreset))
	case h.Version < OldestFormatVersion || h.Version > FormatVersion:
		return bad("version %d, this build writes %d and imports from %d", h.Version, FormatVersion, OldestFormatVersion)
	case h.CreatedAt < 0 || h.CreatedAt > maxSafeInt:
		return bad("createdAt %d is not a non-negative safe integer", h.CreatedAt)
	case h.Cwd != "" && !path.IsAbs(h.Cwd):
		return bad("cwd %q is not absolute", h.Cwd)
	case h.Origin != "" && h.Origin != "subagent":
		return bad("origin %q (only \"subagent\")", h.Origin)
	case h.DelegationDepth < 0 || h.DelegationDepth > maxSafeInt:
		return bad("delegationDepth %d is not a non-negative safe integer", h.DelegationDepth)
	case !h.IsSeeded && inherited != 0:
		return bad("unseeded session header requires an inherited event count of 0, got %d", inherited)
	}
	return nil
}

// FormatStatus says whether a stored session is in the current format.
type FormatStatus int

const (
	// FormatCurrent: written in FormatVersion.
	FormatCurrent FormatStatus = iota
	// FormatMigrationRequired: an older supported version, readable;
	// an explicit migration upgrades it.
	FormatMigrationRequired
)

func (s FormatStatus) String() string {
	if s == FormatMigrationRequired {
		return "migration-required"
	}
	return "current"
}

// Snapshot describes a session as Stat and List see it.
type Snapshot struct {
	Header              Header
	FormatStatus        FormatStatus
	Revision            string // opaque; equal means the stored log is unchanged
	EventCount          uint64
	SizeBytes           int64 // bytes of the session's frames on disk
	InheritedEventCount uint64
	// Title is data.title of the session's latest session/title event
	// (TitleOf), "" if it has none.
	Title string
	// UpdatedAt is the Time of the session's last flushed event
	// (milliseconds since the Unix epoch), or Header.CreatedAt while it
	// has none. For both, events a write handle appends or enqueues count
	// once written out to the log: at the latest when it flushes them
	// (EventCount counts them at once). Of a session whose frames are
	// damaged, both are what is known (a read reports the damage).
	UpdatedAt int64
}

// HeaderRecord is a session's stored header: the payload of a header
// frame (and the header part of an index record), JSON.
type HeaderRecord struct {
	Header    Header `json:"header"`
	UID       uint64 `json:"uid"` // the incarnation
	Inherited uint64 `json:"inherited,omitempty"`
	// Replaces and Events are set by a migration: this incarnation
	// replaces incarnation Replaces of the same id, and takes effect once
	// all its Events events are stored (see engine.DB.Migrate).
	Replaces uint64 `json:"replaces,omitempty"`
	Events   uint64 `json:"events,omitempty"`
	// Fork is set on the header of a fork that shares its parent's
	// frames (engine.DB.Fork): its events before Inherited are those of
	// Fork[0], its parent, whose own may be those of Fork[1], and so on,
	// nearest first. Events is then Inherited+1: the fork takes effect
	// once its marker, the one events frame that follows, is stored.
	Fork []ForkLink `json:"fork,omitempty"`
}

// ForkLink names a session a fork shares frames with: incarnation UID of
// session ID, whose events before Cut are the fork's.
type ForkLink struct {
	ID  string `json:"id"`
	UID uint64 `json:"uid"`
	Cut uint64 `json:"cut"`
}

// DecodeHeaderRecord decodes the header record b stored under key (the
// session ID of its header frame, or of its index record) and checks that
// it names that session. A build before the session ID rule (see Header)
// could store an ID that is not UTF-8: encoding/json wrote U+FFFD in the
// record for each bad byte. Such a record names key too: the session keeps
// the ID it is stored under, so that it and every other session of the
// store still open, list and read.
func DecodeHeaderRecord(b []byte, key string) (HeaderRecord, error) {
	var rec HeaderRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("session header record: %w", err)
	}
	if rec.Header.ID != key {
		if utf8.ValidString(key) || rec.Header.ID != jsonSpelling(key) {
			return rec, fmt.Errorf("header of session %q stored under key %q", rec.Header.ID, key)
		}
		rec.Header.ID = key
	}
	if len(rec.Fork) > 0 {
		if err := rec.checkFork(); err != nil {
			return rec, fmt.Errorf("header of session %q: %w", key, err)
		}
	}
	return rec, nil
}

// checkFork checks the fork part of a record: a seeded header inheriting
// its parent's cut, taking effect with its marker, the chain's cuts never
// growing.
func (rec *HeaderRecord) checkFork() error {
	f := rec.Fork
	switch {
	case !rec.Header.IsSeeded || rec.Replaces != 0:
		return errors.New("a fork record on a header that is not seeded, or of a migration")
	case rec.Inherited != f[0].Cut || rec.Events != rec.Inherited+1:
		return fmt.Errorf("fork record: inherited %d, events %d, cut %d", rec.Inherited, rec.Events, f[0].Cut)
	}
	for i, l := range f {
		if l.ID == "" || l.UID == 0 || (i > 0 && l.Cut > f[i-1].Cut) {
			return fmt.Errorf("fork record: link %d (%q, incarnation %d, cut %d) is not a valid link of the chain", i, l.ID, l.UID, l.Cut)
		}
	}
	return nil
}

// jsonSpelling is s as encoding/json stores it: each byte that is not
// UTF-8 becomes U+FFFD.
func jsonSpelling(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// CreateOption configures Create.
type CreateOption func(*createOptions)

type createOptions struct {
	inherited    uint64
	hasInherited bool
}

// Inherited declares a seeded session's inherited prefix: the parent's
// first n events, which the creator appends verbatim as seqs 0..n-1,
// followed by a session/end-seed event with data {"inherited": true} at seq
// n. A seeded header (IsSeeded) requires it; an unseeded one allows only 0.
func Inherited(n uint64) CreateOption {
	return func(o *createOptions) { o.inherited, o.hasInherited = n, true }
}

func revision(uid, events uint64) string {
	return "r" + strconv.FormatUint(uid, 36) + "." + strconv.FormatUint(events, 10)
}

// Access is what a handle may do.
type Access int

const (
	// Read handles read; they take no ownership and coexist with a writer.
	Read Access = iota
	// Write handles also append and flush; one per session at a time.
	Write
)

func (a Access) String() string {
	if a == Write {
		return "write"
	}
	return "read"
}

// IsInheritedMarker reports whether e is a seeded session's tagged
// end-seed marker: session/end-seed with data {"inherited": true}.
func IsInheritedMarker(e *event.Event) bool { return isInheritedMarker(e) }

func isInheritedMarker(e *event.Event) bool {
	if e.Type != "session/end-seed" {
		return false
	}
	var d struct {
		Inherited bool `json:"inherited"`
	}
	return json.Unmarshal(e.Data, &d) == nil && d.Inherited
}

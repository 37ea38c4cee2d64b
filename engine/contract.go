package engine

import (
	"github.com/seglog/seglog/store"
)

func sessionErr(id, op string, err error) error { return &store.SessionError{ID: id, Op: op, Err: err} }

// marshalHeader encodes s's header record; called with db.mu held (or by
// the session's owner, whose header is decoded).
func marshalHeader(s *session) []byte {
	if s.hdrRaw != nil {
		return s.hdrRaw // still the index's copy, unchanged
	}
	rec := store.HeaderRecord{Header: *s.hdr, UID: s.uid, Inherited: s.inherited, Fork: s.fork}
	if s.fork != nil {
		rec.Events = s.inherited + 1
	}
	return store.MarshalHeaderRecord(rec)
}

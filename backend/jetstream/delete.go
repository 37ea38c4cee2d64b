package jetstream

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Delete removes session id for every host; see store.Store.Delete. It
// takes the session's leases (store.ErrAlreadyOwned while a write handle
// here or on another host holds them), reads the subject and publishes a
// tombstone on it: the frame segment.Encoder.Delete makes (the id and the
// incarnation it ends) with the header Nats-Rollup: sub, expecting the
// last message it read, so that the stream purges every earlier message
// of the subject as it stores it, and a publish of an earlier writer that
// has not landed by then never can. The tombstone stays, the subject's
// only message, until the id is created again. Once the tombstone is
// stored, the session is deleted for every host; a host that dies right
// after holds the id's lease until it expires (a Create of the id
// elsewhere fails with store.ErrSessionExists until then). With
// IfRevision, the session as read under the leases must still have that
// revision (else store.ErrRevisionMismatch, and nothing is published).
func (st *Store) Delete(ctx context.Context, id string, opts ...store.DeleteOption) error {
	do := store.DeleteOptionsOf(opts)
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := st.load(ctx, id, "delete"); err != nil {
		return err
	}
	local, err := st.owners.Acquire(id)
	if err != nil {
		return sessionErr(id, "delete", store.ErrAlreadyOwned)
	}
	remote, err := st.acquireLease(ctx, id)
	if err != nil {
		local.Release()
		return sessionErr(id, "delete", err)
	}
	writer, err := newWriter()
	var s *session
	if err == nil {
		s, _, _, err = st.publishAfterRead(ctx, id, "delete", func(s *session) (*nats.Msg, string, error) {
			if err := st.check(remote); err != nil {
				return nil, "", err
			}
			st.mu.Lock()
			uid, events := s.uid, s.next()
			st.mu.Unlock()
			if err := do.Check(uid, events); err != nil {
				return nil, "", err
			}
			e, err := st.enc.Delete(id, s.uid)
			if err != nil {
				return nil, "", err
			}
			msg := nats.NewMsg(s.subj)
			msg.Data = segment.MarshalFrame(e)
			msg.Header.Set(natsjs.MsgRollup, natsjs.MsgRollupSubject)
			return msg, writer + ":d", nil
		})
	}
	if err != nil {
		local.Release()
		st.releaseLease(remote)
		return err
	}
	if f := st.afterTombstone.Load(); f != nil {
		if err := (*f)(); err != nil {
			return err // (tests: the host dies here, holding the leases)
		}
	}
	st.mu.Lock()
	s.erased = true // its handles here: ErrSessionNotFound
	if st.sessions[id] == s {
		delete(st.sessions, id)
	}
	st.mu.Unlock()
	local.Release()
	st.releaseLease(remote)
	return nil
}

// freeSubject returns the stream sequence of the tombstone that is the
// last message on subject subj (0 if it holds none), or
// store.ErrSessionExists if a session lives there.
func (st *Store) freeSubject(ctx context.Context, subj string) (uint64, error) {
	last, err := st.lastMsg(ctx, subj)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ref, _, err := st.index(subj, last)
	if err != nil {
		return 0, err
	}
	if !ref.tombstone {
		return 0, store.ErrSessionExists
	}
	return last.Sequence, nil
}

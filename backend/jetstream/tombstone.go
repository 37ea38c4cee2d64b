package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/store"
)

// PurgeTombstones purges the tombstones of sessions deleted more than
// olderThan ago (by the stream's timestamp of the tombstone) whose ID was
// not created again: a Delete's tombstone is the subject's only message
// (its rollup purged the rest), and stays there until the ID is created
// again, one small message per deleted ID, which List spends a request on
// to skip. See store.TombstonePurger.
//
// For each, it takes the ID's leases as Create and Delete do (an ID whose
// lease another host or handle holds is skipped: Held), reads the
// subject's last message again under them, and, if it is still that
// tombstone, purges the subject up to and with it (a purge by subject
// and sequence: a message after it would stay). Then it releases the
// leases. Nothing is lost by the purge:
//
//   - Revisions: each incarnation's id is random (store.NewIncarnation),
//     not counted from the tombstone, so an ID created again after the
//     purge never repeats an old revision.
//   - Old events: the tombstone's rollup purged them. A publish that an
//     earlier writer of the ID made and that lands late (a Raft proposal
//     in flight across a leader change, the client's reconnect buffer)
//     expects a stream sequence its subject held when it was made: an
//     old header, batch or fence (every one at or after the session's
//     header, so never 0), or the tombstone itself (a Create after the
//     Delete). An empty subject, or one whose new header comes after the
//     tombstone, ends in none of them, so the stream refuses it, as it
//     did while the tombstone was there. The one publish that expects an
//     empty subject is the header of a Create made while the subject was
//     empty (before the first incarnation, or after an earlier purge);
//     while the tombstone is there it is refused, after the purge it
//     would land. olderThan must therefore be longer than any publish can
//     stay in flight: the CLI's default is 24 hours.
//   - Hosts: a host's view of the deleted incarnation ends at its next
//     look at the subject whether it finds the tombstone, nothing, or the
//     header of a new incarnation (another uid).
//
// The host needs the permission to purge the stream
// ($JS.API.STREAM.PURGE.<stream>) besides the usual ones.
func (st *Store) PurgeTombstones(ctx context.Context, olderThan time.Duration, dryRun bool) (store.TombstoneReport, error) {
	var rep store.TombstoneReport
	if olderThan < 0 {
		return rep, fmt.Errorf("%w: jetstream: tombstones older than %v", store.ErrInvalidArgument, olderThan)
	}
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return rep, store.ErrClosed
	}
	rctx, cancel := st.rctx(ctx)
	info, err := st.stream.Info(rctx, natsjs.WithSubjectFilter(st.opts.Prefix+".s.*"))
	cancel()
	if err != nil {
		return rep, fmt.Errorf("jetstream: purge tombstones: %w", err)
	}
	var subjects []string
	for subj, n := range info.State.Subjects {
		if n == 1 { // (a tombstone is its subject's only message)
			subjects = append(subjects, subj)
		}
	}
	slices.Sort(subjects)
	for _, subj := range subjects {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		id, ok := st.idOf(subj)
		if !ok {
			continue
		}
		seq, at, err := st.lastTombstone(ctx, subj)
		if err != nil {
			return rep, err
		}
		switch {
		case seq == 0:
			continue // a session (or nothing, purged meanwhile)
		case time.Since(at) < olderThan:
			rep.Young++
			continue
		case dryRun:
			rep.Purged = append(rep.Purged, id)
			continue
		}
		purged, err := st.purgeTombstone(ctx, id, subj, seq)
		switch {
		case errors.Is(err, store.ErrAlreadyOwned):
			rep.Held = append(rep.Held, id)
		case err != nil:
			return rep, err
		case purged:
			rep.Purged = append(rep.Purged, id)
		}
	}
	return rep, nil
}

// lastTombstone returns the stream sequence and time of the tombstone that
// is subject subj's last message, or 0 if its last message is none (or
// it holds none).
func (st *Store) lastTombstone(ctx context.Context, subj string) (uint64, time.Time, error) {
	m, err := st.lastMsg(ctx, subj) // (the leader's: a replica may be behind)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("jetstream: purge tombstones: %w", err)
	}
	ref, _, err := st.index(subj, m)
	if err != nil || !ref.tombstone {
		return 0, time.Time{}, err
	}
	return m.Sequence, m.Time, nil
}

// purgeTombstone purges tombstone seq of session id under the ID's
// leases, if it is still the subject's last message then; it reports
// whether it did. store.ErrAlreadyOwned: another handle or host holds a
// lease of the ID.
func (st *Store) purgeTombstone(ctx context.Context, id, subj string, seq uint64) (bool, error) {
	local, err := st.owners.Acquire(id)
	if err != nil {
		return false, store.ErrAlreadyOwned
	}
	defer local.Release()
	remote, err := st.acquireLease(ctx, id)
	if err != nil {
		return false, err
	}
	defer st.releaseLease(remote)
	again, _, err := st.lastTombstone(ctx, subj)
	if err != nil || again != seq {
		return false, err // (created again, and maybe deleted again, meanwhile)
	}
	if err := st.check(remote); err != nil {
		return false, err
	}
	rctx, cancel := st.rctx(ctx)
	defer cancel()
	if err := st.stream.Purge(rctx, natsjs.WithPurgeSubject(subj), natsjs.WithPurgeSequence(seq+1)); err != nil {
		return false, fmt.Errorf("jetstream: purge the tombstone of session %q: %w", id, err)
	}
	return true, nil
}

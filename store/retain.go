package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RetainPolicy says which sessions Retain deletes. A session is deleted
// if it passes the filters (Prefix, Cwd, Filter) and either is older than
// OlderThan or has Keep sessions that pass the filters and were updated
// more recently: Keep bounds the number of sessions, OlderThan their age.
type RetainPolicy struct {
	// OlderThan deletes the sessions last updated (Snapshot.UpdatedAt:
	// the time of the last flushed event, else the creation time) more
	// than this long before Now. 0: no age limit.
	OlderThan time.Duration
	// Keep keeps at most this many sessions (of those the filters pass),
	// the most recently updated: the others are deleted. 0: no limit.
	Keep int
	// Prefix and Cwd select the sessions considered, as ListOptions do;
	// the others are neither deleted nor counted by Keep.
	Prefix, Cwd string
	// Filter, if set, selects further: only sessions for which it
	// returns true are considered.
	Filter func(*Snapshot) bool
	// DryRun deletes nothing: the report lists what would be deleted
	// (and, with TombstonesOlderThan, purged).
	DryRun bool
	// TombstonesOlderThan, if positive, also purges the markers deleted
	// sessions leave in a backend that keeps them (a TombstonePurger:
	// backend/jetstream) once they are this old. It must be longer than
	// any write can stay in flight (see the backend); the CLI uses 24
	// hours. The local engine keeps none: compaction reclaims its
	// tombstones with the deleted bytes.
	TombstonesOlderThan time.Duration
	// Now is the time OlderThan counts back from; zero means time.Now().
	Now time.Time
}

// RetainReport is what Retain did (with DryRun, would do).
type RetainReport struct {
	// Considered counts the sessions the filters passed.
	Considered int
	// Deleted are the sessions deleted (with DryRun: that would be), most
	// recently updated first.
	Deleted []string
	// Held are the sessions the policy chose that a writer (a write
	// handle, a creator, a host) held: skipped, never forced. They stay,
	// so more than Keep sessions may remain.
	Held []string
	// Changed are the sessions the policy chose that were written (or
	// deleted and created again) after the listing: skipped, since the
	// policy chose them by what they were (the next run judges them
	// again).
	Changed []string
	// Failed are the sessions whose delete failed otherwise.
	Failed []RetainFailure
	// Tombstones is what the backend's PurgeTombstones did, nil if it was
	// not asked (TombstonesOlderThan 0) or the backend keeps none.
	Tombstones *TombstoneReport
}

// RetainFailure is a session Retain could not delete, and why.
type RetainFailure struct {
	ID  string
	Err error
}

// retainPage is how many sessions Retain lists at a time.
const retainPage = 512

// Retain deletes the sessions of s that policy p selects, most recently
// updated first, each only while its revision is the one listed: a
// session written since is skipped (Changed), and so is one a writer
// holds (Held), never forced. Then, if p asks and the backend keeps
// tombstones (TombstonePurger), it purges those older than
// p.TombstonesOlderThan (docs/DESIGN.md, Retention). A policy with a
// negative field, or that sets none of OlderThan, Keep and
// TombstonesOlderThan, is ErrInvalidArgument. It returns the report and an
// error joining the failed deletes, or the one that stopped it (the
// listing, the context); a Retain cut short is finished by running it again.
func Retain(ctx context.Context, s Store, p RetainPolicy) (RetainReport, error) {
	var rep RetainReport
	switch {
	case p.OlderThan < 0 || p.Keep < 0 || p.TombstonesOlderThan < 0:
		return rep, fmt.Errorf("%w: retention policy: negative OlderThan (%v), Keep (%d) or TombstonesOlderThan (%v)", ErrInvalidArgument, p.OlderThan, p.Keep, p.TombstonesOlderThan)
	case p.OlderThan == 0 && p.Keep == 0 && p.TombstonesOlderThan == 0:
		return rep, fmt.Errorf("%w: retention policy deletes nothing: set OlderThan or Keep (or TombstonesOlderThan)", ErrInvalidArgument)
	}
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	cutoff := now.Add(-p.OlderThan).UnixMilli()
	var errs []error
	if p.OlderThan > 0 || p.Keep > 0 {
		opts := ListOptions{Prefix: p.Prefix, Cwd: p.Cwd, OrderBy: OrderUpdated, Limit: retainPage}
		for {
			page, next, err := s.ListPage(ctx, opts)
			if err != nil {
				return rep, fmt.Errorf("retain: list: %w", err)
			}
			for i := range page {
				snap := &page[i]
				if p.Filter != nil && !p.Filter(snap) {
					continue
				}
				rep.Considered++
				old := p.OlderThan > 0 && snap.UpdatedAt < cutoff
				over := p.Keep > 0 && rep.Considered > p.Keep
				if !old && !over {
					continue
				}
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				id := snap.Header.ID
				if p.DryRun {
					rep.Deleted = append(rep.Deleted, id)
					continue
				}
				err := s.Delete(ctx, id, IfRevision(snap.Revision))
				switch {
				case err == nil:
					rep.Deleted = append(rep.Deleted, id)
				case errors.Is(err, ErrAlreadyOwned):
					rep.Held = append(rep.Held, id)
				case errors.Is(err, ErrRevisionMismatch):
					rep.Changed = append(rep.Changed, id)
				case errors.Is(err, ErrSessionNotFound):
					// deleted meanwhile by someone else
				case ctx.Err() != nil:
					return rep, ctx.Err()
				default:
					rep.Failed = append(rep.Failed, RetainFailure{ID: id, Err: err})
					errs = append(errs, err)
				}
			}
			if next == "" {
				break
			}
			opts.After = next
		}
	}
	if p.TombstonesOlderThan > 0 {
		tp, ok := s.(TombstonePurger)
		if !ok {
			tp, ok = Unwrap[TombstonePurger](s)
		}
		if ok {
			t, err := tp.PurgeTombstones(ctx, p.TombstonesOlderThan, p.DryRun)
			rep.Tombstones = &t
			if err != nil {
				return rep, fmt.Errorf("retain: purge tombstones: %w", err)
			}
		}
	}
	if len(errs) > 0 {
		return rep, fmt.Errorf("retain: %d deletes failed: %w", len(errs), errors.Join(errs...))
	}
	return rep, nil
}

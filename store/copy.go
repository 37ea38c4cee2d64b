package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seglog/seglog/event"
)

// CopyOptions configures Copy.
type CopyOptions struct {
	// IDs are the sessions to copy; nil copies every session the source
	// lists.
	IDs []string
	// Chunk is the most events read, appended and flushed at a time;
	// default 4096.
	Chunk int
	// Progress, if set, is called after each chunk a session's copy
	// flushed at the destination, with the events the destination holds
	// of it so far.
	Progress func(id string, events uint64)
	// Done, if set, is called as each session's copy ends, with its
	// result.
	Done func(CopyResult)
}

// CopyStatus is what Copy did with one session.
type CopyStatus int

const (
	// CopyCreated: the session was new at the destination and is copied.
	CopyCreated CopyStatus = iota + 1
	// CopyForked: the session is a fork whose parent the destination holds
	// with the same first events: the destination made it with Fork (the
	// local engine then shares the parent's stored events; JetStream
	// copies them) and appended the rest.
	CopyForked
	// CopyResumed: the destination held the session's first events (a
	// copy cut short, or one made before the source grew): the rest are
	// appended.
	CopyResumed
	// CopyUpToDate: the destination holds the same log; nothing written.
	CopyUpToDate
	// CopyAhead: the destination holds the source's log and more events
	// after it (written there since an earlier copy); nothing written.
	CopyAhead
	// CopyGone: the source no longer holds the session (deleted since it
	// was listed, or never there); nothing written.
	CopyGone
	// CopyFailed: see CopyResult.Err.
	CopyFailed
)

func (s CopyStatus) String() string {
	switch s {
	case CopyCreated:
		return "created"
	case CopyForked:
		return "forked"
	case CopyResumed:
		return "resumed"
	case CopyUpToDate:
		return "up-to-date"
	case CopyAhead:
		return "ahead"
	case CopyGone:
		return "gone"
	case CopyFailed:
		return "failed"
	}
	return fmt.Sprintf("CopyStatus(%d)", int(s))
}

// CopyResult is the copy of one session.
type CopyResult struct {
	ID     string
	Status CopyStatus
	// Events is how many of the source's events the copy covers: the
	// session's length at the source when its copy began (the
	// destination holds them all unless Status is CopyFailed or
	// CopyGone).
	Events uint64
	// Copied is how many events this copy wrote at the destination (a
	// fork's inherited ones and its marker included).
	Copied uint64
	Err    error
}

// CopyConflictError: the destination holds a session of the ID that is
// not a copy of the source's (another header, or other events), so Copy
// leaves it as it is. errors.Is(err, ErrSessionExists) is true.
type CopyConflictError struct {
	ID     string
	Reason string // "its header differs: ...", "event 17 differs", ...
}

func (e *CopyConflictError) Error() string {
	return fmt.Sprintf("copy of session %q: the destination holds another session of this id: %s", e.ID, e.Reason)
}

// Is makes a *CopyConflictError match ErrSessionExists.
func (e *CopyConflictError) Is(target error) bool { return target == ErrSessionExists }

// Copy copies sessions from src to dst (all that src lists, or
// opts.IDs): each session's header and its events up to its length when
// its copy began, and a fork as a fork where dst holds its parent. It
// takes no write lease at src, so hosts keep writing there. It may be run
// again any number of times: it finishes a copy cut short and writes
// nothing twice; a session dst holds differently fails with a
// *CopyConflictError and stays as it is, one in an older format with
// ErrMigrationRequired (docs/DESIGN.md, Copy). It returns a result per
// session, parents before their forks, and an error joining the failed
// sessions' errors, or the one that stopped it (listing src, the context).
func Copy(ctx context.Context, dst, src Store, opts CopyOptions) ([]CopyResult, error) {
	if opts.Chunk <= 0 {
		opts.Chunk = 4096
	}
	ids := opts.IDs
	var listed []Snapshot
	if ids == nil {
		var err error
		if listed, err = src.List(ctx); err != nil {
			return nil, fmt.Errorf("copy: list the source: %w", err)
		}
		for _, s := range listed {
			ids = append(ids, s.Header.ID)
		}
	} else {
		for _, id := range ids {
			if s, err := src.Stat(ctx, id); err == nil {
				listed = append(listed, s)
			}
		}
	}
	ids = parentsFirst(ids, listed)
	var out []CopyResult
	var errs []error
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		c := copier{ctx: ctx, dst: dst, src: src, id: id, opts: &opts}
		r := c.run()
		if r.Status == CopyFailed && ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, r)
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
		if opts.Done != nil {
			opts.Done(r)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("copy: %d of %d sessions failed: %w", len(errs), len(ids), errors.Join(errs...))
	}
	return out, nil
}

// parentsFirst orders ids so that a session whose parent (Header.
// ParentSession) is among them comes after it, a chain after its whole
// ancestry; the order is otherwise kept.
func parentsFirst(ids []string, snaps []Snapshot) []string {
	parent := map[string]string{}
	for _, s := range snaps {
		parent[s.Header.ID] = s.Header.ParentSession
	}
	in := map[string]bool{}
	for _, id := range ids {
		in[id] = true
	}
	depth := map[string]int{}
	var depthOf func(id string, seen int) int
	depthOf = func(id string, seen int) int {
		if d, ok := depth[id]; ok {
			return d
		}
		p := parent[id]
		if p == "" || !in[p] || seen > len(ids) { // (a cycle cannot be stored; bounded anyway)
			return 0
		}
		d := depthOf(p, seen+1) + 1
		depth[id] = d
		return d
	}
	out := slices.Clone(ids)
	slices.SortStableFunc(out, func(a, b string) int { return depthOf(a, 0) - depthOf(b, 0) })
	return out
}

// copier copies one session.
type copier struct {
	ctx      context.Context
	dst, src Store
	id       string
	opts     *CopyOptions
}

func (c *copier) run() CopyResult {
	res := CopyResult{ID: c.id}
	fail := func(err error) CopyResult {
		res.Status, res.Err = CopyFailed, err
		return res
	}
	snap, err := c.src.Stat(c.ctx, c.id)
	if errors.Is(err, ErrSessionNotFound) {
		res.Status = CopyGone
		return res
	}
	if err != nil {
		return fail(err)
	}
	if snap.FormatStatus != FormatCurrent {
		return fail(sessionErr(c.id, "copy", ErrMigrationRequired))
	}
	r, err := c.src.Open(c.ctx, c.id, Read)
	if errors.Is(err, ErrSessionNotFound) {
		res.Status = CopyGone
		return res
	}
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	n := snap.EventCount // the consistent point: the length as the copy began
	res.Events = n
	st, copied, err := c.copyTo(r, snap, n)
	res.Status, res.Copied = st, copied
	if err != nil {
		return fail(err)
	}
	// The source must still be the incarnation read: one deleted and
	// created again meanwhile may have been read in part.
	after, err := c.src.Stat(c.ctx, c.id)
	if err == nil && revisionUID(after.Revision) != revisionUID(snap.Revision) {
		err = sessionErr(c.id, "copy", errors.New("the session was deleted and created again at the source during its copy: copy it again"))
	}
	if err != nil && !errors.Is(err, ErrSessionNotFound) {
		return fail(err)
	}
	return res
}

// copyTo brings the destination's copy of the session up to the source's
// first n events, read through r.
func (c *copier) copyTo(r Handle, snap Snapshot, n uint64) (CopyStatus, uint64, error) {
	dsnap, err := c.dst.Stat(c.ctx, c.id)
	if errors.Is(err, ErrSessionNotFound) {
		return c.create(r, snap, n)
	}
	if err != nil {
		return 0, 0, err
	}
	if dsnap.Header != snap.Header || dsnap.InheritedEventCount != snap.InheritedEventCount {
		return 0, 0, &CopyConflictError{ID: c.id, Reason: fmt.Sprintf("its header differs: %s at the destination, %s at the source",
			describeHeader(dsnap), describeHeader(snap))}
	}
	k := dsnap.EventCount
	d, err := c.dst.Open(c.ctx, c.id, Read)
	if err != nil {
		return 0, 0, err
	}
	err = c.same(d, r, 0, min(k, n))
	d.Close()
	if err != nil {
		return 0, 0, err
	}
	switch {
	case k > n:
		return CopyAhead, 0, nil
	case k == n:
		return CopyUpToDate, 0, nil
	}
	w, err := c.dst.Open(c.ctx, c.id, Write)
	if err != nil {
		return 0, 0, err
	}
	if w.Len() != k { // (written between the comparison and the lease)
		w.Close()
		return 0, 0, &CopyConflictError{ID: c.id, Reason: fmt.Sprintf("it grew from %d to %d events during the copy", k, w.Len())}
	}
	return c.fill(w, r, CopyResumed, k, n)
}

// create makes the session at the destination, as a fork of its parent
// there if it can, and copies its events.
func (c *copier) create(r Handle, snap Snapshot, n uint64) (CopyStatus, uint64, error) {
	h, inh := snap.Header, snap.InheritedEventCount
	w, err := c.fork(r, snap, n)
	if err != nil {
		return 0, 0, err
	}
	if w != nil {
		st, copied, err := c.fill(w, r, CopyForked, inh+1, n)
		return st, inh + 1 + copied, err
	}
	var opts []CreateOption
	if h.IsSeeded {
		opts = append(opts, Inherited(inh))
	}
	if w, err = c.dst.Create(c.ctx, h, opts...); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		// Written by a flush even without events: the copy of an empty
		// session exists.
		if err := w.Flush(c.ctx); err != nil {
			w.Close()
			return 0, 0, err
		}
	}
	return c.fill(w, r, CopyCreated, 0, n)
}

// fork makes the session at the destination with Fork if it is a fork
// the destination can make: seeded, its parent held there with at least
// its inherited events, those the same as the session's, and its marker
// the one Fork writes (at the source's time). Else it returns nil and no
// error (the session is copied whole).
func (c *copier) fork(r Handle, snap Snapshot, n uint64) (Handle, error) {
	h, inh := snap.Header, snap.InheritedEventCount
	if !h.IsSeeded || h.ParentSession == "" || inh == 0 || n <= inh {
		return nil, nil
	}
	m, err := r.Read(c.ctx, int(inh), 1)
	if err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, nil
	}
	if want := ForkMarker(inh, m[0].Time); !sameEvent(&m[0], &want) {
		return nil, nil
	}
	psnap, err := c.dst.Stat(c.ctx, h.ParentSession)
	if err != nil || psnap.FormatStatus != FormatCurrent || psnap.EventCount < inh {
		return nil, nil // (no such parent there: a whole copy)
	}
	p, err := c.dst.Open(c.ctx, h.ParentSession, Read)
	if err != nil {
		return nil, nil
	}
	err = c.same(p, r, 0, inh)
	p.Close()
	if errors.Is(err, ErrSessionExists) {
		return nil, nil // (the parent there has other events: a whole copy)
	}
	if err != nil {
		return nil, err
	}
	w, err := c.dst.Fork(c.ctx, h.ParentSession, inh, h, MarkerTime(m[0].Time))
	if errors.Is(err, ErrSessionNotFound) || errors.Is(err, ErrInvalidArgument) {
		return nil, nil // (the parent went meanwhile)
	}
	if err != nil {
		return nil, err
	}
	// The parent must still be the incarnation compared.
	if again, err := c.dst.Stat(c.ctx, h.ParentSession); err != nil || revisionUID(again.Revision) != revisionUID(psnap.Revision) {
		w.Close()
		return nil, sessionErr(c.id, "copy", fmt.Errorf("its parent %q at the destination was deleted or created again during the fork: copy it again (the fork made is compared with the source then)", h.ParentSession))
	}
	return w, nil
}

// fill appends the source's events [from, n) read through r to w, a chunk
// at a time, each flushed, and closes w.
func (c *copier) fill(w, r Handle, st CopyStatus, from, n uint64) (CopyStatus, uint64, error) {
	chunk := uint64(c.opts.Chunk)
	for off := from; off < n; off += chunk {
		want := min(chunk, n-off)
		evs, err := r.Read(c.ctx, int(off), int(want))
		if err == nil && uint64(len(evs)) != want {
			err = sessionErr(c.id, "copy", fmt.Errorf("the source returned %d events at seq %d, %d expected", len(evs), off, want))
		}
		if err == nil {
			err = w.Append(c.ctx, evs...)
		}
		if err == nil {
			err = w.Flush(c.ctx)
		}
		if err != nil {
			w.Close()
			return st, off - from, err
		}
		if c.opts.Progress != nil {
			c.opts.Progress(c.id, off+want)
		}
	}
	if err := w.Close(); err != nil {
		return st, n - from, err
	}
	return st, n - from, nil
}

// same compares the events [from, to) read through a with those read
// through b: a *CopyConflictError names the first that differs.
func (c *copier) same(a, b Handle, from, to uint64) error {
	chunk := uint64(c.opts.Chunk)
	for off := from; off < to; off += chunk {
		want := min(chunk, to-off)
		x, err := a.Read(c.ctx, int(off), int(want))
		if err != nil {
			return err
		}
		y, err := b.Read(c.ctx, int(off), int(want))
		if err != nil {
			return err
		}
		for i := range want {
			if i >= uint64(len(x)) || i >= uint64(len(y)) {
				return &CopyConflictError{ID: c.id, Reason: fmt.Sprintf("the log ends before event %d", off+i)}
			}
			if !sameEvent(&x[i], &y[i]) {
				return &CopyConflictError{ID: c.id, Reason: fmt.Sprintf("event %d differs", off+i)}
			}
		}
	}
	return nil
}

// sameEvent reports whether a and b are the same event, field by field,
// their JSON byte for byte.
func sameEvent(a, b *event.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.Time == b.Time && a.Ignorable == b.Ignorable &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.SurfaceOp, b.SurfaceOp) &&
		slices.Equal(a.SourceEventSeqs, b.SourceEventSeqs)
}

// describeHeader is a header as a conflict names it.
func describeHeader(s Snapshot) string {
	h := s.Header
	return fmt.Sprintf("{version %d, createdAt %d, cwd %q, parent %q, seeded %v (%d), origin %q, depth %d, preset %q}",
		h.Version, h.CreatedAt, h.Cwd, h.ParentSession, h.IsSeeded, s.InheritedEventCount, h.Origin, h.DelegationDepth, h.AgentPreset)
}

// revisionUID is the incarnation part of a revision (Revision): equal for
// every revision of one incarnation.
func revisionUID(rev string) string {
	if i := strings.LastIndexByte(rev, '.'); i >= 0 {
		return rev[:i]
	}
	return rev
}

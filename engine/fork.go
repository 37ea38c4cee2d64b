package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/wal"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Fork creates session h.ID as a fork of session parent at n events: its
// events 0..n-1 are the parent's, seq n is the inherited end-seed marker
// (session/end-seed {"inherited": true}, stamped now or at MarkerTime),
// and its header is seeded (IsSeeded, InheritedEventCount n, ParentSession
// the parent) in the current format. It returns the fork's write handle
// once the fork is durable; the host appends from seq n+1. A fork past
// the parent's end is a *store.ForkRangeError (ErrInvalidArgument), an ID
// that exists ErrSessionExists; either creates nothing. The fork shares
// the parent's frames when it can, else copies them as one group; either
// reads the same and survives the parent's deletion (docs/DESIGN.md,
// Forks).
func (db *DB) Fork(ctx context.Context, parent string, n uint64, h store.Header, opts ...store.ForkOption) (*Handle, error) {
	if db.opts.ReadOnly {
		return nil, store.ErrReadOnlyStore
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hdr, err := store.PrepareForkHeader(h, parent, n)
	if err != nil {
		return nil, err
	}
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	marker := store.ForkOptionsOf(opts).Marker(n)
	hd, err := db.forkShared(ctx, parent, n, hdr, marker)
	if errors.Is(err, errCopyFork) {
		hd, err = db.forkCopy(ctx, parent, n, hdr, marker)
	}
	if err != nil {
		return nil, err
	}
	// The handle's surface checker (Options.SurfaceRules) learns the
	// fork's log, as a write open's checkLog would teach it.
	if err := hd.front.CheckSurfaceLog(ctx, hd.Len(), hd.Read); err != nil {
		hd.Close()
		return nil, err
	}
	return hd, nil
}

// forkCopy is Fork by copy: the parent's first n events, read through a
// read handle (as reads see them: a session in an older format migrated),
// are written into the fork's own frames, after its header and before
// its marker, as one group whose header record counts them (Events):
// like a migration, a replay takes the fork only once all of it is
// there, and the next write open ends one that a crash cut short. No
// other handle or process sees the fork before it is whole.
func (db *DB) forkCopy(ctx context.Context, parent string, n uint64, hdr store.Header, marker event.Event) (*Handle, error) {
	lease, err := db.acquire(hdr.ID)
	if err != nil {
		return nil, sessionErr(hdr.ID, "fork", store.ErrSessionExists)
	}
	done := false
	defer func() {
		if !done {
			lease.Release()
		}
	}()
	if err := db.catchUpAll(hdr.ID); err != nil {
		return nil, err
	}
	db.mu.Lock()
	if s, ok := db.mu.sessions[hdr.ID]; ok && !s.erased {
		db.mu.Unlock()
		return nil, sessionErr(hdr.ID, "fork", store.ErrSessionExists)
	}
	db.mu.Unlock()
	p, err := db.Open(ctx, parent, store.Read)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c := &session{id: hdr.ID, hdr: &hdr, inherited: n, uid: store.NewIncarnation(), loaded: true}
	var frames []*segment.Encoded
	const chunk = 4096
	for off := uint64(0); off < n; off += chunk {
		evs, err := p.Read(ctx, int(off), int(min(chunk, n-off)))
		if err != nil {
			return nil, err
		}
		if uint64(len(evs)) != min(chunk, n-off) {
			return nil, &store.ForkRangeError{Parent: parent, N: n, Len: off + uint64(len(evs))}
		}
		fs, err := db.encodeBatch(c.id, evs)
		if err != nil {
			return nil, sessionErr(c.id, "fork", err)
		}
		frames = append(frames, fs...)
	}
	me, err := db.encoder(false).Events(c.id, n, []event.Event{marker})
	if err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	frames = append(frames, me)
	rec := store.HeaderRecord{Header: hdr, UID: c.uid, Inherited: n, Events: n + 1}
	he, err := db.encoder(false).Header(c.id, store.MarshalHeaderRecord(rec))
	if err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	if err := db.appendWhole(c, he, frames); err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	if err := db.sync(); err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.setChecked(c, c.next) // (read through a read handle: the catalog and the seed rules checked them)
	hd := db.newHandle(c, store.Write, lease)
	c.owner = hd
	done = true
	return hd, nil
}

// appendWhole places a new session's header and frames as one group (see
// forkCopy) and registers the session once all are placed.
func (db *DB) appendWhole(c *session, header *segment.Encoded, frames []*segment.Encoded) error {
	var changed bool
	pl := &wal.Placement{Frames: append([]*segment.Encoded{header}, frames...), Whole: true, Register: func(at []wal.Placed, _ int) {
		if cur := db.mu.sessions[c.id]; cur != nil && !cur.erased {
			changed = true // cannot happen under its lease
			return
		}
		refs := make([]frameRef, len(at))
		for i, a := range at {
			refs[i] = frameRef{seg: a.Seg, off: a.Loc.Offset, size: uint32(a.Loc.Size)}
		}
		last := refs[len(refs)-1]
		db.mu.pend = append(db.mu.pend, pendFrame{s: c, header: true, ref: refs[0], groupEnd: &last})
		c.size = int64(refs[0].size)
		for i, ref := range refs[1:] {
			ref.first, ref.count = c.framed, frames[i].Count()
			db.mu.pend = append(db.mu.pend, c.addFrame(ref))
		}
		c.next = c.framed
		db.mu.sessions[c.id] = c
		db.relist(c, true)
	}}
	if err := db.log.Place(pl); err != nil {
		if pl.Written() > 0 {
			// Part of the group is placed: the store cannot go on (the
			// next open abandons the group).
			db.poisonWith(err)
			return db.poisonErr()
		}
		return err
	}
	if changed {
		err := fmt.Errorf("engine: session %q appeared during its fork", c.id)
		db.poisonWith(err)
		return err
	}
	return nil
}

// errCopyFork: Fork cannot share the parent's frames now, and copies.
var errCopyFork = errors.New("engine: fork by copy")

// forkShared is Fork by shared frames, or errCopyFork.
func (db *DB) forkShared(ctx context.Context, parent string, n uint64, hdr store.Header, marker event.Event) (*Handle, error) {
	// Events of the parent appended here, not yet in frames (nor, maybe,
	// its header in the log, for the fork's to name): the write handle of
	// this DB that holds the parent cuts them into frames (as DB.Flush
	// does, without the sync: the fork's covers them), so that the fork
	// can share them. Before the parent is held: the handle's Close waits
	// for a pin on its session with the handle locked, and a pin held
	// while this waited for the handle deadlocked the two.
	db.mu.Lock()
	var owner *Handle
	if p := db.mu.sessions[parent]; n > 0 && p != nil && !p.erased && (p.pending || p.framed < n) {
		owner = p.owner
	}
	db.mu.Unlock()
	if owner != nil {
		if err := owner.prepareFlush(ctx); err != nil && !errors.Is(err, store.ErrHandleClosed) {
			return nil, errCopyFork
		}
	}
	release, err := db.holdParent(parent)
	if err != nil {
		return nil, err
	}
	defer release()
	lease, err := db.acquire(hdr.ID)
	if err != nil {
		return nil, sessionErr(hdr.ID, "fork", store.ErrSessionExists)
	}
	done := false
	defer func() {
		if !done {
			lease.Release()
		}
	}()
	if err := db.catchUpAll(hdr.ID); err != nil {
		return nil, err
	}
	db.mu.Lock()
	if s, ok := db.mu.sessions[hdr.ID]; ok && !s.erased {
		db.mu.Unlock()
		return nil, sessionErr(hdr.ID, "fork", store.ErrSessionExists)
	}
	p, err := db.lookup(parent, "fork")
	if err != nil {
		db.mu.Unlock()
		return nil, err
	}
	if n == 0 {
		db.mu.Unlock()
		return nil, errCopyFork // nothing to share
	}
	if p.pending {
		db.mu.Unlock()
		return nil, errCopyFork // (its events appended since are not framed: below)
	}
	phdr, err := db.header(p)
	db.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if phdr.Version < store.FormatVersion {
		return nil, errCopyFork // read migrated: its events are not its frames'
	}
	v, err := db.snapshot(p)
	if err != nil {
		return nil, sessionErr(parent, "fork", err)
	}
	if n > v.len() {
		return nil, &store.ForkRangeError{Parent: parent, N: n, Len: v.len()}
	}
	if n > v.framed {
		return nil, errCopyFork // (appended meanwhile by another goroutine, unframed)
	}
	db.mu.Lock()
	chain := []store.ForkLink{{ID: parent, UID: p.uid, Cut: n}}
	for _, l := range p.fork {
		l.Cut = min(l.Cut, n)
		chain = append(chain, l)
	}
	checked, checkedCat := min(p.checked, n), p.checkedCat
	ptitle, pmeta := p.title, p.metaAt
	turnFrom := p.turnFrom
	if turnFrom > n {
		turnFrom = 0 // (past the cut: not the fork's)
	}
	db.mu.Unlock()
	c := &session{id: hdr.ID, hdr: &hdr, inherited: n, uid: store.NewIncarnation(), fork: chain,
		framed: n, next: n, checked: checked, checkedCat: checkedCat, turnFrom: turnFrom} // (its frames: see appendFork)
	if pmeta == n {
		// The parent's listing describes its first n events: the fork's
		// title is its title, and the fork was updated by its marker.
		c.title, c.updatedAt, c.metaAt = ptitle, marker.Time, n+1
	}
	rec := store.HeaderRecord{Header: hdr, UID: c.uid, Inherited: n, Events: n + 1, Fork: chain}
	he, err := db.encoder(false).Header(c.id, store.MarshalHeaderRecord(rec))
	if err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	me, err := db.encoder(false).Events(c.id, n, []event.Event{marker})
	if err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	if db.knobs.forkPlacing != nil {
		db.knobs.forkPlacing()
	}
	if err := db.appendFork(p, c, he, me); err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	if err := db.sync(); err != nil {
		return nil, sessionErr(c.id, "fork", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	hd := db.newHandle(c, store.Write, lease)
	c.owner = hd
	done = true
	return hd, nil
}

// holdParent keeps session parent from being deleted or migrated, by any
// process, until release: its write lease, or, if a write handle of this
// DB holds that, a pin that keeps the handle's lease until release. It
// fails with errCopyFork if another process holds the lease.
func (db *DB) holdParent(parent string) (release func(), err error) {
	if l, err := db.acquire(parent); err == nil {
		return l.Release, nil
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if s := db.mu.sessions[parent]; s == nil || s.erased || s.owner == nil {
		return nil, errCopyFork
	}
	// Under mu: the handle's Close clears its ownership under mu before
	// it releases the lease, which waits for the pin.
	db.pins.Lock()
	if db.pins.byParent == nil {
		db.pins.byParent = map[string]int{}
	}
	db.pins.byParent[parent]++
	db.pins.Unlock()
	return func() {
		db.pins.Lock()
		if db.pins.byParent[parent]--; db.pins.byParent[parent] == 0 {
			delete(db.pins.byParent, parent)
			db.pins.cond.Broadcast()
		}
		db.pins.Unlock()
	}, nil
}

// waitUnpinned waits until no fork of session id is in progress (see
// holdParent); a lease waits for it before it is released.
func (db *DB) waitUnpinned(id string) {
	db.pins.Lock()
	for db.pins.byParent[id] > 0 {
		db.pins.cond.Wait()
	}
	db.pins.Unlock()
}

// appendFork places a fork's header and marker as one group (the index
// takes it whole, and a replay takes the fork only once its marker
// follows) and registers the fork, whose frames are its share of the
// parent's and its marker.
func (db *DB) appendFork(p, c *session, header, marker *segment.Encoded) error {
	var changed bool
	pl := &wal.Placement{Frames: []*segment.Encoded{header, marker}, Whole: true, Register: func(at []wal.Placed, _ int) {
		if cur := db.mu.sessions[c.id]; (cur != nil && !cur.erased) || db.mu.sessions[p.id] != p || p.erased {
			changed = true // cannot happen: the parent is held, the child's lease taken
			return
		}
		// The parent's frames as they are now, under db.mu: a compaction
		// may have moved them since Fork looked (this process's moves
		// them in place, under db.mu; another's relayout drops them, and
		// then the fork, like the parent, takes them from the index).
		c.frames, c.loaded = clipRefs(p.frames, c.inherited), p.loaded
		h := frameRef{seg: at[0].Seg, off: at[0].Loc.Offset, size: uint32(at[0].Loc.Size)}
		m := frameRef{first: c.framed, count: 1, seg: at[1].Seg, off: at[1].Loc.Offset, size: uint32(at[1].Loc.Size)}
		db.mu.pend = append(db.mu.pend, pendFrame{s: c, header: true, ref: h, groupEnd: &m})
		c.size = int64(h.size)
		db.mu.pend = append(db.mu.pend, c.addFrame(m))
		c.next = c.framed
		db.mu.sessions[c.id] = c
		db.relist(c, true)
	}}
	if err := db.log.Place(pl); err != nil {
		if pl.Written() > 0 {
			// Part of the group is placed: the store cannot go on (the
			// next open abandons the fork).
			db.poisonWith(err)
			return db.poisonErr()
		}
		return err
	}
	if changed {
		err := fmt.Errorf("engine: session %q changed during its fork", p.id)
		db.poisonWith(err)
		return err
	}
	return nil
}

package engine

import (
	"context"
	"fmt"
	"github.com/seglog/seglog/engine/internal/wal"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// migrate converts the events of a session stored in an older format (its
// header hdr, hdr.Version, and its stored inherited count inh) to the
// current format. A v1 session (the reference's released v1, which keeps
// a seeded session's cut as the header's seedLength: inh) goes through
// v2 to v3. A v0 log is never stored: import takes it through the v0 → v1
// edge (recovery.MigrateV0) and stores it as v1.
func migrate(hdr store.Header, inh uint64, evs []event.Event) ([]event.Event, error) {
	switch hdr.Version {
	case store.FormatVersion:
		return evs, nil
	case 2:
		return recovery.MigrateV2Session(recovery.LegacySession{ID: hdr.ID, ParentSession: hdr.ParentSession, IsSeeded: hdr.IsSeeded}, evs)
	case 1:
		out, _, err := recovery.MigrateV1(recovery.LegacySession{ID: hdr.ID, CreatedAt: hdr.CreatedAt,
			ParentSession: hdr.ParentSession, IsSeeded: hdr.IsSeeded, Inherited: inh}, evs)
		return out, err
	}
	return nil, &store.FormatError{Path: hdr.ID, What: "session", Version: hdr.Version, Supported: store.FormatVersion, Oldest: store.OldestFormatVersion}
}

// storedInherited is the inherited count the session's stored header
// record holds (for a session read migrated, the handle's count follows
// the marker's seq in the migrated log instead: settleMigratedInherited).
func (h *Handle) storedInherited() uint64 { return h.s.inherited }

// lastInheritedMarker is the seq of the last tagged end-seed marker of a
// migrated log, the seeded session's inherited count in the new format (a
// migration may have moved it: v2's system head goes after the first
// step/start, which may be inside the inherited prefix; v1's assistant
// chunks before the cut collapse into their message; v1's cut, the
// header's seedLength, gets its tagged marker only in the migration); old
// if it has none (the write open's seed rules then report the log).
func lastInheritedMarker(evs []event.Event, old uint64) uint64 {
	n := old
	for i := range evs {
		if store.IsInheritedMarker(&evs[i]) {
			n = evs[i].Seq
		}
	}
	return n
}

// settleMigratedInherited sets the inherited count of a read handle on a
// seeded session stored in an older format, read migrated, to the seq its
// marker has in the migrated log. Nothing for any other handle.
func (h *Handle) settleMigratedInherited(ctx context.Context) error {
	inh := h.InheritedEventCount()
	if inh == 0 || h.Header().Version >= store.FormatVersion {
		return nil
	}
	raw, err := h.readStored(ctx, 0, int(inh)+1, false)
	if err != nil {
		return err
	}
	evs, err := migrate(h.Header(), inh, raw)
	if err != nil {
		return sessionErr(h.ID(), "open", err)
	}
	h.front.SetInherited(lastInheritedMarker(evs, inh))
	return nil
}

// Migrate upgrades a session stored in an older supported format
// (FormatMigrationRequired) to the current one, in place, as a new
// incarnation of the same id that replaces the old one atomically: a
// crash leaves either the old session or the migrated one, never a mix
// (docs/DESIGN.md, Catalog, formats, seeds). Revisions change. It holds
// the session's write lease meanwhile (ErrAlreadyOwned while a write
// handle holds it), does nothing to a session in the current format, and
// returns the session's snapshot afterwards. A write open (Open with
// Write, Resume) of such a session migrates it the same way by itself:
// Migrate is for doing it ahead of time.
func (db *DB) Migrate(ctx context.Context, id string) (store.Snapshot, error) {
	if db.opts.ReadOnly {
		return store.Snapshot{}, store.ErrReadOnlyStore
	}
	if err := db.enter(); err != nil {
		return store.Snapshot{}, err
	}
	defer db.leave()
	if err := ctx.Err(); err != nil {
		return store.Snapshot{}, err
	}
	// The lease, then everything other processes placed: the session as
	// its last writer left it.
	lease, err := db.acquire(id)
	if err != nil {
		return store.Snapshot{}, sessionErr(id, "migrate", ownedKind(err))
	}
	defer lease.Release()
	if err := db.catchUpAll(id); err != nil {
		return store.Snapshot{}, err
	}
	ns, err := db.migrateLeased(ctx, id, "migrate")
	if err != nil {
		return store.Snapshot{}, err
	}
	if ns == nil {
		return db.Stat(ctx, id)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return ns.snapshot(), nil
}

// migrateLeased migrates session id, stored in an older format, to the
// current one (Migrate's work), for op ("migrate", or "open" for a write
// open). The caller holds id's write lease and has caught up with every
// process (catchUpAll); db.mu is not held. It returns the new incarnation,
// or nil if the session is already in the current format. A refusal
// (an event the migration or the catalog refuses) changes nothing.
func (db *DB) migrateLeased(ctx context.Context, id, op string) (*session, error) {
	// (lockOpen's work, inline: through lockOpen, internal/lint's lock
	// analysis took migrateLeased for a function that returns holding
	// db.mu.)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := db.catchUp(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	old, err := db.lookup(id, op)
	if err != nil {
		db.mu.Unlock()
		return nil, err
	}
	hdr, err := db.header(old)
	if err == nil {
		err = db.checkVersion(id, hdr)
	}
	if err != nil {
		db.mu.Unlock()
		return nil, err
	}
	if hdr.Version == store.FormatVersion {
		db.mu.Unlock()
		return nil, nil
	}
	rh := db.newHandle(old, store.Read, nil)
	db.mu.Unlock()
	defer rh.Close()
	if err := rh.settleMigratedInherited(ctx); err != nil {
		return nil, err
	}
	evs, err := rh.Read(ctx, 0, -1) // migrated in memory
	if err != nil {
		return nil, err
	}
	for i := range evs {
		if err := db.opts.Catalog.Check(&evs[i]); err != nil {
			return nil, sessionErr(id, op, err)
		}
	}

	newHdr := hdr
	newHdr.Version = store.FormatVersion
	newHdr.AgentPreset = recovery.V3AgentPreset(hdr.AgentPreset) // the v2 → v3 edge's rename
	inherited := old.inherited
	if inherited > 0 {
		inherited = lastInheritedMarker(evs, inherited)
	}
	ns := &session{id: id, hdr: &newHdr, inherited: inherited, uid: store.NewIncarnation(), loaded: true}
	ns.setListing(evs)
	rec := store.MarshalHeaderRecord(store.HeaderRecord{Header: newHdr, UID: ns.uid, Inherited: ns.inherited, Replaces: old.uid, Events: uint64(len(evs))})
	he, err := db.encoder(false).Header(id, rec)
	if err != nil {
		return nil, sessionErr(id, op, err)
	}
	var frames []*segment.Encoded
	if len(evs) > 0 {
		if frames, err = db.encodeBatch(id, evs); err != nil {
			return nil, sessionErr(id, op, err)
		}
	}
	if err := db.appendMigration(old, ns, he, frames); err != nil {
		return nil, sessionErr(id, op, err)
	}
	if db.knobs.migrated != nil {
		db.knobs.migrated()
	}
	if err := db.sync(); err != nil {
		return nil, sessionErr(id, op, err)
	}
	return ns, nil
}

// appendMigration appends the new incarnation's header and frames as one
// contiguous group and switches the session to it. The index takes the
// group whole (pendFrame.groupEnd).
func (db *DB) appendMigration(old, ns *session, header *segment.Encoded, frames []*segment.Encoded) error {
	var changed bool
	p := &wal.Placement{Frames: append([]*segment.Encoded{header}, frames...), Whole: true, Register: func(at []wal.Placed, _ int) {
		if db.mu.sessions[old.id] != old || old.erased {
			changed = true // cannot happen under the lease
			return
		}
		refs := make([]frameRef, len(at))
		for i, a := range at {
			refs[i] = frameRef{seg: a.Seg, off: a.Loc.Offset, size: uint32(a.Loc.Size)}
		}
		last := refs[len(refs)-1]
		db.mu.pend = append(db.mu.pend,
			pendFrame{s: old, delete: true, ref: refs[0], groupEnd: &last, migration: true},
			pendFrame{s: ns, header: true, ref: refs[0], migration: true})
		ns.size = int64(refs[0].size)
		for i, ref := range refs[1:] {
			ref.first, ref.count = ns.framed, frames[i].Count()
			p := ns.addFrame(ref)
			p.migration = true
			db.mu.pend = append(db.mu.pend, p)
		}
		ns.next = ns.framed
		old.erased = true
		db.mu.sessions[ns.id] = ns
		db.relist(ns, false)
	}}
	if err := db.log.Place(p); err != nil {
		if p.Written() > 0 {
			// Part of the group is placed, even durable (a roll syncs): the
			// store cannot go on (the next open abandons the group).
			db.poisonWith(err)
			return db.poisonErr()
		}
		return err
	}
	if changed {
		return fmt.Errorf("engine: session %q changed during its migration", old.id)
	}
	db.compaction.dead.Store(true)
	return nil
}

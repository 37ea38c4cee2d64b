package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/framecheck"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Problem is one inconsistency Check found, with its location.
type Problem struct {
	Path    string // segment or index file
	Offset  int64  // -1 when the problem has no offset
	Session string // "" when it is not about one session
	What    string
}

func (p Problem) String() string {
	s := p.Path
	if p.Offset >= 0 {
		s += fmt.Sprintf(" @%d", p.Offset)
	}
	if p.Session != "" {
		s += fmt.Sprintf(" session %q", p.Session)
	}
	return s + ": " + p.What
}

// CheckReport is what Check read and found.
type CheckReport struct {
	Segments int
	Frames   int
	Sessions int
	Events   uint64
	Notes    []string // recoverable states (a torn tail the next open cuts), not problems
	Problems []Problem
}

// Check verifies a store at rest without changing it: it runs Open's
// recovery read-only (what a write open would do about the store is in
// Notes), replays every segment from the start and compares the result
// with what the open serves, and decodes every frame and dictionary
// (docs/DESIGN.md, Tools). Each inconsistency is a Problem with its file
// and offset. It returns an error only if the store cannot be read at all.
//
// Beside processes that write the store it checks it as of one point:
// what they had made durable, and the index as it was, when its open
// began; what they do after it is no problem. A compaction during a try
// makes it start over; after checkFreeTries such tries it keeps
// compactions out for the next (their Compact fails with ErrLocked
// meanwhile).
func Check(dir string, opts *Options) (*CheckReport, error) {
	for try := 1; ; try++ {
		rep, moved, err := checkOnce(dir, opts, try > checkFreeTries)
		if !moved || try == openTries {
			return rep, err
		}
		// A compaction by a writing process changed the segments while
		// they were read: what disagrees may be that. Check again.
	}
}

// checkFreeTries is how many tries Check makes beside compactions before
// it keeps them out (on a busy store, with a compaction every few hundred
// milliseconds, a check of a few seconds would otherwise start over
// without end).
const checkFreeTries = 2

// checkWait bounds how long Check waits for a compaction in progress to
// end before it checks without keeping the next ones out.
var checkWait = 30 * time.Second

// keepCompactionsOut takes coord.LockCompact for a read-only open of
// Check's (Options.keepCompactionsOut), waiting at most checkWait for the
// compaction in progress (none starts while it waits: coord.LockCheck): no
// compaction removes or rewrites a segment until the DB closes (the lock
// goes with its locks file); a process's Compact meanwhile fails with
// ErrLocked, as beside another compaction. A layout change that a
// compaction which died left unsettled is left to the writing processes
// (settling it needs the lock): the lock is let go.
func keepCompactionsOut(sh *coord.Shared) {
	if !sh.Mapped() {
		return // no process writes the store
	}
	if sh.KeepCompactionsOut(checkWait) && sh.Layout()%2 == 1 {
		sh.EndCompact()
	}
}

// checkOnce is Check; moved reports that a compaction by another process
// removed or rewrote segments meanwhile. With hold, it keeps compactions
// out while it reads (keepCompactionsOut).
func checkOnce(dir string, opts *Options, hold bool) (_ *CheckReport, moved bool, _ error) {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return nil, false, err
	}
	if _, err := o.FS.List(dir); err != nil {
		return nil, false, fmt.Errorf("engine: check %s: %w", dir, err)
	}
	rep := &CheckReport{}
	problem := func(path string, off int64, session, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{Path: path, Offset: off, Session: session, What: fmt.Sprintf(format, args...)})
	}
	problemErr := func(prefix string, err error) {
		var ce *store.CorruptionError
		var fe *store.FormatError
		if errors.As(err, &ce) {
			problem(ce.Path, ce.Offset, "", "%s%s", prefix, ce.Reason)
		} else if errors.As(err, &fe) {
			problem(fe.Path, 0, "", "%s%v", prefix, err)
		} else {
			problem(dir, -1, "", "%s%v", prefix, err)
		}
	}

	// What Open does.
	ro := o
	ro.ReadOnly, ro.Logger = true, slog.New(slog.DiscardHandler)
	// Beside writing processes, everything below reads the store as of
	// one point: the durable position published when the open began (the
	// bound: no read goes past it), and the index as the open read it
	// (the sessions, the checkpoint and every session's frames, loaded in
	// one hold of the index, which no checkpoint changes meanwhile). What
	// the writers do after it (checkpoints, deletes, forks, migrations,
	// rolls, segments made) is not seen; a compaction, which changes what
	// lies before it, makes the check start over.
	ro.checking, ro.keepCompactionsOut = true, hold
	opened, err := Open(dir, &ro)
	if o.testing.checkOpened != nil {
		o.testing.checkOpened()
	}
	if errors.Is(err, store.ErrLocked) || errors.Is(err, index.ErrLocked) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		// Not a problem of the store: it cannot be checked now (a full
		// disk: the coordination files cannot be made or grown).
		return nil, false, err
	}
	var skip map[uint64]bool // segments the recovery sets aside or removes
	var cp index.Checkpoint  // what the index proves durable: damage before it is no torn tail
	if err != nil {
		problemErr("open fails: ", err)
	} else {
		defer opened.Close()
		if opened.index != nil {
			// The checkpoint the open read, not the index's now: another
			// process may have checkpointed past the bound since.
			cp = opened.rec.cp
		}
		checkSegmentsThere(opened, problem)
		rep.Notes = append(rep.Notes, opened.rec.notes...)
		skip = map[uint64]bool{}
		for _, id := range opened.rec.drop {
			skip[id] = true
		}
		for _, q := range opened.rec.quarantine {
			if id, ok := segment.ParseName(filepath.Base(q.path)); ok {
				skip[id] = true
			}
		}
	}

	// The segments on their own, replayed from the start: as far as the
	// first open read, if another process is writing the store.
	full := ro
	full.NoIndex, full.keepCompactionsOut = true, false // (the first open holds them out)
	var bound uint64
	if opened != nil {
		bound = opened.bound
		full.bound = bound
	}
	all, err := Open(dir, &full)
	if err != nil {
		problemErr("the segments do not replay: ", err)
		if opened != nil {
			for _, s := range opened.mu.sessions {
				rep.Sessions++
				rep.Events += s.next
			}
		}
	} else {
		defer all.Close()
		for _, s := range all.mu.sessions {
			rep.Sessions++
			rep.Events += s.next
		}
		if opened != nil {
			checkAgreement(opened, all, problem)
		}
	}

	// Every frame, and every dictionary.
	fo := framecheck.Options{Skip: skip, DurableSeg: cp.Segment, DurableOff: cp.Offset, Bounded: bound != 0}
	fo.BoundSeg, fo.BoundOff = coord.SplitPosition(bound)
	n, err := framecheck.Run(o.FS, dir, fo, func(path string, off int64, session, what string) {
		problem(path, off, session, "%s", what)
	})
	if err != nil {
		return nil, false, err
	}
	rep.Segments, rep.Frames = n.Segments, n.Frames
	rep.Problems = dedupProblems(rep.Problems)
	if opened != nil && opened.follow != nil {
		moved = opened.shared.LayoutMoved(&opened.follow.layout)
	}
	if opened != nil && opened.bound == 0 && opened.shared.Live() {
		// No writing process had set the log up when the open began, and
		// one has since (its recovery may have cut a torn tail or removed
		// a prepared segment, and it writes past what the open read,
		// with no bound to stop the reads after it): check again, bounded.
		moved = true
	}
	return rep, moved, nil
}

// checkSegmentsThere reports every segment a read would use that is
// missing: the open does not notice (the index does not list segments),
// and the replay without the index only meets the gap it leaves.
func checkSegmentsThere(opened *DB, problem func(path string, off int64, session, format string, args ...any)) {
	there := map[uint64]bool{}
	for _, id := range slices.Sorted(maps.Keys(opened.mu.sessions)) {
		v, err := opened.snapshot(opened.mu.sessions[id])
		if err != nil {
			continue
		}
		for _, f := range v.refs {
			ok, seen := there[f.seg]
			if !seen {
				r, err := opened.opts.FS.Open(opened.segPath(f.seg))
				ok = !errors.Is(err, fs.ErrNotExist)
				if err == nil {
					r.Close()
				}
				there[f.seg] = ok
				if !ok {
					problem(opened.segPath(f.seg), f.off, id, "segment missing: it held events %d..%d of this session", f.first, f.first+uint64(f.count))
				}
			}
		}
	}
}

// checkAgreement compares what an open serves (opened: the index and the
// replay after its checkpoint) with a replay of every segment (all).
func checkAgreement(opened, all *DB, problem func(path string, off int64, session, format string, args ...any)) {
	idxPath := opened.opts.IndexPath
	if opened.index == nil {
		idxPath = opened.dir
	}
	for id, s := range all.mu.sessions {
		o := opened.mu.sessions[id]
		switch {
		case o == nil:
			problem(idxPath, -1, id, "an open would not serve this session (%d events in the segments): the index lost it; --repair rebuilds the index", s.next)
		case o.uid != s.uid:
			problem(idxPath, -1, id, "an open would serve incarnation %x, the segments hold %x; --repair rebuilds the index", o.uid, s.uid)
		case o.next != s.next:
			problem(idxPath, -1, id, "an open would serve %d events, the segments hold %d; --repair rebuilds the index", o.next, s.next)
		default:
			if h, err := opened.header(o); err != nil {
				problem(idxPath, -1, id, "%v; --repair rebuilds the index", err)
			} else if !reflect.DeepEqual(h, *s.hdr) {
				problem(idxPath, -1, id, "an open would serve the header %+v, the segments hold %+v; --repair rebuilds the index", h, *s.hdr)
			}
		}
	}
	for id, o := range opened.mu.sessions {
		if all.mu.sessions[id] == nil && !o.pending {
			problem(idxPath, -1, id, "an open would serve this session (%d events), which the segments do not hold", o.next)
		}
	}
	// Every frame a read would use (the index's, then those replayed after
	// its checkpoint: the read path's own snapshot) where the segments have
	// it.
	for id, s := range all.mu.sessions {
		o := opened.mu.sessions[id]
		if o == nil || o.uid != s.uid {
			continue
		}
		v, err := opened.snapshot(o)
		if err != nil {
			problem(idxPath, -1, id, "%v", err)
			continue
		}
		if len(v.refs) != len(s.frames) {
			problem(idxPath, -1, id, "a read would use %d frames, the segments hold %d; --repair rebuilds the index", len(v.refs), len(s.frames))
			continue
		}
		for i, f := range v.refs {
			if g := s.frames[i]; g.seg != f.seg || g.off != f.off || g.first != f.first || g.count != f.count || (f.size != 0 && g.size != f.size) {
				problem(idxPath, -1, id, "indexed frame (segment %d @%d, %d bytes, seqs %d+%d) does not match the segments (segment %d @%d, %d bytes, seqs %d+%d); --repair rebuilds the index",
					f.seg, f.off, f.size, f.first, f.count, g.seg, g.off, g.size, g.first, g.count)
				break
			}
		}
	}
}

// dedupProblems drops repeats (the open and the full replay often stop
// at the same damage).
func dedupProblems(ps []Problem) []Problem {
	seen := map[Problem]bool{}
	out := ps[:0]
	for _, p := range ps {
		k := p
		k.What = strings.TrimPrefix(strings.TrimPrefix(k.What, "open fails: "), "the segments do not replay: ")
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, p)
	}
	return out
}

// RebuildIndex rebuilds the index of a store from its segments (seglog
// check --repair). If no other process has the store open, it replays
// every segment, and only if that succeeds (and the segments hold
// everything the old index proves durable) moves the old index to
// quarantine/ and writes the new one; if the segments do not replay, the
// old index stays as it was. Beside processes that have the store open,
// it joins them as a writer, keeps compactions out, takes the index over
// from the process that checkpoints it, replays every segment up to what
// they made durable into a new index file, and renames it over the old
// one (a copy of which goes to quarantine/); it fails with ErrLocked if
// a compaction or the checkpointing process keeps it waiting for 30 s.
func RebuildIndex(dir string, opts *Options) error {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return err
	}
	if o.NoIndex {
		return errors.New("engine: the store has no index to rebuild")
	}
	if o.ReadOnly {
		return store.ErrReadOnlyStore
	}
	ids, err := segment.List(o.FS, dir)
	if err != nil {
		return fmt.Errorf("engine: rebuild the index of %s: %w", dir, err)
	}
	if _, serr := os.Stat(o.IndexPath); len(ids) == 0 && serr != nil {
		return fmt.Errorf("engine: rebuild the index of %s: %w", dir, store.ErrNoStore)
	}
	db, err := open(dir, &o, true)
	if errors.Is(err, store.ErrLocked) && errors.Is(err, errOthersOpen) {
		return rebuildLive(dir, &o)
	}
	if err != nil {
		return err
	}
	return db.Close()
}

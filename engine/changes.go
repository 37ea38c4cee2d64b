package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/seglog/seglog/engine/internal/compactplan"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// The change feed (docs/SEARCH.md, "Change feed"): the frames of the
// shared log, read in log order up to the durable position, turned into
// changes. A fork or a migration (a header that counts the events after
// it) is a group: it shows whole once all its frames are durable, or not
// at all if it died (a frame of another session follows its incomplete
// frames: a group is placed contiguously); a migration shows nothing.

// Changes iterates over the store's change feed (store.Store.Changes).
func (db *DB) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	o := store.ChangesConfig(opts)
	return func(yield func(store.Change, error) bool) {
		f := &changeFeed{db: db, readers: map[uint64]*segment.Reader{}}
		defer f.close()
		fail := func(err error) { yield(store.Change{}, err) }
		if err := db.enter(); err != nil {
			fail(err)
			return
		}
		err := f.start(from)
		db.leave()
		if err != nil {
			fail(err)
			return
		}
		delay := feedPollMin
		var t *time.Timer
		for {
			if err := ctx.Err(); err != nil {
				fail(err)
				return
			}
			synced := db.shared.Changed() // before looking: a sync after closes it
			if err := db.enter(); err != nil {
				fail(err)
				return
			}
			n, stopped, err := f.pass(yield)
			db.leave()
			if stopped {
				return
			}
			if err != nil {
				fail(err)
				return
			}
			if !o.Follow {
				return
			}
			if n > 0 {
				delay = feedPollMin
			}
			if t == nil {
				t = time.NewTimer(delay)
				defer t.Stop()
			} else {
				t.Reset(delay)
			}
			select {
			case <-ctx.Done():
				fail(ctx.Err())
				return
			case <-db.stop:
				fail(store.ErrClosed)
				return
			case <-synced:
				delay = feedPollMin
			case <-t.C:
				delay = min(2*delay, feedPollMax)
			}
		}
	}
}

// A following feed looks again at each sync of any process (the futex
// watch Wait uses) and polls from feedPollMin to feedPollMax while
// nothing comes (a process that cannot watch).
const (
	feedPollMin = time.Millisecond
	feedPollMax = 50 * time.Millisecond
)

// frameID names a frame across a rewrite of its segment by compaction,
// which keeps the frames it keeps in order and changes only their
// offsets (and write bases): its kind, seqs and the hash of its key. The
// zero frameID names no frame (a position at a segment's start).
type frameID struct {
	kind  uint8
	first uint64
	count uint32
	key   uint64
}

func idOf(fi *segment.FrameInfo) frameID {
	return frameID{kind: uint8(fi.Kind), first: fi.FirstSeq, count: fi.Count, key: xxhash.Sum64(fi.Key)}
}

// feedCursor is what a store.Cursor of the engine holds.
type feedCursor struct {
	seg     uint64 // the segment of the position
	created int64  // its header's creation time (which store it is)
	gen     uint64 // its generation when the cursor was made
	off     int64  // the position: the next frame to read
	last    frameID
	// part: the changes of the unit (frame or group) at off already
	// delivered (a fork shows as two changes, both made by its group).
	part uint32
	// ignore: the incarnations of dead groups (before off) whose
	// tombstone is still to come: it ends what never showed.
	ignore []uint64
}

const cursorPrefix = "e1"

func (c *feedCursor) String() string {
	var b strings.Builder
	b.WriteString(cursorPrefix)
	for _, v := range []uint64{c.seg, uint64(c.created), c.gen, uint64(c.off), uint64(c.part), uint64(c.last.kind), c.last.first, uint64(c.last.count), c.last.key} {
		b.WriteByte('-')
		b.WriteString(strconv.FormatUint(v, 16))
	}
	for _, u := range c.ignore {
		b.WriteByte('-')
		b.WriteString(strconv.FormatUint(u, 16))
	}
	return b.String()
}

func parseCursor(s store.Cursor) (*feedCursor, error) {
	bad := func(reason string) error {
		return &store.CursorError{Cursor: s, Kind: store.ErrInvalidCursor, Reason: reason}
	}
	f := strings.Split(string(s), "-")
	if f[0] != cursorPrefix {
		return nil, bad("not a cursor of this backend (it starts with \"" + cursorPrefix + "-\")")
	}
	if len(f) < 10 {
		return nil, bad(fmt.Sprintf("%d fields, want at least 9", len(f)-1))
	}
	v := make([]uint64, len(f)-1)
	for i, x := range f[1:] {
		n, err := strconv.ParseUint(x, 16, 64)
		if err != nil || x != strconv.FormatUint(n, 16) {
			return nil, bad(fmt.Sprintf("field %d (%q) is not a hexadecimal number", i+1, x))
		}
		v[i] = n
	}
	c := &feedCursor{seg: v[0], created: int64(v[1]), gen: v[2], off: int64(v[3]),
		last: frameID{kind: uint8(v[5]), first: v[6], count: uint32(v[7]), key: v[8]}}
	switch {
	case c.seg == 0:
		return nil, bad("segment 0")
	case v[3] > math.MaxInt64 || c.off < segment.HeaderSize || c.off%8 != 0:
		return nil, bad(fmt.Sprintf("offset %d is no frame boundary", v[3]))
	case v[4] > 2:
		return nil, bad(fmt.Sprintf("part %d of a unit", v[4]))
	case v[5] > uint64(segment.KindDelete) || v[7] > math.MaxUint32:
		return nil, bad("the last frame's kind or count is out of range")
	case (c.last == frameID{}) != (c.off == segment.HeaderSize):
		return nil, bad("the last frame is named exactly when the offset is past a segment's header")
	}
	c.part = uint32(v[4])
	c.ignore = v[9:]
	return c, nil
}

// changeFeed is one iteration of Changes.
type changeFeed struct {
	db      *DB
	readers map[uint64]*segment.Reader
	pos     feedCursor // seg 0: before the first segment
	ignore  map[uint64]bool
	// frames: those met and not yet consumed (the units from pos on),
	// across segments when a group spans a roll
	frames []feedFrame
	// the collection of frames in a pass: the segment (0: none yet),
	// the offset reached, whether it is sealed, whether it is read to
	// the durable end
	cseg           uint64
	cend           int64
	csealed, cdone bool
	// The purge log as the feed last read it: its version, the deletes
	// to give before anything else (a consumer that may hold an
	// incarnation compaction purged with its tombstone), and the records
	// the consumer may need once their tombstone is gone (a compaction
	// under way, or one that died).
	pversion  uint64
	pending   []store.Change
	unsettled []compactplan.Delete
}

// errReposition: the purge log changed under a running feed, which must
// place itself again at its position (changeFeed.reposition).
var errReposition = errors.New("engine: the purge log changed")

// feedFrame is a frame found by a scan.
type feedFrame struct {
	seg, gen uint64
	created  int64
	off, end int64
	kind     segment.Kind
	key      string
	first    uint64
	count    uint32
	id       frameID
}

func (f *changeFeed) close() {
	for _, r := range f.readers {
		r.Close()
	}
}

func (f *changeFeed) reader(seg uint64) (*segment.Reader, error) {
	if r := f.readers[seg]; r != nil {
		return r, nil
	}
	r, err := f.db.openSegment(seg)
	if err != nil {
		return nil, err
	}
	f.readers[seg] = r
	return r, nil
}

// start places the feed at cursor from.
func (f *changeFeed) start(from store.Cursor) error {
	f.ignore = map[uint64]bool{}
	if from == "" {
		v, err := f.db.purgeLogVersion()
		f.pversion, f.pending, f.unsettled = v, nil, nil
		return err
	}
	c, err := parseCursor(from)
	if err != nil {
		return err
	}
	expired := func(reason string) error {
		return &store.CursorError{Cursor: from, Kind: store.ErrCursorExpired, Reason: reason}
	}
	r, err := f.reader(c.seg)
	if errors.Is(err, fs.ErrNotExist) {
		ids, lerr := segment.List(f.db.opts.FS, f.db.dir)
		if lerr != nil {
			return lerr
		}
		if len(ids) == 0 || ids[len(ids)-1] < c.seg {
			return &store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("segment %d is past the store's last one: another store's cursor", c.seg)}
		}
		return expired(fmt.Sprintf("segment %d was removed by compaction", c.seg))
	}
	if err != nil {
		return err
	}
	h := r.Header()
	if h.CreatedNs != c.created {
		return &store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("segment %d of this store is not the cursor's (created at another time): another store's cursor", c.seg)}
	}
	if err := r.Remap(); err != nil {
		return err
	}
	// Before the cursor is carried to the segment's generation: the
	// purge log's positions are those of the generations it was made in.
	if err := f.checkPurges(c, from); err != nil {
		return err
	}
	switch {
	case h.Generation < c.gen:
		return &store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("segment %d is at generation %d, before the cursor's %d", c.seg, h.Generation, c.gen)}
	case h.Generation == c.gen:
		if c.off > r.Size() {
			return &store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("offset %d is past the end of segment %d", c.off, c.seg)}
		}
	case c.off == segment.HeaderSize:
		c.gen = h.Generation
	default:
		// Compaction rewrote the segment since: its kept frames are in
		// the same order, at other offsets. Resume after the cursor's
		// frame if it is still there.
		found := int64(-1)
		_, err := r.Scan(segment.ScanOptions{Durable: math.MaxInt64}, func(fi *segment.FrameInfo) error {
			if found < 0 && fi.Kind != segment.KindSeal && idOf(fi) == c.last {
				found = fi.End()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found < 0 {
			return expired(fmt.Sprintf("compaction removed the cursor's last frame from segment %d (a deleted session the consumer may not have seen deleted)", c.seg))
		}
		c.off, c.gen = found, h.Generation
	}
	f.pos = *c
	for _, u := range c.ignore {
		f.ignore[u] = true
	}
	return nil
}

// cursor returns the cursor of position p.
func (f *changeFeed) cursor(p feedCursor) store.Cursor {
	p.ignore = p.ignore[:0:0]
	for u := range f.ignore {
		p.ignore = append(p.ignore, u)
	}
	slices.Sort(p.ignore)
	return store.Cursor(p.String())
}

// collect appends to f.frames the frames of the next stretch of the log
// up to the durable position d (live: a writing process published it;
// else what the segments hold is all there is): the rest of the segment
// being collected, or the next segment once it is sealed. It reports
// false when there is nothing more to read.
func (f *changeFeed) collect(d uint64, live bool) (bool, error) {
	dseg, doff := coord.SplitPosition(d)
	switch {
	case f.cseg == 0 || f.csealed:
		next, err := f.nextSegment(f.cseg)
		if err != nil || next == 0 || live && next > dseg {
			return false, err
		}
		f.cseg, f.cend, f.csealed, f.cdone = next, segment.HeaderSize, false, false
	case f.cdone:
		return false, nil
	}
	seg := f.cseg
	_, known := f.readers[seg]
	r, err := f.reader(seg)
	if err != nil {
		return false, err
	}
	if !known {
		// Opened now: if a compaction changed it, after the purge log
		// (written before), which says what it purged.
		if err := f.purgesChanged(); err != nil {
			return false, err
		}
	}
	if err := r.Remap(); err != nil {
		return false, err
	}
	h := r.Header()
	opts := segment.ScanOptions{From: f.cend}
	switch {
	case !live:
	case seg == dseg && h.Generation == 0:
		if f.cend > doff {
			return false, &store.CorruptionError{Path: r.Path(), Offset: f.cend, Reason: fmt.Sprintf("the feed's position is past the durable offset %d", doff)}
		}
		opts.Limit, opts.Durable = doff, doff
	default:
		opts.Durable = math.MaxInt64
	}
	res, err := r.Scan(opts, func(fi *segment.FrameInfo) error {
		if fi.Kind != segment.KindSeal {
			f.frames = append(f.frames, feedFrame{seg: seg, gen: h.Generation, created: h.CreatedNs, off: fi.Offset, end: fi.End(),
				kind: fi.Kind, key: string(fi.Key), first: fi.FirstSeq, count: fi.Count, id: idOf(fi)})
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	f.cend, f.csealed, f.cdone = res.End, res.Sealed, !res.Sealed
	if live && seg < dseg && !res.Sealed {
		return false, &store.CorruptionError{Path: r.Path(), Offset: res.End, Reason: "segment before the durable one is not sealed"}
	}
	return true, nil
}

// nextSegment returns the first segment after seg, 0 if none.
func (f *changeFeed) nextSegment(seg uint64) (uint64, error) {
	ids, err := segment.List(f.db.opts.FS, f.db.dir)
	if err != nil {
		return 0, err
	}
	i, found := slices.BinarySearch(ids, seg+1)
	_ = found
	if i == len(ids) {
		return 0, nil
	}
	return ids[i], nil
}

// pass yields every change from the feed's position up to the durable end
// as it is now. It returns how many it yielded, and stopped if yield
// asked to stop.
func (f *changeFeed) pass(yield func(store.Change, error) bool) (n int, stopped bool, err error) {
	db := f.db
	d, live := db.shared.Durable()
	if err := db.shared.Followable(d, live); err != nil {
		return 0, false, err
	}
	f.frames = f.frames[:0]
	f.cseg, f.cend, f.csealed, f.cdone = f.pos.seg, f.pos.off, false, false
	defer func() {
		// Keep only the reader of the position's segment.
		for id, r := range f.readers {
			if id != f.pos.seg {
				r.Close()
				delete(f.readers, id)
			}
		}
	}()
	for {
		for _, c := range f.pending {
			c.Cursor = f.cursor(f.pos)
			n++
			if !yield(c, nil) {
				return n, true, nil
			}
		}
		f.pending = nil
		var err error
		for len(f.frames) == 0 && err == nil {
			var more bool
			more, err = f.collect(d, live)
			if err == nil && !more {
				return n, false, nil
			}
		}
		var changes []store.Change
		var used int
		ok := false
		if err == nil {
			changes, used, ok, err = f.unit(d, live)
		}
		if errors.Is(err, errReposition) {
			if err := f.reposition(); err != nil {
				return n, false, err
			}
			d, live = db.shared.Durable()
			if err := db.shared.Followable(d, live); err != nil {
				return n, false, err
			}
			f.cseg, f.cend, f.csealed, f.cdone = f.pos.seg, f.pos.off, false, false
			continue
		}
		if err != nil {
			return n, false, err
		}
		if !ok {
			return n, false, nil // a group not whole yet: wait for it
		}
		fr, last := f.frames[0], f.frames[used-1]
		start := feedCursor{seg: fr.seg, created: fr.created, gen: fr.gen, off: fr.off}
		if f.pos.seg == fr.seg && f.pos.off == fr.off {
			start.last = f.pos.last
		}
		end := feedCursor{seg: last.seg, created: last.created, gen: last.gen, off: last.end, last: last.id}
		skip := f.pos.part
		if f.pos.seg != fr.seg || f.pos.off != fr.off {
			skip = 0
		}
		for i, c := range changes {
			if uint32(i) < skip {
				continue
			}
			if i < len(changes)-1 {
				p := start
				p.part = uint32(i + 1)
				c.Cursor = f.cursor(p)
			} else {
				c.Cursor = f.cursor(end)
			}
			n++
			if !yield(c, nil) {
				return n, true, nil
			}
		}
		f.pos = end
		f.frames = f.frames[used:]
	}
}

// unit reads the unit at f.frames[0]: one frame, or a group (a header
// that counts the events after it, then those events). It returns the
// changes it makes, how many frames it used, and false if it cannot tell
// yet (a group whose end is not durable).
func (f *changeFeed) unit(d uint64, live bool) ([]store.Change, int, bool, error) {
	fr := f.frames[0]
	r, err := f.reader(fr.seg)
	if err != nil {
		return nil, 0, false, err
	}
	switch fr.kind {
	case segment.KindDelete:
		x, err := r.ReadFrame(fr.off)
		if err != nil {
			return nil, 0, false, err
		}
		if f.ignore[x.Deletes] {
			delete(f.ignore, x.Deletes)
			return nil, 1, true, nil
		}
		return []store.Change{{Kind: store.ChangeDelete, Session: fr.key}}, 1, true, nil
	case segment.KindEvents:
		x, err := r.ReadFrame(fr.off)
		if err != nil {
			return nil, 0, false, err
		}
		return []store.Change{{Kind: store.ChangeAppend, Session: fr.key, Seq: fr.first, Events: x.Events}}, 1, true, nil
	case segment.KindHeader:
	default:
		return nil, 1, true, nil
	}
	x, err := r.ReadFrame(fr.off)
	if err != nil {
		return nil, 0, false, err
	}
	rec, err := store.DecodeHeaderRecord(x.Payload, x.Session)
	if err != nil {
		return nil, 0, false, &store.CorruptionError{Path: r.Path(), Offset: fr.off, Reason: err.Error()}
	}
	hdr := rec.Header
	if rec.Events == 0 {
		return []store.Change{{Kind: store.ChangeCreate, Session: fr.key, Header: &hdr}}, 1, true, nil
	}
	// A group: a fork (sharing: its marker follows; by copy: the parent's
	// events, then the marker) or a migration (every event again).
	next := uint64(0)
	if len(rec.Fork) > 0 {
		next = rec.Fork[0].Cut
	}
	end := 0 // the group's last frame
	for i := 1; next < rec.Events; i++ {
		for i >= len(f.frames) {
			more, err := f.collect(d, live)
			if err != nil {
				return nil, 0, false, err
			}
			if !more {
				return nil, 0, false, nil
			}
		}
		g := f.frames[i]
		if g.key != fr.key || g.kind != segment.KindEvents || g.first != next {
			// Another frame inside the group: its writer died before it
			// was whole (it places a group at once). Its tombstone comes
			// later; until then, and after, it never was.
			f.ignore[rec.UID] = true
			return nil, end + 1, true, nil
		}
		next += uint64(g.count)
		end = i
	}
	if rec.Replaces != 0 {
		return nil, end + 1, true, nil // a migration: no change
	}
	parent, n := hdr.ParentSession, rec.Inherited
	if len(rec.Fork) > 0 {
		parent, n = rec.Fork[0].ID, rec.Fork[0].Cut
	}
	out := []store.Change{{Kind: store.ChangeFork, Session: fr.key, Header: &hdr, Parent: parent, N: n}}
	var own []eventsOf
	for _, g := range f.frames[1 : end+1] {
		if g.first+uint64(g.count) <= n {
			continue // the parent's events, copied
		}
		gr, err := f.reader(g.seg)
		if err != nil {
			return nil, 0, false, err
		}
		y, err := gr.ReadFrame(g.off)
		if err != nil {
			return nil, 0, false, err
		}
		own = append(own, eventsOf{first: g.first, evs: y.Events})
	}
	app := store.Change{Kind: store.ChangeAppend, Session: fr.key, Seq: n}
	for _, e := range own {
		for k, ev := range e.evs {
			if e.first+uint64(k) >= n {
				app.Events = append(app.Events, ev)
			}
		}
	}
	if len(app.Events) > 0 {
		out = append(out, app)
	}
	return out, end + 1, true, nil
}

type eventsOf struct {
	first uint64
	evs   []event.Event
}

// checkPurges reads the purge log (docs/SEARCH.md, Change feed) for a
// consumer at c (from as given): the deletes of incarnations compaction
// purged with their tombstone that it may hold are made pending, to be
// given first; where the log cannot tell whether it holds one, the
// cursor is expired.
func (f *changeFeed) checkPurges(c *feedCursor, from store.Cursor) error {
	l, err := f.db.readPurgeLog()
	if err != nil {
		return err
	}
	f.pversion, f.pending, f.unsettled = l.version, nil, nil
	if c.seg == 0 {
		return nil
	}
	expired := func(reason string) error {
		return &store.CursorError{Cursor: from, Kind: store.ErrCursorExpired, Reason: reason}
	}
	if c.seg <= l.floor {
		return expired(fmt.Sprintf("compaction purged deleted sessions up to segment %d, and the purge log no longer says which", l.floor))
	}
	given := map[string]bool{}
	for _, d := range l.dels {
		held, unknown := holds(d, c)
		if !held && !unknown {
			continue
		}
		gone, err := f.tombGone(d.Tomb)
		if err != nil {
			return err
		}
		switch {
		case !gone:
			f.unsettled = append(f.unsettled, d) // the feed shows it
		case unknown:
			return expired(fmt.Sprintf("compaction purged a deleted incarnation of session %q with its tombstone (segment %d), and the cursor's place against it is unknown", d.Key, d.Tomb.Seg))
		case !given[d.Key]:
			given[d.Key] = true
			f.pending = append(f.pending, store.Change{Kind: store.ChangeDelete, Session: d.Key})
		}
	}
	return nil
}

// seenAt says whether a consumer at c was given the frame at p: seen;
// newer if c was made in a later generation of p's segment than p (after
// the purge that recorded p, by a feed that checked the consumer
// against it); unknown if in an earlier one. group: p is a group's
// header, given once one of its changes was.
func seenAt(c *feedCursor, p compactplan.Pos, group bool) (seen, newer, unknown bool) {
	switch {
	case c.seg != p.Seg:
		return c.seg > p.Seg, false, false
	case c.gen > p.Gen:
		return false, true, false
	case c.gen < p.Gen:
		return false, false, true
	}
	return c.off > p.Off || group && c.off == p.Off && c.part > 0, false, false
}

// holds says whether a consumer at c may hold the incarnation of d: it
// was given its header and not its tombstone (unknown: the positions
// cannot tell).
func holds(d compactplan.Delete, c *feedCursor) (held, unknown bool) {
	tSeen, tNewer, tUnknown := seenAt(c, d.Tomb, false)
	if tSeen || tNewer {
		return false, false
	}
	if d.Header.Seg == 0 {
		return false, true
	}
	hSeen, hNewer, hUnknown := seenAt(c, d.Header, true)
	switch {
	case hNewer:
		return false, false
	case hUnknown:
		return false, true
	case !hSeen:
		return false, false
	case tUnknown:
		return false, true
	}
	return true, false
}

// tombGone reports whether the tombstone at t is gone: its segment
// removed, or rewritten since.
func (f *changeFeed) tombGone(t compactplan.Pos) (bool, error) {
	r, err := f.db.openSegment(t.Seg)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	return r.Header().Generation > t.Gen, nil
}

// purgesChanged returns errReposition if the purge log changed since
// the feed read it, or a tombstone it waits for is gone.
func (f *changeFeed) purgesChanged() error {
	v, err := f.db.purgeLogVersion()
	if err != nil {
		return err
	}
	if v != f.pversion {
		return errReposition
	}
	for _, d := range f.unsettled {
		gone, err := f.tombGone(d.Tomb)
		if err != nil {
			return err
		}
		if gone {
			return errReposition
		}
	}
	return nil
}

// reposition places the feed again at its position, as a new Changes
// from its cursor would, after the purge log changed: what it collected
// is dropped, and the deletes the consumer is owed are made pending.
func (f *changeFeed) reposition() error {
	from := store.Cursor("")
	if f.pos.seg != 0 {
		from = f.cursor(f.pos)
	}
	for id, r := range f.readers {
		r.Close()
		delete(f.readers, id)
	}
	f.frames = f.frames[:0]
	return f.start(from)
}

package fuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// The hostile-files table: a realistic store on real files, with its
// persistent index, damaged one way per case (each field of a segment
// header, each field and the payload of a frame, truncations, fake,
// duplicate, missing and swapped segments, a damaged, foreign, stale or
// truncated index.db). For each case:
//
//   - no panic, no fault (a fault in an mmap'd read is turned into a
//     panic in the test goroutine and reported with the case);
//   - engine.Open either succeeds and every acknowledged session reads
//     back exactly, or fails with a *CorruptionError naming the damaged
//     file; a read may fail with a *CorruptionError naming the damaged
//     file, but a session is never missing, short, or wrong without an
//     error, and a deleted session never comes back; when only the index
//     was damaged, the open succeeds and serves everything;
//   - no file that existed before the open is gone unless it is a
//     temporary, an empty prepared segment, or moved intact to
//     quarantine/; no segment but the newest is changed;
//   - a successful open is followed by a second open that succeeds too;
//   - engine.Check, on a copy of the damaged store taken before the open,
//     reports a Problem in the file the open (or a read) named, and no
//     Problem when the open needed no warning and every read succeeded.

// hsOptions are the options the store is built and opened with: tiny
// segments (many rolls), preallocated, the persistent index, no
// background compaction.
func hsOptions(l *slog.Logger) *engine.Options {
	return &engine.Options{SegmentSize: 4096, FrameBytes: 1024, CompactInterval: -1, Logger: l}
}

type hsFrame struct {
	off, size int64
	kind      segment.Kind
	keyLen    int
	stored    int
}

type hsSeg struct {
	id      uint64
	name    string
	size    int64
	version int
	gen     uint64 // the header's generation: 0 as created, more once rewritten
	sealed  bool
	frames  []hsFrame // the seal frame included
}

// events returns the non-seal frames.
func (s *hsSeg) events() []hsFrame {
	var out []hsFrame
	for _, f := range s.frames {
		if f.kind != segment.KindSeal {
			out = append(out, f)
		}
	}
	return out
}

func (s *hsSeg) seal() hsFrame {
	last := s.frames[len(s.frames)-1]
	if last.kind != segment.KindSeal {
		panic("segment " + s.name + " is not sealed")
	}
	return last
}

// hsStore is the pristine store every case copies.
type hsStore struct {
	dir     string
	logs    map[string][]event.Event // every acknowledged session, exactly
	deleted []string                 // acknowledged deletes
	segs    []*hsSeg
	// sealed is a sealed segment in the middle of the store as its writer
	// created it (generation 0), rewritten one a compaction rewrote
	// (generation 1 or more: version 2, or 3 for a version 3 one), active
	// the newest segment with frames (unsealed), prepared an empty segment
	// after it.
	sealed, rewritten, active, prepared *hsSeg
	first                               *hsSeg
	gap                                 uint64 // a segment ID below the active one that compaction removed (0 if none)
	next                                uint64 // the ID after the newest segment
	indexes                             map[string][]byte
	foreignIndex, plainBolt             []byte
}

// buildHostileStore builds the store in root/store (and another store
// and a plain bbolt file for the foreign-index cases) and records the
// acknowledged logs, the segments and their frames, and index.db as it
// was at three earlier closes.
func buildHostileStore(root string) (st *hsStore, err error) {
	ctx := context.Background()
	dir := filepath.Join(root, "store")
	st = &hsStore{dir: dir, logs: map[string][]event.Event{}, indexes: map[string][]byte{}}
	type failed struct{ err error }
	must := func(e error) {
		if e != nil {
			panic(failed{e})
		}
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failed)
			if !ok {
				panic(r)
			}
			st, err = nil, f.err
		}
	}()
	open := func() *engine.DB {
		db, e := enginetest.OpenUnchecked("the hostile table's base store: each case damages a copy and judges it (hsOpenRead, engine.Check)", dir, hsOptions(nil))
		must(e)
		return db
	}
	write := func(h *engine.Handle, n int) {
		id := h.ID()
		evs := testgen.Events(uint64(len(st.logs[id])), n, 110)
		must(h.Append(ctx, evs...))
		must(h.Flush(ctx))
		st.logs[id] = append(st.logs[id], evs...)
	}
	create := func(db *engine.DB, id string) *engine.Handle {
		h, e := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		must(e)
		st.logs[id] = []event.Event{}
		return h
	}
	saveIndex := func(name string) {
		b, e := os.ReadFile(filepath.Join(dir, "index.db"))
		must(e)
		st.indexes[name] = b
	}

	// 1. Three sessions interleaved over a few segments, and one session
	// created and flushed with no event.
	db := open()
	hs := map[string]*engine.Handle{}
	for _, id := range []string{"alpha", "beta", "gamma"} {
		hs[id] = create(db, id)
	}
	for range 5 {
		for _, id := range []string{"alpha", "beta", "gamma"} {
			write(hs[id], 3)
		}
	}
	empty := create(db, "empty")
	must(empty.Flush(ctx))
	must(empty.Close())
	for _, h := range hs {
		must(h.Close())
	}
	must(db.Close())
	saveIndex("early")

	// 2. A session written mostly on its own (segments nearly all its
	// frames, with a few of alpha's), to be deleted.
	// It starts in a fresh segment (a Compact with Roll seals the active
	// one), so that the segments holding it can all go.
	db = open()
	_, e := db.Compact(ctx, engine.CompactOptions{Roll: true})
	must(e)
	alpha, e := db.Open(ctx, "alpha", store.Write)
	must(e)
	delta := create(db, "delta")
	for i := range 20 {
		write(delta, 4)
		if i == 9 || i == 19 {
			write(alpha, 1)
		}
	}
	must(delta.Close())
	must(alpha.Close())
	must(db.Close())
	saveIndex("before-delete")

	// 3. Delete it and compact: segments with nothing alive are removed,
	// mostly dead ones rewritten (a generation of 1).
	db = open()
	must(db.Delete(ctx, "delta"))
	delete(st.logs, "delta")
	st.deleted = append(st.deleted, "delta")
	rep, e := db.Compact(ctx, engine.CompactOptions{Roll: true})
	must(e)
	if len(rep.Dropped) == 0 || len(rep.Rewritten) == 0 {
		must(fmt.Errorf("compaction dropped %v and rewrote %v: the store needs both", rep.Dropped, rep.Rewritten))
	}
	must(db.Close())
	saveIndex("after-compact")

	// 4. A few frames in the active segment: two old sessions and a new one.
	db = open()
	for _, id := range []string{"beta", "gamma"} {
		h, e := db.Open(ctx, id, store.Write)
		must(e)
		hs[id] = h
	}
	hs["eps"] = create(db, "eps")
	for range 2 {
		for _, id := range []string{"beta", "gamma", "eps"} {
			write(hs[id], 2)
		}
	}
	for _, id := range []string{"beta", "gamma", "eps"} {
		must(hs[id].Close())
	}
	must(db.Close())

	// A segment prepared for a roll that never came, as the background
	// preparer leaves one, if the close did not leave one already.
	ids, e := segment.List(vfs.Default, dir)
	must(e)
	last := ids[len(ids)-1]
	if r, e := segment.OpenReader(vfs.Default, filepath.Join(dir, segment.Name(last))); e == nil {
		res, e := r.Scan(segment.ScanOptions{}, nil)
		must(e)
		r.Close()
		if res.End > segment.HeaderSize {
			must(segment.Create(vfs.Default, filepath.Join(dir, segment.Name(last+1)), last+1, segment.CreateOptions{Size: 4096, Preallocate: true}))
		}
	}

	// The store as built reads back exactly.
	must(verifyStore(dir, st))

	// Its segments.
	ids, e = segment.List(vfs.Default, dir)
	must(e)
	for _, id := range ids {
		s := &hsSeg{id: id, name: segment.Name(id)}
		r, e := segment.OpenReader(vfs.Default, filepath.Join(dir, s.name))
		must(e)
		s.size, s.version, s.gen = r.Size(), r.Header().Version, r.Header().Generation
		res, e := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			s.frames = append(s.frames, hsFrame{off: fi.Offset, size: fi.Size, kind: fi.Kind, keyLen: len(fi.Key), stored: int(fi.StoredLen)})
			return nil
		})
		must(e)
		r.Close()
		s.sealed = res.Sealed
		st.segs = append(st.segs, s)
	}
	n := len(st.segs)
	if n < 5 {
		must(fmt.Errorf("only %d segments", n))
	}
	st.first, st.prepared, st.active = st.segs[0], st.segs[n-1], st.segs[n-2]
	st.next = st.prepared.id + 1
	if len(st.prepared.frames) != 0 || len(st.active.events()) < 3 || st.active.sealed {
		must(fmt.Errorf("the newest segments are not an active one with frames and a prepared one"))
	}
	for _, s := range st.segs[1 : n-2] {
		switch {
		case s.gen > 0 && st.rewritten == nil:
			st.rewritten = s
		case s.gen == 0 && s.sealed && len(s.events()) >= 3 && (st.sealed == nil || len(s.events()) > len(st.sealed.events())):
			st.sealed = s
		}
	}
	if st.sealed == nil || st.rewritten == nil {
		must(fmt.Errorf("no middle sealed segment or no rewritten one (%d segments)", n))
	}
	for i := 1; i < n && st.gap == 0; i++ {
		if st.segs[i].id != st.segs[i-1].id+1 {
			st.gap = st.segs[i-1].id + 1
		}
	}

	// A seglog index of another store, and a bbolt file of another program.
	other := filepath.Join(root, "other")
	odb, e := enginetest.OpenUnchecked("the foreign index the hostile table's cases put in a damaged copy", other, hsOptions(nil))
	must(e)
	h, e := odb.Create(ctx, store.Header{ID: "zzz", CreatedAt: 1})
	must(e)
	must(h.Append(ctx, testgen.Events(0, 5, 100)...))
	must(h.Close())
	must(odb.Close())
	st.foreignIndex, e = os.ReadFile(filepath.Join(other, "index.db"))
	must(e)
	bdb, e := bolt.Open(filepath.Join(root, "plain.db"), 0o644, nil)
	must(e)
	must(bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		for i := range 200 {
			if err := b.Put(fmt.Appendf(nil, "key-%04d", i), bytes.Repeat([]byte{byte(i)}, 50)); err != nil {
				return err
			}
		}
		return nil
	}))
	must(bdb.Close())
	st.plainBolt, e = os.ReadFile(filepath.Join(root, "plain.db"))
	must(e)
	return st, err
}

// verifyStore opens dir read-only and checks every session reads back
// exactly.
func verifyStore(dir string, st *hsStore) error {
	ctx := context.Background()
	o := hsOptions(nil)
	o.ReadOnly = true
	db, err := enginetest.OpenUnchecked("a read-only verify of a hostile case's copy, which the case judges", dir, o)
	if err != nil {
		return err
	}
	defer db.Close()
	for id, want := range st.logs {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			return err
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			return err
		}
		if !sameEvents(got, want) {
			return fmt.Errorf("session %s: %d events read, %d written", id, len(got), len(want))
		}
	}
	return nil
}

// hsCase is one way of damaging the store.
type hsCase struct {
	name   string
	short  bool                   // run by default (every case with SEGLOG_LONG=1)
	damage func(dir string) error // applied to a copy of the store
	files  []string               // the damaged files: an error must name one of them
	off    int64                  // the offset a *CorruptionError in files[0] must give; -1: any
	index  bool                   // only the index is damaged: the open must succeed and serve everything
	benign bool                   // nothing acknowledged is touched: the open must succeed and serve everything
	note   string                 // what is expected, for the log
}

// Damage primitives.

func hsEdit(name string, f func(b []byte) []byte) func(dir string) error {
	return func(dir string) error {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(p, f(b), 0o644)
	}
}

func hsFlip(name string, off int64) func(dir string) error {
	return hsEdit(name, func(b []byte) []byte {
		b[off] ^= 0x01
		return b
	})
}

func hsZero(name string, off, n int64) func(dir string) error {
	return hsEdit(name, func(b []byte) []byte {
		clear(b[off : off+n])
		return b
	})
}

func hsTruncate(name string, size int64) func(dir string) error {
	return func(dir string) error { return os.Truncate(filepath.Join(dir, name), size) }
}

func hsWrite(name string, b []byte) func(dir string) error {
	return func(dir string) error { return os.WriteFile(filepath.Join(dir, name), b, 0o644) }
}

func hsRemove(name string) func(dir string) error {
	return func(dir string) error { return os.Remove(filepath.Join(dir, name)) }
}

func hsCopy(from, to string) func(dir string) error {
	return func(dir string) error {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, to), b, 0o644)
	}
}

func hsSwap(a, b string) func(dir string) error {
	return func(dir string) error {
		pa, pb := filepath.Join(dir, a), filepath.Join(dir, b)
		ba, err := os.ReadFile(pa)
		if err != nil {
			return err
		}
		bb, err := os.ReadFile(pb)
		if err != nil {
			return err
		}
		if err := os.WriteFile(pa, bb, 0o644); err != nil {
			return err
		}
		return os.WriteFile(pb, ba, 0o644)
	}
}

func hsRandom(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// hsHeaderFields are the fields of the 64-byte segment header.
var hsHeaderFields = []struct {
	name   string
	off, n int64
}{
	{"magic", 0, 8}, {"version", 8, 2}, {"header-length", 10, 2}, {"reserved1", 12, 4},
	{"id", 16, 8}, {"created", 24, 8}, {"generation", 32, 8}, {"reserved2", 40, 16}, {"checksum", 56, 8},
}

// hsFrameFields are the fields of a frame; key and payload are sized by
// the frame.
func hsFrameFields(f hsFrame) []struct {
	name   string
	off, n int64
} {
	fs := []struct {
		name   string
		off, n int64
	}{
		{"magic", 0, 4}, {"kind", 4, 1}, {"codec", 5, 1}, {"key-length", 6, 2}, {"stored-length", 8, 4},
		{"raw-length", 12, 4}, {"first-seq", 16, 8}, {"count", 24, 4}, {"base", 28, 4}, {"checksum", 32, 8},
	}
	if f.keyLen > 0 {
		fs = append(fs, struct {
			name   string
			off, n int64
		}{"key", 40, int64(f.keyLen)})
	}
	if f.stored > 0 {
		fs = append(fs, struct {
			name   string
			off, n int64
		}{"payload", 40 + int64(f.keyLen), int64(f.stored)})
	}
	return fs
}

func hostileCases(st *hsStore) []hsCase {
	var cs []hsCase
	add := func(c hsCase) {
		if c.files == nil {
			c.files = []string{}
		}
		cs = append(cs, c)
	}
	segs := []struct {
		role string
		s    *hsSeg
	}{{"sealed", st.sealed}, {"rewritten", st.rewritten}, {"active", st.active}}

	// Segment headers: every field flipped and zeroed.
	for _, sg := range append(segs, struct {
		role string
		s    *hsSeg
	}{"prepared", st.prepared}) {
		for _, f := range hsHeaderFields {
			for _, how := range []string{"flip", "zero"} {
				c := hsCase{
					name:  fmt.Sprintf("header/%s/%s/%s", sg.role, f.name, how),
					short: how == "flip" && sg.role != "rewritten",
					files: []string{sg.s.name},
					off:   0,
					// A prepared segment holds nothing acknowledged.
					benign: sg.s == st.prepared,
				}
				if how == "flip" {
					c.damage = hsFlip(sg.s.name, f.off)
				} else {
					c.damage = hsZero(sg.s.name, f.off, f.n)
				}
				add(c)
			}
		}
	}

	// Frames: first, middle and last frame of each segment, every field
	// flipped; the header fields zeroed too.
	for _, sg := range segs {
		evs := sg.s.events()
		picks := []struct {
			name string
			f    hsFrame
		}{{"first", evs[0]}, {"middle", evs[len(evs)/2]}, {"last", evs[len(evs)-1]}}
		for _, p := range picks {
			for _, f := range hsFrameFields(p.f) {
				mid := p.f.off + f.off + f.n/2
				add(hsCase{
					name:   fmt.Sprintf("frame/%s/%s/%s/flip", sg.role, p.name, f.name),
					short:  p.name == "middle" || (p.name == "last" && sg.role == "active"),
					damage: hsFlip(sg.s.name, mid),
					files:  []string{sg.s.name},
					off:    p.f.off,
				})
				if f.name == "payload" || f.name == "key" {
					continue
				}
				add(hsCase{
					name:   fmt.Sprintf("frame/%s/%s/%s/zero", sg.role, p.name, f.name),
					damage: hsZero(sg.s.name, p.f.off+f.off, f.n),
					files:  []string{sg.s.name},
					off:    p.f.off,
				})
			}
			add(hsCase{
				name:   fmt.Sprintf("frame/%s/%s/whole/zero", sg.role, p.name),
				short:  true,
				damage: hsZero(sg.s.name, p.f.off, p.f.size),
				files:  []string{sg.s.name},
				off:    p.f.off,
			})
		}
		if sg.s.sealed {
			seal := sg.s.seal()
			for _, f := range hsFrameFields(seal)[:10] {
				add(hsCase{
					name:   fmt.Sprintf("seal/%s/%s/flip", sg.role, f.name),
					short:  f.name == "kind" || f.name == "count",
					damage: hsFlip(sg.s.name, seal.off+f.off+f.n/2),
					files:  []string{sg.s.name},
					off:    seal.off,
				})
			}
			add(hsCase{
				name:   fmt.Sprintf("seal/%s/whole/zero", sg.role),
				short:  true,
				damage: hsZero(sg.s.name, seal.off, seal.size),
				files:  []string{sg.s.name},
				off:    seal.off,
			})
		}
	}

	// Truncations.
	for _, sg := range segs {
		evs := sg.s.events()
		midF, lastF := evs[len(evs)/2], evs[len(evs)-1]
		points := []struct {
			name string
			size int64
		}{
			{"mid-frame", midF.off + midF.size/2},
			{"frame-boundary", midF.off},
			{"before-last-frame", lastF.off},
			{"mid-last-frame", lastF.off + lastF.size/2},
			{"header-only", segment.HeaderSize},
			{"mid-header", 30},
			{"zero-bytes", 0},
		}
		if sg.s.sealed {
			points = append(points, struct {
				name string
				size int64
			}{"before-seal", sg.s.seal().off})
		}
		for _, p := range points {
			add(hsCase{
				name:   fmt.Sprintf("truncate/%s/%s", sg.role, p.name),
				short:  p.name != "mid-last-frame" && p.name != "mid-header",
				damage: hsTruncate(sg.s.name, p.size),
				files:  []string{sg.s.name},
				off:    -1,
			})
		}
	}
	endActive := lastEnd(st.active)
	add(hsCase{
		name: "truncate/active/zero-fill-cut", short: true, benign: true,
		damage: hsTruncate(st.active.name, endActive), off: -1,
		note: "the preallocated zeros after the last frame: nothing acknowledged",
	})
	add(hsCase{
		name: "truncate/prepared/zero-bytes", short: true, benign: true,
		damage: hsTruncate(st.prepared.name, 0), files: []string{st.prepared.name}, off: -1,
		note: "an empty prepared segment cut to nothing: not a segment, quarantined",
	})

	// The active segment as the newest file (no prepared segment after it).
	noPrep := func(f func(string) error) func(string) error {
		return func(dir string) error {
			if err := os.Remove(filepath.Join(dir, st.prepared.name)); err != nil {
				return err
			}
			return f(dir)
		}
	}
	aEvs := st.active.events()
	add(hsCase{name: "newest-active/last-frame/payload/flip", short: true,
		damage: noPrep(hsFlip(st.active.name, aEvs[len(aEvs)-1].off+44)), files: []string{st.active.name}, off: aEvs[len(aEvs)-1].off})
	add(hsCase{name: "newest-active/middle-frame/checksum/zero", short: true,
		damage: noPrep(hsZero(st.active.name, aEvs[len(aEvs)/2].off+32, 8)), files: []string{st.active.name}, off: aEvs[len(aEvs)/2].off})
	add(hsCase{name: "newest-active/truncate/mid-last-frame", short: true,
		damage: noPrep(hsTruncate(st.active.name, aEvs[len(aEvs)-1].off+20)), files: []string{st.active.name}, off: -1})
	add(hsCase{name: "newest-active/truncate/header-only", short: true,
		damage: noPrep(hsTruncate(st.active.name, segment.HeaderSize)), files: []string{st.active.name}, off: -1})
	add(hsCase{name: "newest-active/header/checksum/flip", short: true,
		damage: noPrep(hsFlip(st.active.name, 60)), files: []string{st.active.name}, off: 0})
	add(hsCase{name: "newest-active/zero-fill-cut", benign: true,
		damage: noPrep(hsTruncate(st.active.name, endActive))})

	// Fake segments.
	next := segment.Name(st.next)
	text := []byte(strings.Repeat("this is not a segment, just a text file someone saved here\n", 40))
	hdrOnly := func(id uint64) []byte {
		b, _ := os.ReadFile(filepath.Join(st.dir, st.prepared.name))
		b = slices.Clone(b[:segment.HeaderSize])
		binary.LittleEndian.PutUint64(b[16:], id)
		binary.LittleEndian.PutUint64(b[56:], xxh64(b[:56]))
		return b
	}
	add(hsCase{name: "fake/next/random-bytes", short: true, benign: true, damage: hsWrite(next, hsRandom(4096, 1)), files: []string{next}, off: -1})
	add(hsCase{name: "fake/next/text-file", short: true, benign: true, damage: hsWrite(next, text), files: []string{next}, off: -1})
	add(hsCase{name: "fake/next/empty-file", benign: true, damage: hsWrite(next, nil), files: []string{next}, off: -1})
	add(hsCase{name: "fake/next/zeros", benign: true, damage: hsWrite(next, make([]byte, 4096)), files: []string{next}, off: -1})
	add(hsCase{name: "fake/next/valid-header-no-frame", benign: true, damage: hsWrite(next, hdrOnly(st.next)), files: []string{next}, off: -1})
	add(hsCase{name: "fake/next/valid-header-wrong-id", damage: hsWrite(next, hdrOnly(st.next+40)), files: []string{next}, off: 0})
	add(hsCase{name: "fake/far-next/random-bytes", benign: true, damage: hsWrite(segment.Name(st.next+1000), hsRandom(1000, 2)), files: []string{segment.Name(st.next + 1000)}, off: -1})
	if st.gap != 0 {
		g := segment.Name(st.gap)
		add(hsCase{name: "fake/gap/random-bytes", short: true, damage: hsWrite(g, hsRandom(4096, 3)), files: []string{g}, off: 0})
		add(hsCase{name: "fake/gap/text-file", damage: hsWrite(g, text), files: []string{g}, off: 0})
		add(hsCase{name: "fake/gap/valid-header-no-frame", damage: hsWrite(g, hdrOnly(st.gap)), files: []string{g}, off: -1})
		add(hsCase{name: "duplicate/first-as-gap", short: true, damage: hsCopy(st.first.name, g), files: []string{g}, off: 0})
	}
	add(hsCase{name: "fake/middle/random-bytes", short: true, damage: hsWrite(st.sealed.name, hsRandom(4096, 4)), files: []string{st.sealed.name}, off: 0})
	add(hsCase{name: "fake/middle/text-file", damage: hsWrite(st.sealed.name, text), files: []string{st.sealed.name}, off: 0})
	add(hsCase{name: "fake/active/random-bytes", damage: hsWrite(st.active.name, hsRandom(4096, 5)), files: []string{st.active.name}, off: 0})
	add(hsCase{name: "temporary/create", short: true, benign: true, damage: hsWrite(segment.TempName(st.next), hsRandom(300, 6))})
	add(hsCase{name: "temporary/rewrite", short: true, benign: true, damage: hsCopy(st.sealed.name, segment.RewriteName(st.sealed.id))})

	// Duplicates, missing, swapped.
	add(hsCase{name: "duplicate/first-as-next", short: true, damage: hsCopy(st.first.name, next), files: []string{next}, off: 0})
	add(hsCase{name: "duplicate/first-over-middle", short: true, damage: hsCopy(st.first.name, st.sealed.name), files: []string{st.sealed.name}, off: 0})
	add(hsCase{name: "duplicate/sealed-over-active", damage: hsCopy(st.sealed.name, st.active.name), files: []string{st.active.name}, off: 0})
	add(hsCase{name: "duplicate/active-as-next", damage: hsCopy(st.active.name, next), files: []string{next}, off: 0})
	add(hsCase{name: "missing/middle", short: true, damage: hsRemove(st.sealed.name), files: []string{st.sealed.name}, off: -1})
	add(hsCase{name: "missing/first", damage: hsRemove(st.first.name), files: []string{st.first.name}, off: -1})
	add(hsCase{name: "missing/rewritten", damage: hsRemove(st.rewritten.name), files: []string{st.rewritten.name}, off: -1})
	add(hsCase{name: "missing/active", short: true, damage: hsRemove(st.active.name), files: []string{st.active.name}, off: -1})
	add(hsCase{name: "missing/prepared", short: true, benign: true, damage: hsRemove(st.prepared.name)})
	add(hsCase{name: "missing/active-and-prepared", damage: func(dir string) error {
		if err := os.Remove(filepath.Join(dir, st.prepared.name)); err != nil {
			return err
		}
		return os.Remove(filepath.Join(dir, st.active.name))
	}, files: []string{st.active.name}, off: -1})
	add(hsCase{name: "swapped/first-and-middle", short: true, damage: hsSwap(st.first.name, st.sealed.name), files: []string{st.first.name, st.sealed.name}, off: 0})
	add(hsCase{name: "swapped/middle-and-rewritten", damage: hsSwap(st.sealed.name, st.rewritten.name), files: []string{st.sealed.name, st.rewritten.name}, off: 0})
	add(hsCase{name: "swapped/middle-and-active", short: true, damage: hsSwap(st.sealed.name, st.active.name), files: []string{st.sealed.name, st.active.name}, off: 0})
	add(hsCase{name: "swapped/active-and-prepared", damage: hsSwap(st.active.name, st.prepared.name), files: []string{st.active.name, st.prepared.name}, off: 0})

	// The index.
	const idx = "index.db"
	ib, _ := os.ReadFile(filepath.Join(st.dir, idx))
	pages := int64(len(ib)) / 4096
	for p := range pages {
		for _, at := range []struct {
			name string
			off  int64
		}{{"page-header", 8}, {"page-body", 16 + 9}, {"page-end", 4096 - 100}} {
			add(hsCase{
				name:   fmt.Sprintf("index/page-%d/%s/flip", p, at.name),
				short:  p < 4 && at.name != "page-end",
				damage: hsFlip(idx, p*4096+at.off), files: []string{idx}, off: -1, index: true,
			})
		}
	}
	add(hsCase{name: "index/every-page/flip", short: true, damage: hsEdit(idx, func(b []byte) []byte {
		for p := 0; p+4096 <= len(b); p += 4096 {
			b[p+20] ^= 0x5a
		}
		return b
	}), files: []string{idx}, off: -1, index: true})
	add(hsCase{name: "index/meta-pages/zero", short: true, damage: hsZero(idx, 0, 8192), files: []string{idx}, off: -1, index: true})
	for _, tr := range []struct {
		name string
		size int64
	}{{"half", int64(len(ib)) / 2}, {"one-page", 4096}, {"two-pages", 8192}, {"100-bytes", 100}, {"one-page-plus", 4097}, {"last-page-off", int64(len(ib)) - 4096}, {"zero-length", 0}} {
		add(hsCase{name: "index/truncate/" + tr.name, short: tr.name != "one-page-plus", damage: hsTruncate(idx, tr.size), files: []string{idx}, off: -1, index: true})
	}
	add(hsCase{name: "index/foreign/seglog-index-of-another-store", short: true, damage: hsWrite(idx, st.foreignIndex), files: []string{idx}, off: -1, index: true})
	add(hsCase{name: "index/foreign/plain-bbolt-file", short: true, damage: hsWrite(idx, st.plainBolt), files: []string{idx}, off: -1, index: true})
	add(hsCase{name: "index/foreign/random-bytes", damage: hsWrite(idx, hsRandom(32768, 8)), files: []string{idx}, off: -1, index: true})
	add(hsCase{name: "index/foreign/text-file", damage: hsWrite(idx, text), files: []string{idx}, off: -1, index: true})
	for _, name := range []string{"early", "before-delete", "after-compact"} {
		add(hsCase{name: "index/stale/" + name, short: true, damage: hsWrite(idx, st.indexes[name]), files: []string{idx}, off: -1, index: true})
	}
	add(hsCase{name: "index/missing", short: true, damage: hsRemove(idx), off: -1, index: true})
	return cs
}

func lastEnd(s *hsSeg) int64 {
	f := s.frames[len(s.frames)-1]
	return f.off + f.size
}

func xxh64(b []byte) uint64 { return xxhash.Sum64(b) }

// hsLog records the warnings an open logs.
type hsLog struct {
	mu    sync.Mutex
	warns []string
}

func (l *hsLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *hsLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.warns = append(l.warns, b.String())
	l.mu.Unlock()
	return nil
}
func (l *hsLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *hsLog) WithGroup(string) slog.Handler      { return l }

func (l *hsLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.warns)
}

// hsFiles lists a store: top-level files (but LOCK) and quarantine/.
func hsFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, sub := range []string{"", engine.QuarantineDir} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, os.ErrNotExist) && sub != "" {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || e.Name() == "LOCK" {
				continue
			}
			name := filepath.Join(sub, e.Name())
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			out[name] = b
		}
	}
	return out, nil
}

// hsOutcome is what the open and the reads did.
type hsOutcome struct {
	openErr  error
	warns    []string
	readErr  map[string]error // sessions whose read failed
	intact   map[string]bool  // sessions read back exactly
	failures []string         // broken promises
	known    bool             // a failure listed in hsKnown
}

func (o *hsOutcome) fail(format string, args ...any) {
	o.failures = append(o.failures, fmt.Sprintf(format, args...))
}

// rel is p relative to dir ("." for dir itself).
func rel(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return r
}

// namesFile reports whether err names one of files (relative to dir),
// and the offset a *CorruptionError gives.
func namesFile(dir string, err error, files []string) (string, int64, bool) {
	var ce *store.CorruptionError
	if errors.As(err, &ce) {
		r := rel(dir, ce.Path)
		return r, ce.Offset, slices.Contains(files, r)
	}
	var fe *store.FormatError
	if errors.As(err, &fe) {
		r := rel(dir, fe.Path)
		return r, 0, slices.Contains(files, r)
	}
	for _, f := range files {
		if strings.Contains(err.Error(), f) {
			return f, -1, true
		}
	}
	return "", -1, false
}

// hsOpenRead opens dir and reads every session, in this goroutine, with
// faults turned into panics; a panic is a failure.
func hsOpenRead(dir string, st *hsStore, c *hsCase, out *hsOutcome) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			out.fail("panic: %v\n%s", r, debug.Stack())
		}
	}()
	ctx := context.Background()
	log := &hsLog{}
	db, err := enginetest.OpenUnchecked("a hostile case's damaged copy, which the case judges against its table row", dir, hsOptions(slog.New(log)))
	out.warns = log.list()
	out.readErr, out.intact = map[string]error{}, map[string]bool{}
	if err != nil {
		out.openErr = err
		return
	}
	defer func() {
		if err := db.Close(); err != nil {
			out.fail("Close: %v", err)
		}
		out.warns = log.list()
	}()
	snaps, err := db.List(ctx)
	if err != nil {
		out.fail("List: %v", err)
	}
	for _, s := range snaps {
		if _, ok := st.logs[s.Header.ID]; !ok {
			out.fail("List shows session %q, which is not in the store (deleted, or never written)", s.Header.ID)
		}
	}
	for _, id := range st.deleted {
		if _, err := db.Open(ctx, id, store.Read); !errors.Is(err, store.ErrSessionNotFound) {
			out.fail("deleted session %q: open gave %v, want not found", id, err)
		}
	}
	for _, id := range sortedKeys((st.logs)) {
		want := st.logs[id]
		h, err := db.Open(ctx, id, store.Read)
		var got []event.Event
		if err == nil {
			got, err = h.Read(ctx, 0, -1)
			h.Close()
		}
		switch {
		case err != nil && errors.Is(err, store.ErrSessionNotFound):
			out.fail("session %q (%d events) is missing without a corruption error: %v", id, len(want), err)
		case err != nil:
			out.readErr[id] = err
		case len(got) != len(want):
			out.fail("session %q: %d events read without error, %d acknowledged", id, len(got), len(want))
		case !sameEvents(got, want):
			out.fail("session %q: wrong events returned", id)
		default:
			out.intact[id] = true
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func runHostileCase(t *testing.T, st *hsStore, c *hsCase) {
	root := t.TempDir()
	dir, checkDir := filepath.Join(root, "store"), filepath.Join(root, "check")
	if err := copyDir(st.dir, dir); err != nil {
		t.Fatal(err)
	}
	if err := c.damage(dir); err != nil {
		t.Fatalf("damaging the store: %v", err)
	}
	if err := copyDir(dir, checkDir); err != nil {
		t.Fatal(err)
	}
	before, err := hsFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	pristine, err := hsFiles(st.dir)
	if err != nil {
		t.Fatal(err)
	}
	benign := c.benign || sameFiles(before, pristine)

	out := &hsOutcome{}
	hsOpenRead(dir, st, c, out)
	describe := func() string {
		s := fmt.Sprintf("open error: %v", out.openErr)
		for _, id := range sortedKeys((out.readErr)) {
			s += fmt.Sprintf("\n  read %s: %v", id, out.readErr[id])
		}
		for _, w := range out.warns {
			s += "\n  warning: " + w
		}
		return s
	}
	if c.note != "" {
		t.Logf("expected: %s", c.note)
	}
	t.Logf("%s", describe())

	// What the open and the reads returned.
	var named []string // files the errors named
	if out.openErr != nil {
		if c.index || benign {
			out.fail("open failed although nothing acknowledged was damaged (%s): %v", map[bool]string{true: "index only", false: "benign"}[c.index], out.openErr)
		} else if f, off, ok := namesFile(dir, out.openErr, c.files); !ok {
			out.fail("open failed with an error that names none of %v: %v", c.files, out.openErr)
		} else {
			named = append(named, f)
			if c.off >= 0 && f == c.files[0] && off >= 0 && off != c.off {
				out.fail("open: corruption reported at offset %d, the damage is at %d: %v", off, c.off, out.openErr)
			}
			if !typed(out.openErr) {
				out.fail("open: untyped error %v", out.openErr)
			}
		}
	}
	for id, err := range out.readErr {
		var ce *store.CorruptionError
		var fe *store.FormatError
		switch {
		case c.index || benign:
			out.fail("read %s failed although nothing acknowledged was damaged: %v", id, err)
		default:
			f, off, ok := namesFile(dir, err, c.files)
			if !ok {
				out.fail("read %s: the error names none of %v: %v", id, c.files, err)
				continue
			}
			named = append(named, f)
			if !errors.As(err, &ce) && !errors.As(err, &fe) {
				out.fail("read %s: not a *CorruptionError: %v", id, err)
			} else if c.off >= 0 && f == c.files[0] && off != c.off {
				out.fail("read %s: corruption reported at offset %d, the damage is at %d: %v", id, off, c.off, err)
			}
		}
	}

	slices.Sort(named)
	named = slices.Compact(named)

	// What the open did to the files.
	after, err := hsFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	hsCheckFiles(before, after, out)

	// A store that opened opens again, and serves at least as much.
	if out.openErr == nil {
		again := &hsOutcome{}
		hsOpenRead(dir, st, c, again)
		switch {
		case again.openErr != nil:
			out.fail("second open failed: %v", again.openErr)
		default:
			for id := range out.intact {
				if !again.intact[id] {
					out.fail("second open: session %q no longer reads back (%v)", id, again.readErr[id])
				}
			}
			for _, f := range again.failures {
				out.fail("second open: %s", f)
			}
		}
	}

	// Check, on the copy taken before the open.
	rep, err := engine.Check(checkDir, hsOptions(nil))
	switch {
	case err != nil:
		out.fail("Check: %v", err)
	default:
		var probs []string
		for _, p := range rep.Problems {
			probs = append(probs, p.String())
		}
		t.Logf("check: %d problems, notes %q\n  %s", len(rep.Problems), rep.Notes, strings.Join(probs, "\n  "))
		has := func(f string) bool {
			for _, p := range rep.Problems {
				if rel(checkDir, p.Path) == f {
					return true
				}
			}
			return false
		}
		for _, f := range named {
			if !has(f) {
				out.fail("Check reports no problem in %s, where the open or a read found damage", f)
			}
		}
		switch {
		case benign || c.index:
			if out.openErr == nil && len(out.warns) == 0 && len(out.readErr) == 0 && len(rep.Problems) > 0 {
				out.fail("Check reports problems in a store that opened without a warning and read back whole: %s", strings.Join(probs, "; "))
			}
		case len(named) == 0:
			// Damage that neither the open nor a read met (a frame whose
			// session the index serves without it, a file the open does
			// not read): Check, which reads everything, reports it.
			found := false
			for _, f := range c.files {
				found = found || has(f)
			}
			if !found {
				out.fail("the damage to %v went unreported: the open and every read succeeded, and Check reports no problem in it", c.files)
			}
		}
	}

	if k, ok := hsKnown[c.name]; ok {
		all := strings.Join(out.failures, "\n")
		switch {
		case len(out.failures) == 0:
			t.Errorf("known failure (%s) no longer fails: remove it from hsKnown", k.why)
		case !strings.Contains(all, k.match):
			t.Errorf("known failure (%s) fails another way: %s", k.why, all)
		default:
			t.Logf("KNOWN FAILURE (%s):\n%s", k.why, all)
			out.known = true
			out.failures = nil
		}
	}
	for _, f := range out.failures {
		t.Errorf("%s", f)
	}
	hsRecord(c.name, out)
}

// hsKnown are the cases the engine fails today by design, each with what
// its failure must say (so a change of behaviour shows). An index restored
// from an older copy of the same store (its checkpoint's segment is the
// store's own) that claims a session deleted and compacted away since
// proves, to the open, that acknowledged data was lost; seglog check
// --repair overrules it. (An index of another store is told apart by its
// checkpoint's segment and set aside.)
var hsKnown = map[string]struct{ why, match string }{
	"index/stale/before-delete": {
		why:   "an index.db saved before a delete and a compaction claims the deleted session, whose frames and tombstone compaction removed",
		match: `session "delta" (80 events) is in the index but not in the segments`,
	},
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for n, x := range a {
		if y, ok := b[n]; !ok || !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// hsCheckFiles checks that every file present before the open is still
// there unchanged, or was moved intact to quarantine/, or is something the
// engine may remove (a temporary, an empty prepared segment) or change
// (the index, the newest segment's tail).
func hsCheckFiles(before, after map[string][]byte, out *hsOutcome) {
	var newest uint64
	for n := range before {
		if id, ok := segment.ParseName(n); ok {
			newest = max(newest, id)
		}
	}
	quarantined := func(name string, b []byte) bool {
		for n, q := range after {
			if strings.HasPrefix(n, engine.QuarantineDir+string(filepath.Separator)+name+".") && bytes.Equal(q, b) {
				return true
			}
		}
		return false
	}
	for _, n := range sortedKeys((before)) {
		b := before[n]
		a, ok := after[n]
		switch {
		case ok && bytes.Equal(a, b):
		case quarantined(n, b):
		case segment.IsTemporary(n) && !ok:
		case n == "index.db" && ok:
			// The index is the engine's cache: checkpoints rewrite it.
		case (n == "shm" || n == "locks" || n == "LOCK") && ok:
			// Coordination between processes, not data: every open
			// writes them.
		case !ok && emptyPrepared(n, b):
		case !ok:
			out.fail("%s was removed and is not in %s/", n, engine.QuarantineDir)
		default:
			id, _ := segment.ParseName(n)
			if out.openErr != nil {
				out.fail("%s was changed by an open that failed", n)
			} else if id != newest && !emptyPrepared(n, b) {
				// The newest segment with frames may be the one before an
				// empty prepared one.
				if !(id < newest && emptyPrepared(segment.Name(newest), before[segment.Name(newest)]) && after[segment.Name(newest)] == nil) {
					out.fail("%s, not the newest segment, was changed", n)
				}
			}
		}
	}
	for n := range after {
		if _, ok := before[n]; ok || strings.HasPrefix(n, engine.QuarantineDir) {
			continue
		}
		if id, ok := segment.ParseName(n); ok && id <= newest {
			out.fail("the open created %s, a name a segment already had", n)
		}
	}
}

// emptyPrepared reports whether b is a segment named n with a valid header
// naming it and nothing but zeros after.
func emptyPrepared(n string, b []byte) bool {
	id, ok := segment.ParseName(n)
	if !ok {
		return false
	}
	h, err := segment.DecodeHeader(n, b)
	if err != nil || h.ID != id {
		return false
	}
	for _, x := range b[segment.HeaderSize:] {
		if x != 0 {
			return false
		}
	}
	return true
}

var (
	hsResultsMu sync.Mutex
	hsResults   = map[string][]string{}
)

func hsRecord(name string, out *hsOutcome) {
	kind := "opened, all intact"
	switch {
	case len(out.failures) > 0:
		kind = "FAILED"
	case out.known:
		kind = "KNOWN FAILURE (hsKnown)"
	case out.openErr != nil:
		kind = "open refused (names the file)"
	case len(out.readErr) > 0:
		kind = "opened, reads refused (name the file)"
	case len(out.warns) > 0:
		kind = "opened with warnings, all intact"
	}
	hsResultsMu.Lock()
	hsResults[kind] = append(hsResults[kind], name)
	hsResultsMu.Unlock()
}

// TestHostileFiles runs the hostile-files table: by default (and with
// -short) the cases marked short, 150 of 448: each field of a segment
// header flipped in a sealed, the active and the prepared segment, each
// field of a middle frame of each kind of segment, and some of every other
// kind of damage; the whole table with SEGLOG_LONG=1.
func TestHostileFiles(t *testing.T) {
	st, err := buildHostileStore(t.TempDir())
	if err != nil {
		t.Fatalf("building the store: %v", err)
	}
	t.Logf("store: %d segments (sealed %s, rewritten %s, active %s, prepared %s, gap %d), sessions %d",
		len(st.segs), st.sealed.name, st.rewritten.name, st.active.name, st.prepared.name, st.gap, len(st.logs))
	cases := hostileCases(st)
	ran := 0
	for i := range cases {
		c := &cases[i]
		if !testlong.On() && !c.short {
			continue
		}
		ran++
		t.Run(c.name, func(t *testing.T) { runHostileCase(t, st, c) })
	}
	kinds := sortedKeys((hsResults))
	sort.SliceStable(kinds, func(i, j int) bool { return kinds[i] == "FAILED" })
	for _, k := range kinds {
		t.Logf("%s: %d", k, len(hsResults[k]))
	}
	t.Logf("%d cases", ran)
}

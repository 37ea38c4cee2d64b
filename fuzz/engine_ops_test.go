package fuzz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// model is what the engine must hold for one session.
type model struct {
	appended []event.Event // every event whose append was attempted, in order
	flushed  int           // the prefix a successful flush acknowledged
	visible  int           // the prefix other handles read (enqueued events are not, until appended)
	created  bool          // created in this instance and not yet written
	stored   bool          // known to be on disk (a flush acknowledged it)
	gone     bool          // a creator closed it untouched: it must not exist
	deleted  bool          // an acknowledged Delete removed it (durably) and it was not created again
}

// opsRun drives one script against the engine and the model.
type opsRun struct {
	t     *testing.T
	ctx   context.Context
	mem   *vfs.MemFS
	clock *testclock.Clock
	db    *engine.DB
	hs    map[string]*engine.Handle
	m     map[string]*model
	revs  map[string]string // last revision seen, with the event count it was seen at
	revN  map[string]uint64
	// indexed: the store keeps a persistent bbolt index in the real file
	// index (the segments stay on mem); a power cut copies the file as it
	// is then for the reopened store. Empty without an index.
	index   string
	indexed bool
	copies  int  // index files made so far, for their names
	dirty   bool // an operation ran since the last waitCheckpoint
	bulks   int  // bulk appends so far (at most 4 a script, to keep it fast)
	// segSize and uncompressed: the indexed target's first byte picks
	// them; a segment larger than the writer's 1 MiB buffer lets a bulk
	// append spill, the only way written frames stay unsynced.
	segSize      int64
	uncompressed bool
}

var ids = []string{"s0", "s1", "s2"}

func (r *opsRun) open() {
	r.t.Helper()
	opts := &engine.Options{FS: r.mem, SegmentSize: r.segSize, FrameBytes: 1 << 10, AfterFunc: r.clock.AfterFunc, NoPreallocate: true,
		Uncompressed: r.uncompressed}
	if r.indexed {
		// Checkpoints every millisecond (and at every Compact and Close)
		// interleave with the script; no background compaction, so that
		// nothing but checkpoints runs between the index copy and the
		// segments' crash clone of a power cut.
		opts.IndexPath, opts.IndexInterval, opts.CompactInterval = r.index, time.Millisecond, -1
	}
	db, err := enginetest.OpenStore(r.t, "/db", opts)
	if err != nil {
		r.t.Fatalf("open: %v", err)
	}
	r.db, r.hs = db, map[string]*engine.Handle{}
}

func (r *opsRun) mod(id string) *model {
	if r.m[id] == nil {
		r.m[id] = &model{}
	}
	return r.m[id]
}

// check compares every session's stored log with the model. After a
// crash (loose), the log may hold any prefix of what was appended that is
// at least the flushed prefix; otherwise it must hold exactly what was
// appended.
func (r *opsRun) check(loose bool) {
	r.t.Helper()
	for _, id := range ids {
		m := r.mod(id)
		h, err := r.db.Open(r.ctx, id, store.Read)
		if err == nil && m.deleted {
			r.t.Fatalf("session %s is back after its acknowledged Delete (loose %v)", id, loose)
		}
		if errors.Is(err, store.ErrSessionNotFound) {
			if m.stored || (!loose && len(m.appended) > 0) {
				r.t.Fatalf("session %s missing (stored %v, %d appended, %d flushed)", id, m.stored, len(m.appended), m.flushed)
			}
			if loose {
				m.appended, m.flushed = nil, 0
			}
			continue
		}
		if err != nil {
			r.t.Fatalf("open %s: %v", id, err)
		}
		if m.gone && !loose {
			r.t.Fatalf("session %s exists after its creator closed it untouched", id)
		}
		got, err := h.Read(r.ctx, 0, -1)
		if err != nil {
			r.t.Fatalf("read %s: %v", id, err)
		}
		if len(got) < m.flushed || len(got) > len(m.appended) || (!loose && len(got) != len(m.appended)) {
			r.t.Fatalf("session %s holds %d events; %d appended, %d flushed (loose %v)", id, len(got), len(m.appended), m.flushed, loose)
		}
		for i := range got {
			if !sameEvent(got[i], m.appended[i]) {
				r.t.Fatalf("session %s event %d differs from what was appended", id, i)
			}
		}
		if loose {
			m.appended, m.flushed = m.appended[:len(got)], len(got)
			m.stored = true
			m.gone = false
		}
		h.Close()
	}
}

// checkRevisions: a revision changes exactly when the event count does.
func (r *opsRun) checkRevisions() {
	r.t.Helper()
	for _, id := range ids {
		snap, err := r.db.Stat(r.ctx, id)
		if err != nil {
			delete(r.revs, id)
			continue
		}
		if old, ok := r.revs[id]; ok {
			same := old == snap.Revision
			if same != (r.revN[id] == snap.EventCount) {
				r.t.Fatalf("session %s: revision %q -> %q while the count went %d -> %d", id, old, snap.Revision, r.revN[id], snap.EventCount)
			}
		}
		r.revs[id], r.revN[id] = snap.Revision, snap.EventCount
	}
}

func sameEvent(a, b event.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.Time == b.Time && string(a.Data) == string(b.Data) &&
		a.Ignorable == b.Ignorable && string(a.SurfaceOp) == string(b.SurfaceOp) &&
		fmt.Sprint(a.SourceEventSeqs) == fmt.Sprint(b.SourceEventSeqs)
}

func (r *opsRun) step(op, arg byte) {
	r.t.Helper()
	id := ids[int(arg)%len(ids)]
	m := r.mod(id)
	h := r.hs[id]
	nops := byte(12)
	if r.indexed {
		nops = 14
	}
	r.dirty = r.dirty || op%nops != 12
	switch op % nops {
	case 0: // create
		nh, err := r.db.Create(r.ctx, store.Header{ID: id, CreatedAt: 1})
		exists := m.stored || len(m.appended) > 0 || h != nil || m.created
		if exists != (err != nil) {
			r.t.Fatalf("create %s: %v (model says exists=%v)", id, err, exists)
		}
		if err == nil {
			r.hs[id], m.created, m.gone, m.deleted = nh, true, false, false
		}
	case 1: // open for write
		if h != nil {
			if _, err := r.db.Open(r.ctx, id, store.Write); !errors.Is(err, store.ErrAlreadyOwned) {
				r.t.Fatalf("second write open of %s: %v", id, err)
			}
			return
		}
		nh, err := r.db.Open(r.ctx, id, store.Write)
		if exists := m.stored || len(m.appended) > 0; exists != (err == nil) {
			r.t.Fatalf("open %s for write: %v (model says exists=%v)", id, err, exists)
		}
		if err == nil {
			r.hs[id] = nh
		}
	case 2, 3: // append or enqueue a batch
		if h == nil {
			return
		}
		n := 1 + int(arg>>4)%6
		evs := testgen.Events(uint64(len(m.appended)), n, 80+int(arg)*3)
		var err error
		if op%12 == 2 {
			err = h.Append(r.ctx, evs...)
		} else {
			err = h.Enqueue(evs...)
		}
		if err != nil {
			r.t.Fatalf("append to %s: %v", id, err)
		}
		m.appended = append(m.appended, evs...)
		m.created = false
		if op%12 == 2 {
			m.visible = len(m.appended) // (an append drains what was enqueued first)
		}
	case 4: // flush one handle
		if h == nil {
			return
		}
		if err := h.Flush(r.ctx); err != nil {
			r.t.Fatalf("flush %s: %v", id, err)
		}
		m.flushed, m.stored, m.created = len(m.appended), true, false
	case 5: // flush everything
		if err := r.db.Flush(r.ctx); err != nil {
			r.t.Fatalf("db flush: %v", err)
		}
		for hid := range r.hs {
			hm := r.mod(hid)
			hm.flushed, hm.stored, hm.created = len(hm.appended), true, false
		}
	case 6: // close a handle
		if h == nil {
			return
		}
		if err := h.Close(); err != nil {
			r.t.Fatalf("close %s: %v", id, err)
		}
		delete(r.hs, id)
		if m.created && len(m.appended) == 0 {
			m.gone, m.created = true, false // erased: it never existed
		} else {
			m.flushed, m.stored = len(m.appended), true
		}
	case 7: // a write-behind window passes; for args from 0xC0 on, a fork (older corpora keep their meaning)
		if arg >= 0xC0 {
			r.fork(arg)
			return
		}
		r.clock.Advance(250 * time.Millisecond)
	case 8: // clean close and reopen
		if err := r.db.Close(); err != nil {
			r.t.Fatalf("close db: %v", err)
		}
		for hid := range r.hs {
			hm := r.mod(hid)
			if hm.created && len(hm.appended) == 0 {
				hm.gone, hm.created = true, false
			} else {
				hm.flushed, hm.stored = len(hm.appended), true
			}
		}
		r.open()
		r.check(false)
	case 10: // delete
		err := r.db.Delete(r.ctx, id)
		switch {
		case h != nil:
			if !errors.Is(err, store.ErrAlreadyOwned) {
				r.t.Fatalf("delete of owned %s: %v", id, err)
			}
		case !m.stored && len(m.appended) == 0:
			if !errors.Is(err, store.ErrSessionNotFound) {
				r.t.Fatalf("delete of absent %s: %v", id, err)
			}
		case err != nil:
			r.t.Fatalf("delete %s: %v", id, err)
		default:
			r.m[id] = &model{gone: true, deleted: true}
		}
	case 11: // compaction (changes no live session): default, rewrite anything with a dead byte, drop only
		ratio := [...]float64{0, 1, -1}[arg/2%3]
		if _, err := r.db.Compact(r.ctx, engine.CompactOptions{Roll: arg%2 == 0, LiveRatio: ratio}); err != nil {
			r.t.Fatalf("compact: %v", err)
		}
	case 9: // power cut and reopen
		cfg := vfs.CrashConfig{Rand: rand.New(rand.NewPCG(uint64(arg), 3)), Garble: arg%2 == 0}
		if arg%5 == 0 {
			cfg = vfs.CrashConfig{} // lose everything unsynced
		}
		// The index first: a bbolt commit is synced, so the file holds the
		// last commit, what a power cut leaves of it. Copied before the
		// segments are cloned, it is never newer than they are (what it
		// records as durable was durable before the clone); a checkpoint
		// committed between the two is one a cut in its commit loses.
		var idx []byte
		if r.indexed {
			idx = r.readIndex()
		}
		crashed := r.mem.CrashClone(cfg)
		r.db.Close() // writes only to the old FS and the old index file
		r.mem = crashed
		if r.indexed {
			r.copies++
			r.index = filepath.Join(filepath.Dir(r.index), fmt.Sprintf("index-%d.db", r.copies))
			if err := os.WriteFile(r.index, idx, 0o644); err != nil {
				r.t.Fatal(err)
			}
		}
		for _, hm := range r.m {
			hm.created = false
		}
		r.open()
		r.check(true)
		r.revs, r.revN = map[string]string{}, map[string]uint64{}
	case 12: // (indexed only) time for an index checkpoint
		r.waitCheckpoint(arg)
	case 13: // (indexed only) a bulk append, 16 to 79 events of 16 KiB: past the writer's buffer it spills, written but not synced
		if h == nil || r.bulks == 4 {
			return
		}
		r.bulks++
		n := 16 + int(arg>>2)
		evs := bulkEvents(uint64(len(m.appended)), n)
		if err := h.Append(r.ctx, evs...); err != nil {
			r.t.Fatalf("bulk append to %s: %v", id, err)
		}
		m.appended = append(m.appended, evs...)
		m.created = false
	}
}

// settleVisible moves the models' visible prefixes on after op: a flush
// or close of one handle drains its buffer, a database flush, a window,
// a reopen or a power cut (whose check resets the models) all of them.
func (r *opsRun) settleVisible(op, arg byte) {
	nops := byte(12)
	if r.indexed {
		nops = 14
	}
	switch op % nops {
	case 4, 6, 13:
		m := r.mod(ids[int(arg)%len(ids)])
		m.visible = len(m.appended)
	case 5, 8, 9:
		for _, m := range r.m {
			m.visible = len(m.appended)
		}
	case 7:
		if arg < 0xC0 {
			for _, m := range r.m {
				m.visible = len(m.appended)
			}
		}
	}
}

// fork forks session ids[arg%3] into ids[arg/3%3] at a point its model
// picks. A fork is durable when Fork returns, and reads as its parent's
// first n events and the seed marker.
func (r *opsRun) fork(arg byte) {
	r.t.Helper()
	pid, cid := ids[int(arg)%len(ids)], ids[int(arg)/3%len(ids)]
	pm, cm := r.mod(pid), r.mod(cid)
	pexists := pm.stored || len(pm.appended) > 0 || pm.created
	cexists := cm.stored || len(cm.appended) > 0 || cm.created || r.hs[cid] != nil
	n := uint64(int(arg>>2) % (pm.visible + 1))
	c, err := r.db.Fork(r.ctx, pid, n, store.Header{ID: cid, CreatedAt: 2})
	switch {
	case pid == cid:
		if !errors.Is(err, store.ErrInvalidHeader) {
			r.t.Fatalf("fork of %s onto itself: %v", pid, err)
		}
		return
	case cexists:
		// (Of an absent parent too: which check comes first depends on
		// whether Fork shares or copies.)
		if !errors.Is(err, store.ErrSessionExists) && (pexists || !errors.Is(err, store.ErrSessionNotFound)) {
			r.t.Fatalf("fork onto existing %s: %v", cid, err)
		}
		return
	case !pexists:
		if !errors.Is(err, store.ErrSessionNotFound) {
			r.t.Fatalf("fork of absent %s: %v", pid, err)
		}
		return
	case err != nil:
		// (A parent created here and never written exists for this DB,
		// with no event: a fork of it at 0 copies nothing.)
		r.t.Fatalf("fork %s at %d into %s: %v", pid, n, cid, err)
	}
	got, err := c.Read(r.ctx, 0, -1)
	if err != nil {
		r.t.Fatalf("read fork %s: %v", cid, err)
	}
	if uint64(len(got)) != n+1 || !store.IsInheritedMarker(&got[n]) {
		r.t.Fatalf("fork %s of %s at %d holds %d events", cid, pid, n, len(got))
	}
	for i := range n {
		if !sameEvent(got[i], pm.appended[i]) {
			r.t.Fatalf("fork %s event %d differs from its parent's", cid, i)
		}
	}
	r.hs[cid] = c
	r.m[cid] = &model{appended: got, flushed: len(got), visible: len(got), stored: true}
}

// readIndex returns the index file as it is now.
func (r *opsRun) readIndex() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.index)
	if err != nil {
		r.t.Fatalf("read index: %v", err)
	}
	return b
}

// indexMeta returns the start of the index file, where bbolt's two meta
// pages are: one of them changes at every commit.
func (r *opsRun) indexMeta() []byte {
	r.t.Helper()
	f, err := os.Open(r.index)
	if err != nil {
		r.t.Fatalf("open index: %v", err)
	}
	defer f.Close()
	b := make([]byte, 2<<12)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		r.t.Fatalf("read index: %v", err)
	}
	return b[:n]
}

// waitCheckpoint gives the checkpointer (every millisecond) time to run:
// it returns once a bbolt commit changed the index file, or after 0.5 to
// 2 ms (by arg) if none did (nothing durable was pending), at once if no
// operation ran since the last wait. The engine exports no checkpoint
// call; which appends, flushes and deletes a checkpoint catches then
// depends on timing, and every outcome is one the model must accept.
func (r *opsRun) waitCheckpoint(arg byte) {
	if !r.dirty {
		return
	}
	r.dirty = false
	before := r.indexMeta()
	deadline := time.Now().Add(time.Duration(1+arg%4) * 500 * time.Microsecond)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
		if !bytes.Equal(r.indexMeta(), before) {
			return
		}
	}
}

// indexDir returns a directory for the index files of one script: on
// tmpfs (/dev/shm) where there is one, where bbolt's fsyncs cost nothing,
// else in t.TempDir(). Either way a copy of the file holds its last
// commit: the copy reads what bbolt wrote, not what a disk kept. (A fuzz
// worker stopped in the middle of an input leaves its directory, tens of
// KiB, behind, as it would a t.TempDir.)
func indexDir(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "seglog-fuzz-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// bulkEvents is testgen.Events of 16 KiB events, cached by seq (the bulk
// append's events are the slow part of a script).
func bulkEvents(first uint64, n int) []event.Event {
	const size = 16 << 10
	evs := make([]event.Event, n)
	for i := range evs {
		seq := first + uint64(i)
		if seq >= uint64(len(bulkCache)) {
			evs[i] = testgen.Event(seq, size)
			continue
		}
		bulkMu.Lock()
		e := bulkCache[seq]
		if e.Data == nil {
			e = testgen.Event(seq, size)
			bulkCache[seq] = e
		}
		bulkMu.Unlock()
		evs[i] = e
	}
	return evs
}

var (
	bulkMu    sync.Mutex
	bulkCache [512]event.Event // the first seqs: 8 MiB at most
)

func runScript(t *testing.T, script []byte, indexed bool) {
	r := &opsRun{t: t, ctx: context.Background(), mem: vfs.NewMem(), clock: &testclock.Clock{},
		m: map[string]*model{}, revs: map[string]string{}, revN: map[string]uint64{}, indexed: indexed, segSize: 32 << 10}
	if indexed {
		r.index = filepath.Join(indexDir(t), "index.db")
		if len(script) > 0 {
			cfg := script[0]
			script = script[1:]
			if cfg&1 != 0 {
				r.segSize = 4 << 20
			}
			r.uncompressed = cfg&2 != 0
		}
	}
	r.open()
	defer func() { r.db.Close() }()
	done := 0 // steps begun, for the trace of a failure
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed in step %d (segments %d KiB, uncompressed %v, index %v) of: %s", done, r.segSize>>10, r.uncompressed, indexed, opsTrace(script[:min(len(script), 400)], indexed))
		}
	})
	for i := 0; i+1 < len(script) && i < 400; i += 2 {
		done++
		r.step(script[i], script[i+1])
		r.checkRevisions()
		if op := script[i] % 14; op != 2 && op != 3 {
			// Every other operation drains the write-behind buffers it
			// meets (a flush, a close, a window, a reopen) or none: the
			// model need only know that after an enqueue, nothing more is
			// visible until one of those.
			r.settleVisible(script[i], script[i+1])
		}
	}
	// Every live read equals the model exactly, once the write-behind
	// buffers have drained.
	r.clock.Advance(time.Second)
	r.check(false)
}

var opNames = [...]string{"create", "open", "append", "enqueue", "flush", "flushall", "close", "window", "reopen", "cut", "delete", "compact", "checkpoint", "bulk"}

// opsTrace names the steps of a script: op(session,arg).
func opsTrace(script []byte, indexed bool) string {
	nops := byte(12)
	if indexed {
		nops = 14
	}
	var b bytes.Buffer
	for i := 0; i+1 < len(script); i += 2 {
		op, arg := script[i]%nops, script[i+1]
		if op == 7 && arg >= 0xC0 {
			fmt.Fprintf(&b, "%d:fork(%s->%s,%#x) ", i/2+1, ids[int(arg)%len(ids)], ids[int(arg)/3%len(ids)], arg)
			continue
		}
		fmt.Fprintf(&b, "%d:%s(%s,%#x) ", i/2+1, opNames[op], ids[int(arg)%len(ids)], arg)
	}
	return b.String()
}

// FuzzEngineOps runs scripts of operations (create, open, append,
// enqueue, flush, close, delete, compact, fork, reopen, power cut) against the engine on a
// crashable FS and a plain model. After every reopen each session's log is
// the model's flushed prefix plus possibly a later prefix of what was
// appended; revisions change exactly when a log does.
func FuzzEngineOps(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0x30, 4, 0, 9, 1, 1, 0, 2, 0x10, 9, 5})
	f.Add([]byte{0, 1, 3, 0x21, 7, 0, 2, 0x41, 8, 0, 1, 1, 2, 0x11, 9, 2})
	f.Add([]byte{0, 2, 6, 2, 0, 2, 5, 0, 9, 10, 0, 0, 2, 3, 6, 0, 8, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 2, 0x50, 2, 0x51, 2, 0x52, 5, 0, 2, 0x60, 9, 4, 1, 0, 1, 1, 1, 2, 2, 0x70, 8, 1})
	// Forks (op 7, args from 0xC0): s0 written and forked into s2, s0
	// deleted and compacted, a power cut; and a fork of s0 created and
	// not yet written (nothing of it on disk yet), then written, a cut.
	f.Add([]byte{0, 0, 2, 0x30, 2, 0x33, 4, 0, 7, 0xC3, 6, 0, 10, 0, 11, 0, 9, 5, 7, 0xC5, 9, 1})
	f.Add([]byte{0, 0, 7, 0xC3, 2, 0x30, 4, 0, 9, 5})
	f.Fuzz(func(t *testing.T, script []byte) { runScript(t, script, false) })
}

// FuzzEngineOpsIndexed is FuzzEngineOps with a persistent bbolt index
// (the first byte picks 32 KiB or 4 MiB segments and compression; ops 12
// and 13 wait for a checkpoint and append in bulk):
// the segments on the crashable MemFS, the index in a real file
// (bbolt cannot run on MemFS), checkpointed every millisecond, at every
// Compact and at Close, and by op 12 given time to run. A power cut copies
// the index file as it is then (its last synced commit) and reopens with
// the copy: whatever the index claims must be what the cut kept. The model
// is the same, so acknowledged events are there, an acknowledged Delete
// stays deleted, and every reopen succeeds. Checkpoints run on a real
// timer: which frames a checkpoint catches varies between runs.
func FuzzEngineOpsIndexed(f *testing.F) {
	// 4 MiB segments, uncompressed: create, bulk append past the
	// writer's buffer (a spill: written, not synced), checkpoint, power
	// cut losing everything unsynced: the index must not have passed the
	// spilled frames.
	f.Add([]byte{3, 0, 0, 13, 0xfc, 12, 3, 9, 0})
	// A fork, its parent deleted, a checkpoint, a compaction, a power
	// cut: the index holds the deleted parent's frames for the fork.
	f.Add([]byte{0, 0, 0, 2, 0x30, 2, 0x33, 4, 0, 7, 0xC3, 6, 0, 12, 0, 10, 0, 12, 0, 11, 1, 9, 5, 7, 0xC5, 12, 0, 9, 1})
	f.Fuzz(func(t *testing.T, script []byte) { runScript(t, script, true) })
}

// TestEngineOpsRandom runs random scripts as a plain test, so that go test
// exercises the model check beyond the seed corpus: 200 (30 with -short,
// 5000 with SEGLOG_LONG=1).
func TestEngineOpsRandom(t *testing.T) {
	n := testlong.Pick(30, 200, 5000)
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 11))
		script := make([]byte, 2*(10+r.IntN(60)))
		for i := range script {
			script[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runScript(t, script, false) })
	}
}

// TestEngineOpsIndexedRandom is TestEngineOpsRandom with the persistent
// index (FuzzEngineOpsIndexed's scripts): 100 (15 with -short, 2000 with
// SEGLOG_LONG=1).
func TestEngineOpsIndexedRandom(t *testing.T) {
	n := testlong.Pick(15, 100, 2000)
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 13))
		script := make([]byte, 2*(10+r.IntN(60)))
		for i := range script {
			script[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runScript(t, script, true) })
	}
}

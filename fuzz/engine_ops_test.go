package fuzz

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/internal/testgen"
	"github.com/seglog/seglog/internal/vfs"
)

// model is what the engine must hold for one session.
type model struct {
	appended []event.Event // every event whose append was attempted, in order
	flushed  int           // the prefix a successful flush acknowledged
	created  bool          // created in this instance and not yet written
	stored   bool          // known to be on disk (a flush acknowledged it)
	gone     bool          // a creator closed it untouched: it must not exist
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
}

var ids = []string{"s0", "s1", "s2"}

func (r *opsRun) open() {
	r.t.Helper()
	db, err := engine.Open("/db", &engine.Options{FS: r.mem, SegmentSize: 32 << 10, FrameBytes: 1 << 10, AfterFunc: r.clock.AfterFunc, NoPreallocate: true})
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
		h, err := r.db.Open(r.ctx, id, engine.Read)
		if errors.Is(err, engine.ErrSessionNotFound) {
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
	switch op % 12 {
	case 0: // create
		nh, err := r.db.Create(r.ctx, engine.Header{ID: id, CreatedAt: 1})
		exists := m.stored || len(m.appended) > 0 || h != nil || m.created
		if exists != (err != nil) {
			r.t.Fatalf("create %s: %v (model says exists=%v)", id, err, exists)
		}
		if err == nil {
			r.hs[id], m.created, m.gone = nh, true, false
		}
	case 1: // open for write
		if h != nil {
			if _, err := r.db.Open(r.ctx, id, engine.Write); !errors.Is(err, engine.ErrAlreadyOwned) {
				r.t.Fatalf("second write open of %s: %v", id, err)
			}
			return
		}
		nh, err := r.db.Open(r.ctx, id, engine.Write)
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
	case 7: // a write-behind window passes
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
			if !errors.Is(err, engine.ErrAlreadyOwned) {
				r.t.Fatalf("delete of owned %s: %v", id, err)
			}
		case !m.stored && len(m.appended) == 0:
			if !errors.Is(err, engine.ErrSessionNotFound) {
				r.t.Fatalf("delete of absent %s: %v", id, err)
			}
		case err != nil:
			r.t.Fatalf("delete %s: %v", id, err)
		default:
			r.m[id] = &model{gone: true}
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
		crashed := r.mem.CrashClone(cfg)
		r.db.Close() // writes only to the old FS
		r.mem = crashed
		for _, hm := range r.m {
			hm.created = false
		}
		r.open()
		r.check(true)
		r.revs, r.revN = map[string]string{}, map[string]uint64{}
	}
}

func runScript(t *testing.T, script []byte) {
	r := &opsRun{t: t, ctx: context.Background(), mem: vfs.NewMem(), clock: &testclock.Clock{},
		m: map[string]*model{}, revs: map[string]string{}, revN: map[string]uint64{}}
	r.open()
	defer func() { r.db.Close() }()
	for i := 0; i+1 < len(script) && i < 400; i += 2 {
		r.step(script[i], script[i+1])
		r.checkRevisions()
	}
	// Every live read equals the model exactly, once the write-behind
	// buffers have drained.
	r.clock.Advance(time.Second)
	r.check(false)
}

// FuzzEngineOps runs scripts of operations (create, open, append,
// enqueue, flush, close, delete, compact, reopen, power cut) against the engine on a
// crashable FS and a plain model. After every reopen each session's log is
// the model's flushed prefix plus possibly a later prefix of what was
// appended; revisions change exactly when a log does.
func FuzzEngineOps(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0x30, 4, 0, 9, 1, 1, 0, 2, 0x10, 9, 5})
	f.Add([]byte{0, 1, 3, 0x21, 7, 0, 2, 0x41, 8, 0, 1, 1, 2, 0x11, 9, 2})
	f.Add([]byte{0, 2, 6, 2, 0, 2, 5, 0, 9, 10, 0, 0, 2, 3, 6, 0, 8, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 2, 0x50, 2, 0x51, 2, 0x52, 5, 0, 2, 0x60, 9, 4, 1, 0, 1, 1, 1, 2, 2, 0x70, 8, 1})
	f.Fuzz(func(t *testing.T, script []byte) { runScript(t, script) })
}

// TestEngineOpsRandom runs random scripts as a plain test, so that go test
// exercises the model check beyond the seed corpus.
func TestEngineOpsRandom(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 30
	}
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 11))
		script := make([]byte, 2*(10+r.IntN(60)))
		for i := range script {
			script[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runScript(t, script) })
	}
}

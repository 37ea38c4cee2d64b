package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The power-cut campaign of agent hosts that never flush mid-turn (issue
// 37, item 1): every event handed to Append or Enqueue before a durability
// window of its session ended (and that window's flush returned) survives
// a power cut, Flush or not; a session is a prefix of what was handed
// over; the store checks clean; and Resume's closers close the turn the
// cut interrupted. The window's timer runs on a test clock, advanced in
// steps shorter than the window, so that a window ends between steps
// exactly where the test's model of the windows (hostWorkload.run) says.

// hostWorkload is a host's writing: writers DBs on one store (as as many
// processes), each writing sessions sessions, turn by turn, a few events
// at a time through Append or Enqueue, the clock advanced by 5 to 100 ms
// (half a window at most) after every step. Session i flushes by policy
// i%3: never; at every turn end; at about half of its turn ends. All of
// it a pure function of seed.
type hostWorkload struct {
	seed      uint64
	steps     int
	writers   int
	sessions  int  // per writer
	flushOnly bool // Options.FlushOnly: the windows flush nothing
}

// hostRecord is what a hostWorkload handed over and what was promised.
type hostRecord struct {
	ids      []string
	handed   map[string][]event.Event   // every event handed to Append or Enqueue (a failed call's too)
	handedAt map[string][]time.Duration // the test clock when each was handed over
	acked    map[string]int             // events handed over before a Flush that returned nil
	promised map[string]int             // events handed over before the session's last window end that completed
	lastEnd  map[string]time.Duration   // that window end
	ends     int                        // window ends that completed, over all sessions
}

// hostOpts are the options of the workload's DBs; the checks reopen
// with the same segment size.
func hostOpts(fsys vfs.FS, clock *testclock.Clock, flushOnly bool) *engine.Options {
	o := &engine.Options{FS: fsys, SegmentSize: 32 << 10, FrameBytes: 4 << 10, NoPreallocate: true, CompactInterval: -1, FlushOnly: flushOnly}
	if clock != nil {
		o.AfterFunc = clock.AfterFunc
	}
	return o
}

// run runs the workload on fsys. cut is asked after every step and every
// advance of the clock whether the power is cut (it is told how many
// steps ran); once it says so, run returns at once, with the DBs still
// open, for the caller to take its crash clones before calling done
// (which closes them). An error that comes before the cut is the
// engine's: run returns it.
func (w hostWorkload) run(fsys vfs.FS, cut func(steps int) bool) (rec *hostRecord, done func(), err error) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(w.seed, 37))
	clock := &testclock.Clock{}
	rec = &hostRecord{handed: map[string][]event.Event{}, handedAt: map[string][]time.Duration{},
		acked: map[string]int{}, promised: map[string]int{}, lastEnd: map[string]time.Duration{}}
	var dbs []*engine.DB
	done = func() {
		for _, db := range dbs {
			db.Close()
		}
	}
	for range w.writers {
		db, err := engine.OpenUnchecked("the workload runs until a cut; its test checks the crashed copies", "/db", hostOpts(fsys, clock, w.flushOnly))
		if err != nil {
			if cut(0) {
				return rec, done, nil
			}
			return rec, done, err
		}
		dbs = append(dbs, db)
	}
	type session struct {
		db      *engine.DB
		h       *engine.Handle
		policy  int
		turn    int
		pending []event.Event // the rest of the turn under way
		open    bool          // the model's window: open, ending at end
		end     time.Duration
	}
	ss := map[string]*session{}
	for wi, db := range dbs {
		for i := range w.sessions {
			id := fmt.Sprintf("host%d-s%d", wi, i)
			rec.ids = append(rec.ids, id)
			ss[id] = &session{db: db, policy: i % 3}
		}
	}
	var now time.Duration
	for step := 1; step <= w.steps; step++ {
		id := rec.ids[r.IntN(len(rec.ids))]
		s := ss[id]
		if s.h == nil {
			if s.h, err = s.db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
				if cut(step) {
					return rec, done, nil
				}
				return rec, done, fmt.Errorf("step %d: create %s: %w", step, id, err)
			}
		}
		if len(s.pending) == 0 {
			s.pending = hostTurn(id, s.turn, uint64(len(rec.handed[id])), r)
			s.turn++
		}
		evs := s.pending[:min(len(s.pending), 1+r.IntN(3))]
		s.pending = s.pending[len(evs):]
		// A failed call's outcome is unknown (a prefix may be stored):
		// its events count as handed over.
		rec.handed[id] = append(rec.handed[id], evs...)
		for range evs {
			rec.handedAt[id] = append(rec.handedAt[id], now)
		}
		if !s.open {
			s.open, s.end = true, now+handle.DefaultWindow
		}
		if r.IntN(2) == 0 {
			err = s.h.Append(ctx, evs...)
		} else {
			err = s.h.Enqueue(evs...)
		}
		if err != nil {
			if cut(step) {
				return rec, done, nil
			}
			return rec, done, fmt.Errorf("step %d: hand %d events to %s: %w", step, len(evs), id, err)
		}
		if len(s.pending) == 0 && (s.policy == 1 || s.policy == 2 && r.IntN(2) == 0) {
			if err := s.h.Flush(ctx); err != nil {
				if cut(step) {
					return rec, done, nil
				}
				return rec, done, fmt.Errorf("step %d: flush %s at its turn's end: %w", step, id, err)
			}
			rec.acked[id] = len(rec.handed[id])
		}
		if cut(step) {
			return rec, done, nil
		}
		d := time.Duration(5+r.IntN(96)) * time.Millisecond
		clock.Advance(d)
		now += d
		// The window ends of this advance count once their flushes have
		// returned with the power on: a cut inside the advance counts
		// none of them.
		if cut(step) {
			return rec, done, nil
		}
		for _, id := range rec.ids {
			if s := ss[id]; s.open && s.end <= now {
				s.open = false
				rec.promised[id], rec.lastEnd[id] = len(rec.handed[id]), s.end
				rec.ends++
			}
		}
	}
	return rec, done, nil
}

var hostWords = strings.Fields(`the a of to and in is it that for on with as was at by file read write
error step turn model user message tool call result session event log index segment frame flush sync
append offset batch token stream chunk text plan config path line code test build run json struct`)

func hostText(r *rand.Rand, lo, hi int) string {
	n := lo + r.IntN(hi-lo+1)
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(hostWords[r.IntN(len(hostWords))])
		b.WriteByte(' ')
	}
	return b.String()
}

// hostTurn is turn t of session id, its events numbered from seq, in the
// reference's v3 vocabulary (docs/EVENTS.md) as an agent host writes it:
// turn/start; step 0: the user's message, the assistant's with one to
// three tool-call blocks, a tool/call and a tool/result for each; step 1:
// the answer; turn/end. A cut inside it leaves pending calls, an open
// step or an open turn for the closers to close.
func hostTurn(id string, t int, seq uint64, r *rand.Rand) []event.Event {
	var evs []event.Event
	add := func(typ, data string, surface bool) {
		e := event.Event{Seq: seq, Type: typ, Time: 1_750_000_000_000 + int64(seq)*37, Data: json.RawMessage(data)}
		if surface {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		evs = append(evs, e)
		seq++
	}
	tag := fmt.Sprintf("%s-%d", id, t)
	text := func(lo, hi int) string { b, _ := json.Marshal(hostText(r, lo, hi)); return string(b) }
	add("turn/start", fmt.Sprintf(`{"turn":%d}`, t), false)
	add("step/start", fmt.Sprintf(`{"turn":%d,"step":0}`, t), false)
	add("user/message", fmt.Sprintf(`{"turn":%d,"step":0,"message":{"id":"u-%s","role":"user","content":[{"type":"text","text":%s}],"source":{"kind":"user"}}}`,
		t, tag, text(40, 400)), true)
	calls := 1 + r.IntN(3)
	var blocks []string
	for k := range calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool-call","id":"c-%s-%d","name":"read","arguments":"{}"}`, tag, k))
	}
	add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":0,"message":{"id":"a-%s-0","role":"assistant","content":[{"type":"text","text":%s},%s],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[]}`,
		t, tag, text(40, 600), strings.Join(blocks, ",")), true)
	for k := range calls {
		call := fmt.Sprintf("c-%s-%d", tag, k)
		add("tool/call", fmt.Sprintf(`{"turn":%d,"step":0,"callId":%q,"name":"read","arguments":"{}"}`, t, call), false)
		add("tool/result", fmt.Sprintf(`{"turn":%d,"step":0,"message":{"id":"r-%s","role":"user","content":[{"type":"tool-result","toolCallId":%q,"isError":false,"content":[{"type":"text","text":%s}]}],"source":{"kind":"tool","callId":%q}}}`,
			t, call, call, text(100, 1200), call), true)
	}
	add("step/end", fmt.Sprintf(`{"turn":%d,"step":0}`, t), false)
	add("step/start", fmt.Sprintf(`{"turn":%d,"step":1}`, t), false)
	add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"a-%s-1","role":"assistant","content":[{"type":"text","text":%s}],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[]}`,
		t, tag, text(40, 800)), true)
	add("step/end", fmt.Sprintf(`{"turn":%d,"step":1}`, t), false)
	add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, t), false)
	return evs
}

// hostTally counts, over a campaign, what its cuts showed.
type hostTally struct {
	points      int // crash clones checked
	closed      int // sessions whose interrupted turn Resume closed
	beyondFlush int // sessions the window kept more of than their flushes
	lost        int // sessions that lost events the window would have kept (FlushOnly)
}

// checkHostCrash checks what a power cut left of the workload's store:
// Check finds no problem in it as the cut left it; every session holds
// its flushed events and, unless FlushOnly, every event handed over
// before its last window end that completed, and nothing but a prefix of
// what was handed over; Resume appends exactly recovery's closers, which
// balance the log, and the log reads back as the prefix and the closers;
// and the store checks clean after.
func checkHostCrash(t *testing.T, crashed *vfs.MemFS, rec *hostRecord, flushOnly bool, label string, tally *hostTally) {
	t.Helper()
	ctx := context.Background()
	tally.points++
	checkClean := func(when string) {
		t.Helper()
		rep, err := engine.Check("/db", hostOpts(crashed, nil, false))
		if err != nil {
			t.Fatalf("%s: Check %s: %v", label, when, err)
		}
		if len(rep.Problems) > 0 {
			t.Fatalf("%s: Check %s: %v", label, when, rep.Problems)
		}
	}
	checkClean("of the store as the cut left it")
	db, err := engine.OpenStore(t, "/db", hostOpts(crashed, nil, false))
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer db.Close()
	for _, id := range rec.ids {
		handed := rec.handed[id]
		must := rec.acked[id]
		if !flushOnly {
			must = max(must, rec.promised[id])
		}
		missing := func(n int) string {
			if n >= len(handed) {
				return fmt.Sprintf("%s: %d of %d promised events there", id, n, must)
			}
			return fmt.Sprintf("%s: %d of %d promised events there: event %d (%s), handed over at %v, flushed %d, last window end that completed %v (%d events by then)",
				id, n, must, n, handed[n].Type, rec.handedAt[id][n], rec.acked[id], rec.lastEnd[id], rec.promised[id])
		}
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			if must > 0 {
				t.Fatalf("%s: session gone: %s", label, missing(0))
			}
			if rec.promised[id] > 0 {
				tally.lost++
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: open %s: %v", label, id, err)
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatalf("%s: read %s: %v", label, id, err)
		}
		if len(got) < must {
			t.Fatalf("%s: %s", label, missing(len(got)))
		}
		if len(got) > len(handed) {
			t.Fatalf("%s: %s holds %d events, %d were handed over", label, id, len(got), len(handed))
		}
		engine.SameEvents(t, fmt.Sprintf("%s: %s, the prefix of what was handed over", label, id), got, handed[:len(got)])
		if rec.promised[id] > rec.acked[id] {
			if len(got) < rec.promised[id] {
				tally.lost++
			} else {
				tally.beyondFlush++
			}
		}
		want, err := recovery.InterruptedTurnClosers(got)
		if err != nil {
			t.Fatalf("%s: %s: the closers of what survived: %v", label, id, err)
		}
		w, closers, err := db.Resume(ctx, id)
		if err != nil {
			t.Fatalf("%s: resume %s: %v", label, id, err)
		}
		engine.SameEvents(t, fmt.Sprintf("%s: %s, Resume's closers", label, id), closers, want)
		after, err := w.Read(ctx, 0, -1)
		if err != nil {
			t.Fatalf("%s: read %s after Resume: %v", label, id, err)
		}
		engine.SameEvents(t, fmt.Sprintf("%s: %s after Resume", label, id), after, slices.Concat(got, want))
		if st, err := recovery.Fold(after); err != nil || !st.Balanced() {
			t.Fatalf("%s: %s after Resume: phase %v, %v; want a balanced log", label, id, st.Phase, err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("%s: close %s after Resume: %v", label, id, err)
		}
		if len(want) > 0 {
			tally.closed++
		}
	}
	if err := db.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	checkClean("after Resume")
}

// hostCutCampaign cuts the power at the syncs and writes sweepPoints picks
// (the cut operation and every later one of its kind fail; a cut write
// reaches the file half), and at random steps of the workload run on a
// healthy FS, and checks every crash clone (checkHostCrash): the page
// cache lost whole, all of it on disk, and a random part of it, the last
// write of a file partly garbled.
func hostCutCampaign(t *testing.T, w hostWorkload) hostTally {
	t.Helper()
	never := func(int) bool { return false }
	probe := vfs.NewFault(vfs.NewMem())
	rec, done, err := w.run(probe, never)
	done()
	if err != nil {
		t.Fatalf("workload without faults: %v", err)
	}
	if rec.ends == 0 {
		t.Fatal("the workload ended no window: nothing to check")
	}
	syncs, writes := probe.Count(vfs.OpSync), probe.Count(vfs.OpWrite)
	var tally hostTally
	check := func(mem *vfs.MemFS, rec *hostRecord, done func(), label string, k uint64) {
		t.Helper()
		clones := []*vfs.MemFS{
			mem.CrashClone(vfs.CrashConfig{}),
			mem.CrashClone(vfs.CrashConfig{KeepAll: true}),
			mem.CrashClone(vfs.CrashConfig{Rand: rand.New(rand.NewPCG(k, w.seed)), Garble: true}),
		}
		done()
		for variant, c := range clones {
			checkHostCrash(t, c, rec, w.flushOnly, fmt.Sprintf("%s, variant %d", label, variant), &tally)
		}
	}
	for _, cut := range []struct {
		op    vfs.Op
		n     int
		short int
	}{{vfs.OpSync, syncs, 0}, {vfs.OpWrite, writes, -1}} {
		for _, k := range hostSweepPoints(cut.n, w.seed) {
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem, vfs.Rule{Op: cut.op, Nth: k, Sticky: true, Short: cut.short})
			rec, done, err := w.run(ff, func(int) bool { return ff.Count(cut.op) >= k })
			if err != nil {
				done()
				t.Fatalf("cut at %v #%d: before the cut: %v", cut.op, k, err)
			}
			check(mem, rec, done, fmt.Sprintf("cut at %v #%d of %d", cut.op, k, cut.n), uint64(k))
		}
	}
	// Random cuts: at a step the seed picks, between the host's calls.
	r := rand.New(rand.NewPCG(w.seed, 101))
	for range testlong.Pick(2, 4, 40) {
		at := 1 + r.IntN(w.steps)
		mem := vfs.NewMem()
		rec, done, err := w.run(mem, func(step int) bool { return step >= at })
		if err != nil {
			done()
			t.Fatalf("random cut after step %d: before the cut: %v", at, err)
		}
		check(mem, rec, done, fmt.Sprintf("random cut after step %d", at), uint64(at))
	}
	t.Logf("checked %d crash clones (%d syncs, %d writes, %d window ends in the whole workload): %d interrupted turns closed, %d sessions kept beyond their flushes, %d lost what the window would have kept",
		tally.points, syncs, writes, rec.ends, tally.closed, tally.beyondFlush, tally.lost)
	return tally
}

// hostSweepPoints are sweepPoints, sparser (each cut runs the workload
// again): every one with SEGLOG_LONG=1; by default every eighth, with
// -short about 10.
func hostSweepPoints(n int, seed uint64) []int {
	stride := testlong.Pick(max(1, n/10), 8, 1)
	var ks []int
	for k := 1 + int(seed%uint64(stride)); k <= n; k += stride {
		ks = append(ks, k)
	}
	if n > 0 && (len(ks) == 0 || ks[len(ks)-1] != n) {
		ks = append(ks, n)
	}
	return ks
}

// wantWindowShown fails t unless the campaign's cuts showed what it is
// for: interrupted turns closed, and sessions that kept more than their
// flushes did (the window's promise at work, not the flushes').
func wantWindowShown(t *testing.T, tally hostTally) {
	t.Helper()
	if tally.closed == 0 {
		t.Error("no cut interrupted a turn: the closers had nothing to close")
	}
	if tally.beyondFlush == 0 {
		t.Error("no session kept more than its flushes: the window's promise went untested")
	}
}

// TestPowerCutHostNeverFlushes: one process, six sessions, two of which
// never flush and two flush at some turn ends; every cut keeps the
// flushed events and every event handed over before its session's last
// window end that completed, and the closers close the interrupted turns.
func TestPowerCutHostNeverFlushes(t *testing.T) {
	for _, seed := range testlong.Pick([]uint64{3}, []uint64{3, 8}, []uint64{3, 8, 13, 21, 34}) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			wantWindowShown(t, hostCutCampaign(t, hostWorkload{seed: seed, steps: 120, writers: 1, sessions: 6}))
		})
	}
}

// TestPowerCutHostNeverFlushesTwoWriters is the campaign with two writing
// DBs on the store (as two processes), three sessions each, on one clock:
// the windows of both end in the same advances, and each one's flush
// syncs the other's frames too.
func TestPowerCutHostNeverFlushesTwoWriters(t *testing.T) {
	for _, seed := range testlong.Pick([]uint64{5}, []uint64{5}, []uint64{5, 6, 7}) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			wantWindowShown(t, hostCutCampaign(t, hostWorkload{seed: seed, steps: 120, writers: 2, sessions: 3}))
		})
	}
}

// TestPowerCutHostFlushOnly is the campaign with Options.FlushOnly: every
// cut keeps the flushed events (the weaker promise), and some cut loses
// events the window would have kept: the weaker promise is weaker.
func TestPowerCutHostFlushOnly(t *testing.T) {
	tally := hostCutCampaign(t, hostWorkload{seed: 3, steps: 120, writers: 1, sessions: 6, flushOnly: true})
	if tally.lost == 0 {
		t.Error("FlushOnly lost nothing the window would have kept: is the window flushing anyway?")
	}
	if tally.closed == 0 {
		t.Error("no cut interrupted a turn: the closers had nothing to close")
	}
}

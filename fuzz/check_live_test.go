package fuzz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// engine.Check (seglog check) beside live writer processes (issue 44,
// point 2): two writer processes (this test binary, re-executed) work on
// one store with small segments (a roll every few dozen frames), an index
// checkpoint every few milliseconds and the background compactor every
// 20 ms, and run creates, appends, enqueues, flushes, deletes, forks (of
// sessions, and of forks), migrations of v2 sessions and explicit
// compactions; meanwhile the parent runs Check in a loop, and every
// liveKillEvery checks kills one of the writers with SIGKILL and starts
// another in its place. The store is healthy throughout (a kill leaves
// only what a crash may), so every check must report no problem; at the
// end the writers are killed and a check of the store at rest must report
// none either.

const (
	liveDirEnv     = "SEGLOG_CHECK_LIVE_DIR"
	liveSeedEnv    = "SEGLOG_CHECK_LIVE_SEED"
	liveCompactEnv = "SEGLOG_CHECK_LIVE_COMPACT" // "0": no compaction in the child
	liveWorkers    = 4
	liveMaxOwned   = 8  // sessions a worker keeps before it deletes its oldest: deletes are frequent
	liveKillEvery  = 10 // checks between two kills of a writer
)

func liveOptions(compact bool) *engine.Options {
	o := &engine.Options{
		SegmentSize:       64 << 10,
		IndexInterval:     3 * time.Millisecond,
		CompactInterval:   20 * time.Millisecond,
		WriteBehindWindow: 2 * time.Millisecond,
	}
	if !compact {
		o.CompactInterval = 0
	}
	return o
}

// liveChild is a writer process: it opens the store, prints "ready", and
// runs liveWorkers workers until it is killed. Each failed operation is
// printed as "err <op> <id>: <error>" (a healthy store fails none) and the
// worker goes on.
func liveChild(dir string) int {
	ctx := context.Background()
	seed, _ := strconv.ParseUint(os.Getenv(liveSeedEnv), 10, 64)
	compact := os.Getenv(liveCompactEnv) != "0"
	db, err := enginetest.OpenUnchecked("a writer process the parent SIGKILLs; the parent runs engine.Check beside it", dir, liveOptions(compact))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	say("ready")
	for g := range liveWorkers {
		w := &liveWorker{db: db, ctx: ctx, say: say, compact: compact,
			prefix: fmt.Sprintf("p%d-g%d-", seed, g), r: rand.New(rand.NewPCG(seed, uint64(g)))}
		go func() {
			for {
				w.step()
			}
		}()
	}
	select {}
}

type liveWorker struct {
	db      *engine.DB
	ctx     context.Context
	say     func(string, ...any)
	r       *rand.Rand
	prefix  string
	compact bool
	owned   []string // closed sessions of this worker
	made    int
}

func (w *liveWorker) fail(op, id string, err error) {
	w.say("err %s %s: %v", op, id, err)
}

func (w *liveWorker) newID(suffix string) string {
	w.made++
	return w.prefix + strconv.Itoa(w.made) + suffix
}

// pick removes and returns a random owned session accepted by ok.
func (w *liveWorker) pick(ok func(string) bool) (string, bool) {
	var idx []int
	for i, id := range w.owned {
		if ok(id) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return "", false
	}
	i := idx[w.r.IntN(len(idx))]
	id := w.owned[i]
	w.owned = append(w.owned[:i], w.owned[i+1:]...)
	return id, true
}

func (w *liveWorker) step() {
	if len(w.owned) > liveMaxOwned {
		id := w.owned[0]
		w.owned = w.owned[1:]
		if err := w.db.Delete(w.ctx, id); err != nil {
			w.fail("delete", id, err)
		}
		return
	}
	switch n := w.r.IntN(100); {
	case n < 35:
		id := w.newID("")
		h, err := w.db.Create(w.ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			w.fail("create", id, err)
			return
		}
		w.write(id, h)
	case n < 50:
		id, ok := w.pick(func(id string) bool { return !isV2ID(id) })
		if !ok {
			return
		}
		h, err := w.db.Open(w.ctx, id, store.Write)
		if err != nil {
			w.fail("open", id, err)
			return
		}
		w.write(id, h)
	case n < 58:
		if len(w.owned) > 0 {
			i := w.r.IntN(len(w.owned))
			id := w.owned[i]
			w.owned = append(w.owned[:i], w.owned[i+1:]...)
			if err := w.db.Delete(w.ctx, id); err != nil {
				w.fail("delete", id, err)
			}
		}
	case n < 66:
		id := w.newID("-v2")
		h, err := w.db.Create(w.ctx, store.Header{Version: 2, ID: id, CreatedAt: 1})
		if err != nil {
			w.fail("create", id, err)
			return
		}
		if err := h.Append(w.ctx, mixV2Log(id)...); err != nil {
			w.fail("append", id, err)
		}
		if err := h.Close(); err != nil {
			w.fail("close", id, err)
			return
		}
		w.owned = append(w.owned, id)
	case n < 72:
		id, ok := w.pick(isV2ID)
		if !ok {
			return
		}
		if w.r.IntN(2) == 0 {
			h, err := w.db.Open(w.ctx, id, store.Write) // migrates by itself
			if err != nil {
				w.fail("open-migrate", id, err)
				return
			}
			if err := h.Close(); err != nil {
				w.fail("close", id, err)
			}
		} else if _, err := w.db.Migrate(w.ctx, id); err != nil {
			w.fail("migrate", id, err)
			return
		}
		w.owned = append(w.owned, id) // (migrated: a Migrate again does nothing)
	case n < 86:
		// A fork of a session or of a fork, at a random point, written on.
		parent, ok := w.pick(func(id string) bool { return !isV2ID(id) })
		if !ok {
			return
		}
		w.owned = append(w.owned, parent)
		snap, err := w.db.Stat(w.ctx, parent)
		if err != nil {
			w.fail("stat", parent, err)
			return
		}
		id := w.newID("-f")
		h, err := w.db.Fork(w.ctx, parent, uint64(w.r.IntN(int(snap.EventCount)+1)), store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			w.fail("fork", id, err)
			return
		}
		w.write(id, h)
	case n < 90:
		if !w.compact {
			return
		}
		ratio := []float64{0.3, 0.6, 0.9, 1}[w.r.IntN(4)]
		if _, err := w.db.Compact(w.ctx, engine.CompactOptions{LiveRatio: ratio, Roll: w.r.IntN(2) == 0}); err != nil && !errors.Is(err, store.ErrLocked) {
			w.fail("compact", "-", err) // (ErrLocked: the other process compacts)
		}
	default:
		if err := w.db.Flush(w.ctx); err != nil {
			w.fail("db-flush", "-", err)
		}
	}
}

// write appends and enqueues a few batches to h (session id), flushing
// now and then, and closes it.
func (w *liveWorker) write(id string, h *engine.Handle) {
	next := h.Len()
	for range w.r.IntN(5) {
		evs := make([]event.Event, 1+w.r.IntN(12))
		for i := range evs {
			evs[i] = mixEvent(id, next+uint64(i))
		}
		var err error
		if w.r.IntN(2) == 0 {
			err = h.Append(w.ctx, evs...)
		} else {
			err = h.Enqueue(evs...)
		}
		if err != nil {
			w.fail("append", id, err)
			break
		}
		next += uint64(len(evs))
		if w.r.IntN(4) == 0 {
			if err := h.Flush(w.ctx); err != nil {
				w.fail("flush", id, err)
				break
			}
		}
	}
	if w.r.IntN(3) == 0 {
		if err := h.Flush(w.ctx); err != nil { // (a session created and flushed empty exists)
			w.fail("flush", id, err)
		}
	}
	if err := h.Close(); err != nil {
		w.fail("close", id, err)
		return
	}
	if _, err := w.db.Stat(w.ctx, id); errors.Is(err, store.ErrSessionNotFound) {
		return // created, never written: it vanished
	}
	w.owned = append(w.owned, id)
}

// liveWriter is a writer process started by the parent.
type liveWriter struct {
	cmd    *exec.Cmd
	stderr *tailBuffer
	mu     sync.Mutex
	errs   []string // the child's "err" lines
	done   chan struct{}
}

// startLiveWriter starts a writer process on dir and waits for it to be
// ready; it is killed when the test ends.
func startLiveWriter(t *testing.T, dir string, seed int, compact bool) *liveWriter {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), liveDirEnv+"="+dir, liveSeedEnv+"="+strconv.Itoa(seed))
	if !compact {
		cmd.Env = append(cmd.Env, liveCompactEnv+"=0")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &liveWriter{cmd: cmd, stderr: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.kill)
	ready := make(chan struct{})
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "ready":
				close(ready)
			case strings.HasPrefix(line, "err "):
				w.mu.Lock()
				w.errs = append(w.errs, strings.TrimPrefix(line, "err "))
				w.mu.Unlock()
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case <-ready:
	case <-w.done:
		w.kill()
		t.Fatalf("writer process %d ended before it was ready; its stderr:\n%s", seed, w.stderr)
	}
	return w
}

// kill ends the writer with SIGKILL and waits for it.
func (w *liveWriter) kill() {
	if w.cmd.ProcessState != nil {
		return
	}
	w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
	w.cmd.Wait()
}

// failures returns the operations the writer reported failed.
func (w *liveWriter) failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}

// TestCheckBesideWriters runs engine.Check (what seglog check runs) in a
// loop beside two writer processes (see the top of this file) and fails on
// every problem it reports: the store is healthy. 60 checks (15 with
// -short, 400 with SEGLOG_LONG=1; SEGLOG_CHECK_LIVE_CHECKS=n sets n); at
// the end the writers are killed and the store at rest checked once more.
func TestCheckBesideWriters(t *testing.T) {
	checks := testlong.Pick(15, 60, 400)
	if s := os.Getenv("SEGLOG_CHECK_LIVE_CHECKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SEGLOG_CHECK_LIVE_CHECKS=%q is not a positive number", s)
		}
		checks = n
	}
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writers := []*liveWriter{startLiveWriter(t, dir, 1, true), startLiveWriter(t, dir, 2, true)}
	var failed, frames, sessions, kills int
	var shown int
	var opsFailed []string
	for i := range checks {
		if i > 0 && i%liveKillEvery == 0 {
			// A writer killed with SIGKILL (whatever it was doing: a
			// placement, a sync, a fork's or a migration's group, a
			// compaction) and another one started in its place.
			k := kills % len(writers)
			kills++
			writers[k].kill()
			opsFailed = append(opsFailed, writers[k].failures()...)
			writers[k] = startLiveWriter(t, dir, len(writers)+kills, true)
		}
		rep, err := engine.Check(dir, nil)
		if err != nil {
			failed++
			t.Errorf("check %d of %d beside the writers: %v", i+1, checks, err)
			continue
		}
		frames, sessions = max(frames, rep.Frames), max(sessions, rep.Sessions)
		if len(rep.Problems) == 0 {
			continue
		}
		failed++
		if shown < 5 {
			shown++
			ps := rep.Problems[:min(len(rep.Problems), 10)]
			var b strings.Builder
			for _, p := range ps {
				fmt.Fprintf(&b, "\n\t%s", p)
			}
			for _, n := range rep.Notes {
				fmt.Fprintf(&b, "\n\tnote: %s", n)
			}
			t.Errorf("check %d of %d beside the writers: %d problems on a healthy store (%d segments, %d frames, %d sessions):%s", i+1, checks, len(rep.Problems), rep.Segments, rep.Frames, rep.Sessions, b.String())
		}
	}
	for _, w := range writers {
		w.kill()
		opsFailed = append(opsFailed, w.failures()...)
	}
	if len(opsFailed) > 0 {
		t.Errorf("the writers: %d operations failed on a healthy store, the first: %s", len(opsFailed), opsFailed[0])
	}
	t.Logf("%d checks beside two writers, %d of them killed and replaced (up to %d frames, %d sessions): %d reported problems", checks, kills, frames, sessions, failed)
	if failed > 0 {
		t.Errorf("%d of %d checks beside the writers reported problems on a healthy store (%.0f%%)", failed, checks, 100*float64(failed)/float64(checks))
	}
	rep, err := engine.Check(dir, nil)
	if err != nil {
		t.Fatalf("check at rest: %v", err)
	}
	for _, p := range rep.Problems {
		t.Errorf("check at rest: %s", p)
	}
}

// TestCheckBesideWritersFindsDamage damages a frame of a sealed segment
// while a writer process writes the store (without compaction, which
// could rewrite the segment away), and checks that every check beside the
// writer reports it at the segment and the frame's offset.
func TestCheckBesideWritersFindsDamage(t *testing.T) {
	checks := testlong.Pick(3, 5, 40)
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := startLiveWriter(t, dir, 1, false)
	// Wait for a few sealed segments (the writer rolls every 64 KiB; the
	// newest one or two are the active one and one prepared for the next
	// roll).
	var ids []uint64
	for len(ids) < 5 {
		select {
		case <-w.done:
			t.Fatalf("the writer process ended; its stderr:\n%s", w.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		var err error
		if ids, err = segment.List(nil, dir); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := engine.Check(dir, nil)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check before the damage: %v, %v", err, rep.Problems)
	}
	// The third frame of the second segment: a byte in its payload.
	path := filepath.Join(dir, segment.Name(ids[1]))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	if _, err := segment.Scan(path, data, segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		offs = append(offs, fi.Offset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(offs) < 4 {
		t.Fatalf("segment %s holds %d frames, want 4 or more", path, len(offs))
	}
	at := offs[2]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	defer f.Close()
	if _, err := f.ReadAt(b, at+48); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at+48); err != nil {
		t.Fatal(err)
	}
	for i := range checks {
		rep, err := engine.Check(dir, nil)
		if err != nil {
			t.Fatalf("check %d beside the writer: %v", i+1, err)
		}
		found := false
		for _, p := range rep.Problems {
			if p.Path == path && p.Offset == at {
				found = true
			}
		}
		if !found {
			t.Errorf("check %d beside the writer: the damaged frame %s @%d is not reported; the problems: %v", i+1, path, at, rep.Problems)
		}
	}
	w.kill()
}

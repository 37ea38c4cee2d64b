package fuzz

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// The SIGKILL campaign with the persistent index on and the full mix of
// operations (ISSUE 15, "Make the tests meet these"). A child process (this
// test binary, re-executed) opens the store on real files with the default
// bbolt index, small segments, fast index checkpoints and background
// compaction, and runs from mixWorkers goroutines: creates of short
// sessions, Append and Enqueue, Flush (handle and DB), Close, reopens for
// write, Delete, Compact with rewrites, and Migrate of v2 sessions (or a
// write open, which migrates them by itself). It
// prints every acknowledged fact on stdout as it happens. The parent kills
// it with SIGKILL at a random moment and checks the store against those
// facts, then the next round's child continues the same store.

const (
	mixChildEnv  = "SEGLOG_SIGKILL_MIX_DIR"
	mixSeedEnv   = "SEGLOG_SIGKILL_MIX_SEED"
	mixRoundsEnv = "SEGLOG_SIGKILL_ROUNDS"    // rounds of TestSIGKILLMix (a long campaign)
	mixGoingEnv  = "SEGLOG_SIGKILL_KEEPGOING" // after a failed round, start a fresh store and go on
	mixWorkers   = 12
	// mixMaxOwned is how many sessions a worker keeps before it deletes
	// its oldest: the newest sessions live on for a while, so that a
	// tombstone does not hide their loss (the engine accepts events of a
	// session without a header when a tombstone follows them).
	mixMaxOwned = 30
)

// mixOptions are the options of round's child and of the parent's reopen:
// the persistent index is on (the default on the OS file system), segments
// are small so that rolls are frequent, and the index checkpoint and the
// background compactor run often. Each round draws its own from the
// round number: a fast checkpoint exercises the indexer racing appends and
// rolls, a slow one (the default 1s) leaves a checkpoint in place long
// enough for the kill to find it.
func mixOptions(round int) *engine.Options {
	r := rand.New(rand.NewPCG(uint64(round), 7))
	return &engine.Options{
		SegmentSize:       []int64{64 << 10, 128 << 10, 256 << 10}[r.IntN(3)],
		IndexInterval:     []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond, time.Second, time.Second}[r.IntN(5)],
		CompactInterval:   []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, time.Second}[r.IntN(3)],
		WriteBehindWindow: 2 * time.Millisecond,
	}
}

func mixOptionsString(round int) string {
	o := mixOptions(round)
	return fmt.Sprintf("segments of %d KiB, index checkpoint every %v, compaction every %v", o.SegmentSize>>10, o.IndexInterval, o.CompactInterval)
}

// mixEvent is event seq of the v3 session id: a pure function of both, so
// the parent regenerates every byte and a frame of another session (or
// another seq) never passes for it.
func mixEvent(id string, seq uint64) event.Event {
	h := fnv.New32a()
	h.Write([]byte(id))
	e := testgen.Event(seq, 100+int((seq*37+uint64(h.Sum32()))%900))
	e.Data = json.RawMessage(fmt.Sprintf(`{"session":%q,%s`, id, e.Data[1:]))
	return e
}

// mixV2Log is the whole v2 log of the v2 session id (ids ending in "-v2"):
// one to three turns, the first with a v2 replace envelope, so that
// Migrate has something to convert.
func mixV2Log(id string) []event.Event {
	h := fnv.New32a()
	h.Write([]byte(id))
	return testgen.V2Turns(id+"-", 1+int(h.Sum32()%3))
}

func isV2ID(id string) bool { return strings.HasSuffix(id, "-v2") }

// mixWorkerOf is the child worker that owns a session left by an earlier
// round: every session has one owner, so the facts about it are printed in
// the order they happened.
func mixWorkerOf(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % mixWorkers)
}

// mixChild is the child: it opens the store, prints "ready", and runs the
// mix until it is killed. Facts, each printed once it is acknowledged:
//
//	create <id>      before Create (the session may exist from here on)
//	ack <id> <n>     a Flush or Close returned nil: n events are durable
//	delete <id>      before Delete (the session may be gone from here on)
//	deleted <id>     Delete returned nil
//	migrated <id>    Migrate (or a write open and Close) returned nil
//	err <op> <id>: … an operation failed (a healthy store fails none)
func mixChild(dir string) int {
	ctx := context.Background()
	seed, _ := strconv.ParseUint(os.Getenv(mixSeedEnv), 10, 64)
	db, err := enginetest.OpenUnchecked("a child process the parent SIGKILLs; the parent checks the store (engine.Check each round)", dir, mixOptions(int(seed)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	snaps, err := db.List(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child list:", err)
		return 2
	}
	owned := make([][]string, mixWorkers)
	for _, s := range snaps {
		g := mixWorkerOf(s.Header.ID)
		owned[g] = append(owned[g], s.Header.ID)
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
	var wg sync.WaitGroup
	for g := range mixWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &mixWorker{db: db, ctx: ctx, g: g, seed: seed, say: say, owned: owned[g],
				r: rand.New(rand.NewPCG(seed, uint64(g)))}
			for w.step() {
			}
		}()
	}
	wg.Wait()
	// Every worker stopped on an error; wait for the kill.
	select {}
}

type mixWorker struct {
	db      *engine.DB
	ctx     context.Context
	g       int
	seed    uint64
	r       *rand.Rand
	say     func(string, ...any)
	owned   []string // sessions this worker owns (closed)
	deleted []string // ids it deleted, to create again
	made    int
	// noCompact: a Compact of this worker failed; it calls no more.
	noCompact bool
}

func (w *mixWorker) fail(op, id string, err error) bool {
	w.say("err %s %s: %v", op, id, err)
	fmt.Fprintf(os.Stderr, "child worker %d: %s %s: %v\n", w.g, op, id, err)
	return false
}

// pick removes and returns a random owned session accepted by ok.
func (w *mixWorker) pick(ok func(string) bool) (string, bool) {
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

func (w *mixWorker) newID(v2 bool) string {
	w.made++
	id := fmt.Sprintf("s%d-g%d-%d", w.seed, w.g, w.made)
	if v2 {
		id += "-v2"
	}
	return id
}

// step runs one operation; false after a failure.
func (w *mixWorker) step() bool {
	if len(w.owned) > mixMaxOwned {
		return w.delete(0)
	}
	switch n := w.r.IntN(100); {
	case n < 45:
		return w.write(w.newID(false), true)
	case n < 60:
		id, ok := w.pick(func(id string) bool { return !isV2ID(id) })
		if !ok {
			return true
		}
		return w.write(id, false)
	case n < 66:
		if len(w.owned) == 0 {
			return true
		}
		return w.delete(w.r.IntN(len(w.owned)))
	case n < 74:
		return w.createV2(w.newID(true))
	case n < 80:
		return w.migrate()
	case n < 86:
		if len(w.deleted) == 0 {
			return true
		}
		i := w.r.IntN(len(w.deleted))
		id := w.deleted[i]
		w.deleted = append(w.deleted[:i], w.deleted[i+1:]...)
		if isV2ID(id) {
			return w.createV2(id)
		}
		return w.write(id, true)
	case n < 92:
		if w.noCompact {
			return true
		}
		ratio := []float64{0.3, 0.6, 0.9, 1}[w.r.IntN(4)]
		if _, err := w.db.Compact(w.ctx, engine.CompactOptions{LiveRatio: ratio, Roll: w.r.IntN(2) == 0}); err != nil {
			// Reported; the worker goes on with the rest of the mix
			// (a failed compaction loses nothing) but compacts no more.
			w.fail("compact", "-", err)
			w.noCompact = true
		}
		return true
	default:
		if err := w.db.Flush(w.ctx); err != nil {
			return w.fail("db-flush", "-", err)
		}
		return true
	}
}

// write creates the v3 session id (create) or opens it for write, appends
// and enqueues a few short batches, flushes now and then, and closes it.
func (w *mixWorker) write(id string, create bool) bool {
	var h *engine.Handle
	var next uint64
	if create {
		w.say("create %s", id)
		var err error
		if h, err = w.db.Create(w.ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
			return w.fail("create", id, err)
		}
	} else {
		var err error
		if h, err = w.db.Open(w.ctx, id, store.Write); err != nil {
			return w.fail("open", id, err)
		}
		snap, err := w.db.Stat(w.ctx, id)
		if err != nil {
			return w.fail("stat", id, err)
		}
		next = snap.EventCount
	}
	for range w.r.IntN(4) {
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
			h.Close()
			return w.fail("append", id, err)
		}
		next += uint64(len(evs))
		switch w.r.IntN(6) {
		case 0:
			if err := h.Flush(w.ctx); err != nil {
				h.Close()
				return w.fail("flush", id, err)
			}
			w.say("ack %s %d", id, next)
		case 1:
			if err := w.db.Flush(w.ctx); err != nil {
				h.Close()
				return w.fail("db-flush", id, err)
			}
			w.say("ack %s %d", id, next)
		}
	}
	if create && next == 0 && w.r.IntN(2) == 0 {
		// A created session flushed empty exists.
		if err := h.Flush(w.ctx); err != nil {
			h.Close()
			return w.fail("flush", id, err)
		}
		w.say("ack %s 0", id)
	}
	if err := h.Close(); err != nil {
		return w.fail("close", id, err)
	}
	if _, err := w.db.Stat(w.ctx, id); errors.Is(err, store.ErrSessionNotFound) {
		return true // created, never written: it vanished
	}
	w.say("ack %s %d", id, next)
	w.owned = append(w.owned, id)
	return true
}

// createV2 creates the v2 session id with its whole log and closes it.
func (w *mixWorker) createV2(id string) bool {
	w.say("create %s", id)
	h, err := w.db.Create(w.ctx, store.Header{Version: 2, ID: id, CreatedAt: 1})
	if err != nil {
		return w.fail("create", id, err)
	}
	evs := mixV2Log(id)
	if err := h.Append(w.ctx, evs...); err != nil {
		h.Close()
		return w.fail("append", id, err)
	}
	if err := h.Close(); err != nil {
		return w.fail("close", id, err)
	}
	w.say("ack %s %d", id, len(evs))
	w.owned = append(w.owned, id)
	return true
}

// delete deletes the worker's i-th session (0: its oldest).
func (w *mixWorker) delete(i int) bool {
	id := w.owned[i]
	w.owned = append(w.owned[:i], w.owned[i+1:]...)
	w.say("delete %s", id)
	if err := w.db.Delete(w.ctx, id); err != nil {
		return w.fail("delete", id, err)
	}
	w.say("deleted %s", id)
	w.deleted = append(w.deleted, id)
	return true
}

func (w *mixWorker) migrate() bool {
	id, ok := w.pick(isV2ID)
	if !ok {
		return true
	}
	if w.r.IntN(2) == 0 {
		// A write open migrates by itself (then nothing is appended: the
		// parent knows the log as the migration of the v2 one).
		h, err := w.db.Open(w.ctx, id, store.Write)
		if err != nil {
			return w.fail("open-migrate", id, err)
		}
		if err := h.Close(); err != nil {
			return w.fail("close", id, err)
		}
	} else if _, err := w.db.Migrate(w.ctx, id); err != nil {
		return w.fail("migrate", id, err)
	}
	w.say("migrated %s", id)
	w.owned = append(w.owned, id)
	return true
}

// mixFacts is what the parent knows of one session from the child's
// reports.
type mixFacts struct {
	acked    int64 // events acknowledged durable; -1: none since its last create
	deleting bool  // Delete called: the session may be gone
	deleted  bool  // Delete acknowledged, not created again since
	migrated bool  // Migrate acknowledged since its last create
}

// mixState is the parent's record of every session any child announced.
type mixState map[string]*mixFacts

// apply takes one line of the child; it returns the child's error report, if
// the line is one.
func (st mixState) apply(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	if f[0] == "err" {
		return strings.TrimPrefix(line, "err ")
	}
	s := st[f[1]]
	if s == nil {
		s = &mixFacts{acked: -1}
		st[f[1]] = s
	}
	switch f[0] {
	case "create":
		*s = mixFacts{acked: -1}
	case "ack":
		if len(f) == 3 {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil && n > s.acked {
				s.acked = n
			}
		}
	case "delete":
		s.deleting = true
	case "deleted":
		*s = mixFacts{acked: -1, deleted: true}
	case "migrated":
		s.migrated = true
	}
	return ""
}

// mixRound is one round's outcome: problems by kind.
type mixRound struct {
	problems []string
	fatal    bool // the store cannot be continued (it does not open)
}

// kinds lists the kinds of m's problems with their counts.
func (m *mixRound) kinds() string {
	n := map[string]int{}
	var order []string
	for _, p := range m.problems {
		k := p[:strings.Index(p, ":")]
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	var b strings.Builder
	for i, k := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", n[k], k)
	}
	return b.String()
}

func (m *mixRound) has(kinds ...string) bool {
	for _, p := range m.problems {
		for _, k := range kinds {
			if strings.HasPrefix(p, k+":") {
				return true
			}
		}
	}
	return false
}

func (m *mixRound) add(kind, format string, args ...any) {
	m.problems = append(m.problems, kind+": "+fmt.Sprintf(format, args...))
}

// TestSIGKILLMix is the SIGKILL campaign with the index on and the full mix
// (see the comment at the top of this file). Each round: start the child on
// the store, kill it at a random moment, then
//   - engine.Check on the store as the kill left it reports no problem (a
//     killed store is a state Open must accept, so check must too);
//   - engine.Open succeeds;
//   - every acknowledged event is there byte for byte, every session whose
//     Delete was acknowledged (and that was not created again) is gone, every
//     acknowledged migration took effect, and nothing else is there but
//     prefixes of what the child wrote;
//   - after Close, engine.Check reports no problem;
//   - the child of the round reported no failed operation.
//
// 12 rounds (about a second each; 5 with -short, 100 with SEGLOG_LONG=1);
// SEGLOG_SIGKILL_ROUNDS=n sets n rounds; SEGLOG_SIGKILL_KEEPGOING=1 goes
// on after a failed round with a fresh store and reports the failure rate
// at the end.
func TestSIGKILLMix(t *testing.T) {
	rounds := sigkillRounds(t, 5, 12, 100)
	keepGoing := os.Getenv(mixGoingEnv) == "1"
	base := t.TempDir()
	storeN := 0
	dir := filepath.Join(base, "store0")
	st := mixState{}
	var ran, failed, fresh, storeRounds, kept, shown int
	stats := mixStats{}
	for round := range rounds {
		ran++
		res, stderrTail := mixRunRound(t, dir, round, st)
		storeRounds++
		if len(res.problems) == 0 {
			continue
		}
		failed++
		stats.add(res)
		// Lost or wrong data, or a store that does not open: the store
		// cannot be continued (its facts no longer hold). Problems of
		// check alone, or of an operation in the child, leave a store
		// whose facts hold: the next round continues it.
		broken := res.fatal || res.has("lost", "garbled", "deleted", "unknown", "migrated", "read", "close", "child")
		if !broken && shown >= 3 {
			t.Errorf("round %d (round %d of this store): %d problems: %s", round, storeRounds, len(res.problems), res.kinds())
			continue
		}
		shown++
		where := "(not kept: enough are)"
		if kept < 10 {
			where = mixKeep(t, dir, round)
			kept++
		}
		const show = 20
		// The broken facts first, then what check and the child said.
		ps := slices.Clone(res.problems)
		minor := func(p string) bool { return strings.HasPrefix(p, "check-") || strings.HasPrefix(p, "child-op:") }
		sort.SliceStable(ps, func(i, j int) bool { return !minor(ps[i]) && minor(ps[j]) })
		more := ""
		if len(ps) > show {
			more = fmt.Sprintf("\n\t… and %d more", len(ps)-show)
			ps = ps[:show]
		}
		t.Errorf("round %d (round %d of this store; %s): %d problems:\n\t%s%s\nthe store as the kill left it (killed/) and after the check (after/): %s\nchild's stderr (tail):\n%s",
			round, storeRounds, mixOptionsString(round), len(res.problems), strings.Join(ps, "\n\t"), more, where, stderrTail)
		if !broken {
			continue
		}
		if !keepGoing {
			break
		}
		storeN++
		fresh++
		dir = filepath.Join(base, fmt.Sprintf("store%d", storeN))
		st = mixState{}
		storeRounds = 0
	}
	var acked int64
	var deleted, migrated int
	for _, s := range st {
		acked += max(s.acked, 0)
		if s.deleted {
			deleted++
		}
		if s.migrated {
			migrated++
		}
	}
	t.Logf("%d SIGKILL rounds, %d with problems, %d fresh stores after broken ones; the last store: %d sessions known, %d acknowledged events, %d deleted, %d migrated",
		ran, failed, fresh, len(st), acked, deleted, migrated)
	if failed > 0 {
		t.Logf("rounds with each kind of problem, and the distinct problems (numbers and names blanked) with their count and a first example:\n%s", stats)
	}
}

// mixStats counts the problems of failed rounds: rounds per kind, and
// occurrences of each distinct problem.
type mixStats struct {
	kinds    map[string]int
	problems map[string]int
	example  map[string]string
}

var (
	mixQuoted = regexp.MustCompile(`"[^"]*"`)
	mixPath   = regexp.MustCompile(`/[^ :]*/`)
	mixNumber = regexp.MustCompile(`[0-9a-f]{16,}|[0-9]+`)
)

func (s *mixStats) add(res *mixRound) {
	if s.kinds == nil {
		s.kinds, s.problems, s.example = map[string]int{}, map[string]int{}, map[string]string{}
	}
	seen := map[string]bool{}
	for _, p := range res.problems {
		k := p[:strings.Index(p, ":")]
		if !seen[k] {
			s.kinds[k]++
			seen[k] = true
		}
		n := mixNumber.ReplaceAllString(mixPath.ReplaceAllString(mixQuoted.ReplaceAllString(p, `"…"`), ".../"), "N")
		if s.problems[n] == 0 {
			s.example[n] = p
		}
		s.problems[n]++
	}
}

func (s mixStats) String() string {
	var b strings.Builder
	keys := make([]string, 0, len(s.kinds))
	for k := range s.kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %d rounds\n", k, s.kinds[k])
	}
	keys = keys[:0]
	for k := range s.problems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %5d × %s\n          e.g. %s\n", s.problems[k], k, s.example[k])
	}
	return b.String()
}

// mixRunRound runs one child on dir, kills it, and checks the store.
func mixRunRound(t *testing.T, dir string, round int, st mixState) (*mixRound, string) {
	t.Helper()
	res := &mixRound{}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mixChildEnv+"="+dir, mixSeedEnv+"="+strconv.Itoa(round))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan []string)
	go func() {
		var errs []string
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		first := true
		for sc.Scan() {
			if sc.Text() == "ready" && first {
				close(ready)
				first = false
				continue
			}
			if e := st.apply(sc.Text()); e != "" {
				errs = append(errs, e)
			}
		}
		io.Copy(io.Discard, stdout)
		done <- errs
	}()
	// Mostly kill in the middle of the mix; one round in eight, while the
	// child may still be opening (recovering) the store.
	if rand.IntN(8) == 0 {
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
	} else {
		select {
		case <-ready:
		case <-time.After(20 * time.Second):
		}
		// Half the kills come soon; half after a second or two, when
		// the index checkpoint (1s by default) has run in the child.
		if rand.IntN(2) == 0 {
			time.Sleep(time.Duration(5+rand.IntN(300)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(300+rand.IntN(2200)) * time.Millisecond)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	childErrs := <-done
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		res.add("child", "ended with %v, not by SIGKILL", err)
		res.fatal = true
	}
	for _, e := range childErrs {
		res.add("child-op", "%s", e)
	}
	mixCheckStore(t, dir, round, st, res)
	return res, stderr.String()
}

// mixCheckStore checks the killed store in dir against st.
func mixCheckStore(t *testing.T, dir string, round int, st mixState, res *mixRound) {
	t.Helper()
	ctx := context.Background()
	// Keep the store as the kill left it until the round is judged.
	killed := dir + ".killed"
	os.RemoveAll(killed)
	if err := copyDir(dir, killed); err != nil {
		t.Fatal(err)
	}
	checked := false
	if rep, err := engine.Check(dir, mixOptions(round)); err != nil {
		res.add("check-before-open", "%v", err)
	} else {
		checked = len(rep.Problems) == 0
		for _, p := range rep.Problems {
			res.add("check-before-open", "%s", p)
		}
	}
	db, err := enginetest.OpenStore(t, dir, mixOptions(round))
	if err != nil {
		res.add("open", "%v", err)
		if checked {
			res.add("check-missed", "check found no problem in the store that Open refuses")
		}
		res.fatal = true
		return
	}
	listed := map[string]bool{}
	snaps, err := db.List(ctx)
	if err != nil {
		res.add("open", "List: %v", err)
	}
	for _, s := range snaps {
		id := s.Header.ID
		listed[id] = true
		f := st[id]
		switch {
		case f == nil:
			res.add("unknown", "session %q is in the store, the child never created it", id)
			continue
		case f.deleted:
			res.add("deleted", "session %q is back after its Delete was acknowledged", id)
		}
		if f.migrated && s.FormatStatus != store.FormatCurrent {
			res.add("migrated", "session %q: migration was acknowledged, the store has it in version %d", id, s.Header.Version)
		}
		if n, ok := mixCheckSession(ctx, db, id, f, res); ok && !isV2ID(id) {
			// What a reopen showed stays: a killed process loses no
			// write it made, so the next rounds must find it too.
			f.acked = max(f.acked, int64(n))
		}
		f.deleting = false // the Delete did not take effect
	}
	for id, f := range st {
		if !listed[id] {
			if f.acked >= 0 && !f.deleting && !f.deleted {
				res.add("lost", "session %q is gone, %d events were acknowledged", id, f.acked)
			}
			if f.deleting {
				*f = mixFacts{acked: -1, deleted: true} // the Delete took effect
			}
		}
	}
	if err := db.Close(); err != nil {
		res.add("close", "%v", err)
	}
	if rep, err := engine.Check(dir, mixOptions(round)); err != nil {
		res.add("check-after-close", "%v", err)
	} else {
		for _, p := range rep.Problems {
			res.add("check-after-close", "%s", p)
		}
	}
}

// mixCheckSession checks that session id holds what the child wrote: every
// acknowledged event, and nothing but a prefix of its generator. It returns
// the number of events and whether they are right.
func mixCheckSession(ctx context.Context, db *engine.DB, id string, f *mixFacts, res *mixRound) (int, bool) {
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		res.add("read", "open %q: %v", id, err)
		return 0, false
	}
	defer h.Close()
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		res.add("read", "read %q: %v", id, err)
		return 0, false
	}
	if isV2ID(id) {
		// Read handles see a v2 session migrated; a migrated one is the
		// same. An unacknowledged one may hold a prefix of its log.
		src := mixV2Log(id)
		lo := 0
		if f.acked >= 0 {
			lo = min(int(f.acked), len(src))
		}
		for k := len(src); k >= lo; k-- {
			want, err := recovery.MigrateV2(id, src[:k])
			if err == nil && sameEvents(evs, want) {
				return len(evs), true
			}
		}
		if f.acked >= 0 {
			res.add("lost", "v2 session %q: %d events read are not its acknowledged log of %d events (migrated)", id, len(evs), f.acked)
		} else {
			res.add("garbled", "v2 session %q: %d events read are no prefix of its log (migrated)", id, len(evs))
		}
		return len(evs), false
	}
	if int64(len(evs)) < f.acked {
		res.add("lost", "session %q has %d events, %d were acknowledged (or seen by an earlier reopen)", id, len(evs), f.acked)
		return len(evs), false
	}
	for i, e := range evs {
		if !sameEvent(e, mixEvent(id, uint64(i))) {
			res.add("garbled", "session %q event %d (of %d) is not what the child wrote", id, i, len(evs))
			return len(evs), false
		}
	}
	return len(evs), true
}

func sameEvents(a, b []event.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameEvent(a[i], b[i]) {
			return false
		}
	}
	return true
}

// mixKeep copies the failed round's store (as the kill left it, and as it
// is after the check) to a directory that outlives the test, and returns
// its path.
func mixKeep(t *testing.T, dir string, round int) string {
	t.Helper()
	keep, err := os.MkdirTemp("", fmt.Sprintf("seglog-sigkill-mix-r%d-", round))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to string }{{dir + ".killed", "killed"}, {dir, "after"}} {
		if err := copyDir(c.from, filepath.Join(keep, c.to)); err != nil {
			t.Logf("keeping %s: %v", c.from, err)
		}
	}
	return keep
}

// copyDir copies the regular files of from (not recursive) into to.
func copyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(from, n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	head []byte // the first max/2 bytes: a fatal error's reason comes first
	b    []byte // the last max bytes after them
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	written := len(p)
	if n := min(w.max/2-len(w.head), len(p)); n > 0 {
		w.head = append(w.head, p[:n]...)
		p = p[n:]
	}
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append(w.b[:0], w.b[len(w.b)-w.max:]...)
	}
	return written, nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.b) == 0 {
		return string(w.head)
	}
	return string(w.head) + "\n[...]\n" + string(w.b)
}

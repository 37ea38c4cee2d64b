package fuzz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// The SIGKILL campaign of hosts that never flush mid-turn (issue 37, the
// durability window). One to three child processes (this test binary,
// re-executed) share one store; each runs noflushSessions agent-host
// sessions, a goroutine each, that hand the events of whole turns
// (bench.AgentTurn: turn/start, the user's message, streamed assistant
// chunks, tool calls and results, 100 B to a few KiB each) to Append or
// Enqueue one at a time, every few to tens of milliseconds, and flush only
// at a turn's end, or never. The parent kills every child with SIGKILL at
// a random moment and, from what the children reported, checks the store:
//
//   - Check of the store as the kills left it finds no problem;
//   - every event a Flush acknowledged is there, byte for byte;
//   - every event handed over more than the window plus one sync
//     (noflushSlack) before its process's kill is there, byte for byte;
//   - each session's log is its log before the round followed by a prefix
//     of the events its host handed over (or was handing over): nothing
//     after a hole, nothing nobody wrote;
//   - Resume of every session closes the turn the kill cut (the closers
//     of recovery.InterruptedTurnClosers, then a balanced log), and Check
//     after the close finds no problem.
//
// The next round's children continue every session from what is stored
// (a fresh store every noflushStoreRounds rounds). The test logs the
// largest age of an event the kills took, how many events younger than
// the bound were lost and kept, and the latency of the children's
// turn-end flushes (what "one sync" cost on this machine).

const (
	noflushDirEnv    = "SEGLOG_SIGKILL_NOFLUSH_DIR"
	noflushSlotEnv   = "SEGLOG_SIGKILL_NOFLUSH_SLOT"   // the child's process slot: its sessions
	noflushSeedEnv   = "SEGLOG_SIGKILL_NOFLUSH_SEED"   // its random pace
	noflushWindowEnv = "SEGLOG_SIGKILL_NOFLUSH_WINDOW" // Options.WriteBehindWindow, a duration
	noflushCorpusEnv = "SEGLOG_SIGKILL_NOFLUSH_CORPUS" // the corpus snapshot's directory
	// noflushSlackEnv sets the slack, "one sync" (a Go duration).
	noflushSlackEnv = "SEGLOG_NOFLUSH_SLACK"
	// noflushSessions is how many sessions each child process writes:
	// j%3 == 0 never flushes, the others flush at each turn's end; odd j
	// hand half their events to Enqueue.
	noflushSessions    = 5
	noflushStoreRounds = 10
)

// noflushSlack is the "one sync" of the promise "durable within the
// window plus one sync": the time from a window's end to its events being
// written (a SIGKILL keeps what write(2) handed the kernel), that is the
// window's timer firing late on a loaded machine, the wait for the group
// commit in progress (the fdatasync of another flush, of any session or
// process) and the placement of the frames. 500 ms by default: a
// turn-end flush (the same work, ended by its own fdatasync) takes about
// 1-30 ms on a quiet machine, and the test logs the largest it saw.
// SEGLOG_NOFLUSH_SLACK sets another. A round whose slowest turn-end
// flush took more than half the slack takes twice that flush instead: on
// a loaded disk one sync is what the disk makes of it.
func noflushSlack(t *testing.T) time.Duration {
	s := os.Getenv(noflushSlackEnv)
	if s == "" {
		return 500 * time.Millisecond
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q is not a duration", noflushSlackEnv, s)
	}
	return d
}

// noflushOptions are the children's and the parent's options: 256 KiB
// segments (a run rolls several times), the default index checkpoint,
// and the durability window of the round.
func noflushOptions(window time.Duration) *engine.Options {
	return &engine.Options{SegmentSize: 256 << 10, WriteBehindWindow: window}
}

func noflushID(slot, j int) string { return fmt.Sprintf("p%d-s%d", slot, j) }

// noflushNum is session slot/j's number for bench.AgentTurn.
func noflushNum(slot, j int) int { return slot*100 + j }

// noflushChild is a child: it opens the store and runs its sessions until
// it is killed. Lines it prints, each with one write:
//
//	ready                      the store is open
//	turn <id> <t> <seq> <n>    it starts turn t, events seq..seq+n-1 (bench.AgentTurn)
//	hand <id> <end> <unixns>   Append or Enqueue of the event end-1 returned at unixns
//	ack <id> <n> <ns>          Flush returned nil: n events are durable; it took ns
//	err <op> <id>: …           an operation failed
func noflushChild(dir string) int {
	slot, err1 := strconv.Atoi(os.Getenv(noflushSlotEnv))
	seed, err2 := strconv.ParseUint(os.Getenv(noflushSeedEnv), 10, 64)
	window, err3 := time.ParseDuration(os.Getenv(noflushWindowEnv))
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad environment:", err)
		return 2
	}
	corpus, err := bench.LoadCorpus(os.Getenv(noflushCorpusEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child corpus:", err)
		return 2
	}
	db, err := enginetest.OpenUnchecked("a child process the parent SIGKILLs; the parent checks the store (engine.Check each round)", dir, noflushOptions(window))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		mu.Lock()
		os.Stdout.WriteString(line)
		mu.Unlock()
	}
	say("ready")
	for j := range noflushSessions {
		go noflushHost(db, corpus, slot, j, rand.New(rand.NewPCG(seed, uint64(j))), say)
	}
	select {}
}

// noflushHost is session slot/j's agent host: it continues the session
// from what is stored, turn after turn, until the kill.
func noflushHost(db *engine.DB, corpus *bench.Corpus, slot, j int, r *rand.Rand, say func(string, ...any)) {
	ctx := context.Background()
	id := noflushID(slot, j)
	flusher, enqueuer := j%3 != 0, j%2 == 1
	fail := func(op string, err error) {
		say("err %s %s: %v", op, id, err)
		fmt.Fprintf(os.Stderr, "child %d: %s %s: %v\n", slot, op, id, err)
		select {}
	}
	h, err := db.Open(ctx, id, store.Write)
	if errors.Is(err, store.ErrSessionNotFound) {
		h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	}
	if err != nil {
		fail("open", err)
	}
	stored, err := h.Read(ctx, 0, -1)
	if err != nil {
		fail("read", err)
	}
	turn, next := 0, uint64(len(stored))
	for _, e := range stored {
		if e.Type == recovery.TypeTurnStart {
			turn++
		}
	}
	for {
		evs := bench.AgentTurn(corpus, noflushNum(slot, j), turn, next)
		say("turn %s %d %d %d", id, turn, next, len(evs))
		for _, e := range evs {
			// A host's pace: the model streams chunks every few
			// milliseconds, a tool runs for tens to a hundred or two.
			switch e.Type {
			case "assistant/chunk":
				time.Sleep(time.Duration(2+r.IntN(14)) * time.Millisecond)
			case recovery.TypeToolResult:
				time.Sleep(time.Duration(20+r.IntN(150)) * time.Millisecond)
			default:
				time.Sleep(time.Duration(2+r.IntN(40)) * time.Millisecond)
			}
			if enqueuer && r.IntN(2) == 0 {
				err = h.Enqueue(e)
			} else {
				err = h.Append(ctx, e)
			}
			if err != nil {
				fail("append", err)
			}
			say("hand %s %d %d", id, e.Seq+1, time.Now().UnixNano())
		}
		next += uint64(len(evs))
		turn++
		if flusher {
			start := time.Now()
			if err := h.Flush(ctx); err != nil {
				fail("flush", err)
			}
			say("ack %s %d %d", id, next, time.Since(start))
		}
		time.Sleep(time.Duration(20+r.IntN(400)) * time.Millisecond) // the user reads, then types
	}
}

// noflushProc is a running child.
type noflushProc struct {
	slot   int
	cmd    *exec.Cmd
	stderr *tailBuffer
	ready  chan struct{}
	done   chan struct{} // its stdout is read to the end
	mu     sync.Mutex
	lines  []string
	killT  int64 // unix ns, taken just before its SIGKILL
}

// noflushPlan is what one round's children reported of one session.
type noflushPlan struct {
	planned []event.Event // the events of the turns it started, in order
	first   uint64        // the seq of the first of them
	hands   []noflushHand
	acked   uint64 // the events a Flush acknowledged (a count from seq 0)
	killT   int64
	problem string
}

type noflushHand struct {
	end uint64 // the events handed over so far (a count from seq 0)
	at  int64  // unix ns
}

// noflushStats are the campaign's figures.
type noflushStats struct {
	procs                int
	kind                 [2]noflushCounts // rounds of one process, of several
	cur                  *noflushCounts   // this round's kind
	resumed, interrupted int
	flushLat             []time.Duration
	killDelays           []time.Duration
}

// noflushCounts are the figures of one kind of round.
type noflushCounts struct {
	rounds                 int
	handed, acked          int
	flushedLost            int
	required, requiredLost int   // events handed over more than the bound before the kill
	young, youngLost       int   // the others
	oldestLost, overWindow int64 // ns: the oldest lost; by how much it passed its window
}

// TestSIGKILLNoFlush is the campaign of hosts that never flush mid-turn
// (see the top of this file). Each round starts one child (two rounds in
// three) or two or three on one store, kills each with SIGKILL at a
// random moment (one round in five within the first 0.8 s, the others
// 0.8-2.5 s after they are ready; the processes of a round 0-100 ms
// apart), then checks the store, resumes every session and checks again.
// One round in four (after the first two) runs a window of 50 ms, the
// others the default 200 ms.
//
// 2 rounds (one of one process, one of several, both killed 1-1.3 s in:
// about 3 s; 1 with -short, 200 with SEGLOG_LONG=1, about 6 minutes;
// SEGLOG_SIGKILL_ROUNDS=n: n). SEGLOG_NOFLUSH_SLACK sets the slack
// (noflushSlack).
func TestSIGKILLNoFlush(t *testing.T) {
	rounds := sigkillRounds(t, 1, 2, 100)
	slack := noflushSlack(t)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 37))
	corpusDir := noflushCorpus(t)
	corpus, err := bench.LoadCorpus(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	var st noflushStats
	var dir string
	var bases map[string][]event.Event // each session's log after the last round's Resume
	var running []*noflushProc
	defer func() {
		for _, p := range running {
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Signal(syscall.SIGKILL)
				p.cmd.Wait()
			}
		}
	}()
	start := time.Now()
	for round := range rounds {
		if round%noflushStoreRounds == 0 {
			dir = filepath.Join(t.TempDir(), "store")
			bases = map[string][]event.Event{}
		}
		procs := 1
		if round%3 == 1 || rounds == 1 {
			procs = 2 + rnd.IntN(2)
		}
		window := 200 * time.Millisecond
		if round >= 2 && rnd.IntN(4) == 0 {
			window = 50 * time.Millisecond
		}
		bound := window + slack
		delay := 800*time.Millisecond + time.Duration(rnd.Int64N(int64(1700*time.Millisecond)))
		if round < 2 {
			// The default run: late enough that the first few hundred
			// milliseconds of events must be there, short enough to be quick.
			delay = time.Second + time.Duration(rnd.Int64N(int64(300*time.Millisecond)))
		} else if rnd.IntN(5) == 0 {
			delay = time.Duration(rnd.Int64N(int64(800 * time.Millisecond)))
		}
		st.cur = &st.kind[min(procs-1, 1)]
		st.cur.rounds++
		st.killDelays = append(st.killDelays, delay)

		running = running[:0]
		for slot := range procs {
			running = append(running, noflushStart(t, dir, corpusDir, slot, round, window))
		}
		st.procs += procs
		for _, p := range running {
			select {
			case <-p.ready:
			case <-p.done:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: child %d not ready after 20 s: %s", round, p.slot, p.stderr.String())
			}
		}
		time.Sleep(delay)
		for i, p := range running {
			if i > 0 {
				time.Sleep(time.Duration(rnd.Int64N(int64(100 * time.Millisecond))))
			}
			p.killT = time.Now().UnixNano()
			p.cmd.Process.Signal(syscall.SIGKILL)
		}
		var probs []string
		plans := map[string]*noflushPlan{}
		lats := len(st.flushLat) // this round's flush latencies follow
		for _, p := range running {
			<-p.done
			err := p.cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				probs = append(probs, fmt.Sprintf("child %d ended with %v, not by SIGKILL: %s", p.slot, err, p.stderr.String()))
			}
			if e := p.stderr.String(); strings.Contains(e, "DATA RACE") {
				probs = append(probs, fmt.Sprintf("child %d: the race detector reported:\n%s", p.slot, e))
			}
			probs = append(probs, noflushParse(corpus, p, bases, plans, &st)...)
		}
		label := fmt.Sprintf("round %d (%d processes, window %v, killed %v after ready)", round, procs, window, delay.Round(time.Millisecond))
		// One sync is what the slowest of this round's turn-end flushes
		// took, if that is more than the slack: on a machine whose disk
		// is loaded (a CI runner beside other tests) a sync in progress
		// can hold a window's placement back longer than 500 ms.
		if n := len(st.flushLat); n > lats {
			if worst := 2 * slices.Max(st.flushLat[lats:]); window+worst > bound {
				bound = window + worst
				t.Logf("round %d: the bound is the window + twice this round's slowest turn-end flush: %v", round, bound)
			}
		}
		if len(probs) == 0 {
			probs = noflushVerify(t, ctx, dir, window, bound, bases, plans, &st)
		}
		if len(probs) > 0 {
			keep, err := os.MkdirTemp("", fmt.Sprintf("seglog-sigkill-noflush-r%d-", round))
			if err == nil {
				if err := copyDir(dir, keep); err != nil {
					keep += fmt.Sprintf(" (copy failed: %v)", err)
				}
			}
			if len(probs) > 20 {
				probs = append(probs[:20], fmt.Sprintf("… and %d more", len(probs)-20))
			}
			t.Fatalf("%s: %d problems:\n\t%s\nthe store after the round (resumed where it got that far): %s", label, len(probs), strings.Join(probs, "\n\t"), keep)
		}
	}
	slices.Sort(st.flushLat)
	q := func(f float64) time.Duration {
		if len(st.flushLat) == 0 {
			return 0
		}
		return st.flushLat[int(f*float64(len(st.flushLat)-1))]
	}
	slices.Sort(st.killDelays)
	t.Logf("%d rounds in %v, %d processes, kills %v-%v after ready; the bound: the window (200 or 50 ms) + a slack of %v; the children's turn-end flushes (one sync here) took p50 %v, p99 %v, max %v; Resume closed %d interrupted turns of %d sessions resumed",
		rounds, time.Since(start).Round(time.Millisecond), st.procs, st.killDelays[0].Round(time.Millisecond), st.killDelays[len(st.killDelays)-1].Round(time.Millisecond), slack,
		q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond), st.interrupted, st.resumed)
	for k, c := range st.kind {
		if c.rounds == 0 {
			continue
		}
		t.Logf("%s: %d rounds, %d events handed over, %d flushes acknowledged, flushed events lost: %d; events older than the bound: %d, lost: %d; younger: %d, lost %d, kept %d; the oldest event lost was handed over %v before its kill, %v more than its window",
			[]string{"one process", "several processes"}[k], c.rounds, c.handed, c.acked, c.flushedLost, c.required, c.requiredLost, c.young, c.youngLost, c.young-c.youngLost,
			time.Duration(c.oldestLost).Round(time.Millisecond), time.Duration(c.overWindow).Round(time.Millisecond))
	}
}

// noflushCorpus copies the seglog source tree's corpus (bench.LoadCorpus)
// to a directory of the test's: the parent and its children make the
// same events from it even while the tree is edited.
func noflushCorpus(t *testing.T) string {
	t.Helper()
	c, err := bench.LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "corpus")
	for _, f := range c.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.Text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// noflushStart starts child slot of round on the store in dir.
func noflushStart(t *testing.T, dir, corpus string, slot, round int, window time.Duration) *noflushProc {
	t.Helper()
	p := &noflushProc{slot: slot, stderr: &tailBuffer{max: 4 << 10}, ready: make(chan struct{}), done: make(chan struct{})}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), noflushDirEnv+"="+dir, noflushSlotEnv+"="+strconv.Itoa(slot),
		noflushSeedEnv+"="+strconv.Itoa(round*10+slot), noflushWindowEnv+"="+window.String(), noflushCorpusEnv+"="+corpus)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.stderr
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" && first {
				close(p.ready)
				first = false
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
		}
	}()
	return p
}

// noflushParse reads the lines of the dead child p into plans, one per
// session; it returns the problems they show (a child's failed
// operation, a turn that does not continue its session).
func noflushParse(corpus *bench.Corpus, p *noflushProc, bases map[string][]event.Event, plans map[string]*noflushPlan, st *noflushStats) []string {
	var probs []string
	plan := func(id string) *noflushPlan {
		pl := plans[id]
		if pl == nil {
			pl = &noflushPlan{first: uint64(len(bases[id])), killT: p.killT}
			plans[id] = pl
		}
		return pl
	}
	for _, line := range p.lines {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "err":
			probs = append(probs, fmt.Sprintf("child %d: %s", p.slot, line))
		case f[0] == "turn" && len(f) == 5:
			pl := plan(f[1])
			var slot, j int
			turn, _ := strconv.Atoi(f[2])
			seq, _ := strconv.ParseUint(f[3], 10, 64)
			n, _ := strconv.Atoi(f[4])
			if _, err := fmt.Sscanf(f[1], "p%d-s%d", &slot, &j); err != nil {
				probs = append(probs, fmt.Sprintf("child %d: a turn of an unknown session: %q", p.slot, line))
				continue
			}
			if seq != pl.first+uint64(len(pl.planned)) {
				probs = append(probs, fmt.Sprintf("child %d: %s: turn %d starts at seq %d, the session holds %d events before it (%d stored before the round)",
					p.slot, f[1], turn, seq, pl.first+uint64(len(pl.planned)), pl.first))
				continue
			}
			evs := bench.AgentTurn(corpus, noflushNum(slot, j), turn, seq)
			if len(evs) != n {
				probs = append(probs, fmt.Sprintf("child %d: %s: turn %d has %d events here, %d in the child", p.slot, f[1], turn, len(evs), n))
			}
			pl.planned = append(pl.planned, evs...)
		case f[0] == "hand" && len(f) == 4:
			end, _ := strconv.ParseUint(f[2], 10, 64)
			at, _ := strconv.ParseInt(f[3], 10, 64)
			pl := plan(f[1])
			pl.hands = append(pl.hands, noflushHand{end, at})
			st.cur.handed++
		case f[0] == "ack" && len(f) == 4:
			n, _ := strconv.ParseUint(f[2], 10, 64)
			ns, _ := strconv.ParseInt(f[3], 10, 64)
			pl := plan(f[1])
			pl.acked = max(pl.acked, n)
			st.cur.acked++
			st.flushLat = append(st.flushLat, time.Duration(ns))
		default:
			probs = append(probs, fmt.Sprintf("child %d: a line the parent does not know: %q", p.slot, line))
		}
	}
	return probs
}

// noflushVerify checks the store after the kills against what the
// children reported, resumes every session and checks again; it updates
// bases to each session's resumed log.
func noflushVerify(t *testing.T, ctx context.Context, dir string, window, bound time.Duration, bases map[string][]event.Event, plans map[string]*noflushPlan, st *noflushStats) []string {
	t.Helper()
	var probs []string
	problem := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	opts := noflushOptions(window)
	if rep, err := engine.Check(dir, opts); err != nil {
		problem("check as the kills left the store: %v", err)
	} else {
		for _, p := range rep.Problems {
			problem("check as the kills left the store: %s", p)
		}
	}
	db, err := enginetest.OpenStore(t, dir, opts)
	if err != nil {
		return append(probs, fmt.Sprintf("open after the kills: %v", err))
	}
	ids := map[string]bool{}
	for id := range bases {
		ids[id] = true
	}
	for id := range plans {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		base, pl := bases[id], plans[id]
		if pl == nil {
			pl = &noflushPlan{first: uint64(len(base))}
		}
		// What must be there: every event flushed, and every event handed
		// over more than the bound before the kill.
		need := pl.acked
		for _, h := range pl.hands {
			if pl.killT-h.at > int64(bound) {
				need = max(need, h.end)
			}
		}
		var log []event.Event
		missing := false
		h, err := db.Open(ctx, id, store.Read)
		switch {
		case errors.Is(err, store.ErrSessionNotFound) && len(base) == 0 && need == 0:
			// Never durable: created, and killed within its first window.
			missing = true
		case err != nil:
			problem("%s: open: %v (%d events stored before the round, %d needed)", id, err, len(base), need)
			continue
		default:
			log, err = h.Read(ctx, 0, -1)
			h.Close()
			if err != nil {
				problem("%s: read: %v", id, err)
				continue
			}
		}
		// Nothing after a hole: the log before the round, then a prefix of
		// what the host handed over (or was handing over at the kill).
		switch {
		case len(log) < len(base):
			problem("%s: %d events, %d were there before the round", id, len(log), len(base))
			continue
		case len(log) > len(base)+len(pl.planned):
			problem("%s: %d events, the round's host planned only %d after the %d stored before it", id, len(log), len(pl.planned), len(base))
			continue
		}
		bad := false
		for i, e := range log {
			want := func() event.Event {
				if i < len(base) {
					return base[i]
				}
				return pl.planned[i-len(base)]
			}()
			if !sameEvent(e, want) {
				problem("%s: event %d (of %d; %d stored before the round) is not what its host handed over: %s %.60s", id, i, len(log), len(base), e.Type, e.Data)
				bad = true
				break
			}
		}
		if bad {
			continue
		}
		got := uint64(len(log))
		if got < pl.acked {
			st.cur.flushedLost += int(pl.acked - got)
			problem("%s: %d events, %d were flushed", id, got, pl.acked)
		}
		// The figures: each handed event's age at the kill, kept or lost.
		prev := pl.first
		for _, h := range pl.hands {
			age := pl.killT - h.at
			for seq := prev; seq < h.end; seq++ {
				lost := seq >= got
				if age > int64(bound) {
					st.cur.required++
					if lost {
						st.cur.requiredLost++
					}
				} else {
					st.cur.young++
					if lost {
						st.cur.youngLost++
					}
				}
				if lost {
					st.cur.oldestLost = max(st.cur.oldestLost, age)
					st.cur.overWindow = max(st.cur.overWindow, age-int64(window))
				}
			}
			prev = max(prev, h.end)
		}
		if got < need {
			var age int64
			for _, h := range pl.hands {
				if h.end > got {
					age = pl.killT - h.at
					break
				}
			}
			problem("%s: %d events, %d were flushed and %d handed over more than %v before the kill (event %d was handed over %v before it)",
				id, got, pl.acked, need, bound, got, time.Duration(age).Round(time.Millisecond))
			continue
		}
		// Resume closes the turn the kill cut.
		if missing {
			delete(bases, id)
			continue
		}
		want, err := recovery.InterruptedTurnClosers(log)
		if err != nil {
			problem("%s: the closers of its log: %v", id, err)
			continue
		}
		rh, closers, err := db.Resume(ctx, id)
		if err != nil {
			problem("%s: resume: %v", id, err)
			continue
		}
		after, err := rh.Read(ctx, 0, -1)
		if cerr := rh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			problem("%s: read after resume: %v", id, err)
			continue
		}
		stFold, ferr := recovery.Fold(after)
		switch {
		case !sameEvents(closers, want):
			problem("%s: resume appended %d closers, recovery.InterruptedTurnClosers says %d", id, len(closers), len(want))
		case !sameEvents(after, append(slices.Clone(log), want...)):
			problem("%s: after resume the log has %d events, want the %d there were and the %d closers", id, len(after), len(log), len(want))
		case ferr != nil || !stFold.Balanced():
			problem("%s: after resume the log is not balanced: phase %v, %v", id, stFold.Phase, ferr)
		}
		st.resumed++
		if len(closers) > 0 {
			st.interrupted++
		}
		bases[id] = after
	}
	if err := db.Close(); err != nil {
		problem("close after resume: %v", err)
	}
	if rep, err := engine.Check(dir, opts); err != nil {
		problem("check after resume: %v", err)
	} else {
		for _, p := range rep.Problems {
			problem("check after resume: %s", p)
		}
	}
	return probs
}

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
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
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// The window-durability workload (KillWindow): the promise of the
// durability window (docs/DURABILITY.md, The durability window) measured on an
// agent host killed with SIGKILL. Each of Config.Rounds rounds starts a
// worker process on a fresh store; its Config.Sessions sessions write whole
// turns (AgentTurn) at a host's pace, an event every few to a hundred or so
// milliseconds, the streamed deltas through Enqueue and the others through
// Append; two sessions in three flush at each turn's end, the others never.
// After each Append or Enqueue returns the worker prints a line naming the
// session, the events handed over so far and the CLOCK_MONOTONIC time
// (monoNow). The parent kills the worker with SIGKILL at a random moment
// KillMin to KillMax after it started, reads what it printed to the end,
// then opens the store as a host does after a crash and, for every session:
//
//   - counts the events handed over that are not there, and those of them
//     handed over more than the bound before the kill: the window plus one
//     sync, KillBound (the promise: none);
//   - counts the events a Flush acknowledged that are not there (none);
//   - checks that the log holds a prefix of what the host handed over (or
//     was handing over at the kill), byte for byte;
//   - resumes it (Resume) and checks that the closers close the turn the
//     kill cut: the log is balanced after them.
//
// The store is checked (engine.Check, the CLI's `seglog check`) as the kill
// left it and after the resumes. With Config.Backend "jsonl" the worker
// writes the reference model (a JSONL file per session, written and
// fdatasynced at each Flush and at the end of each 200 ms window:
// Windowed); its check is jsonl.Parse of each file (the reference's
// torn-tail rule), its resume the closers appended to what Parse read.

// The moment of the kill, after the worker's start: uniform between them.
const (
	KillMin = 500 * time.Millisecond
	KillMax = 1500 * time.Millisecond
)

// KillSlack is the "one sync" of the promise at least: the time from a
// window's end to its events being written (a SIGKILL keeps what write(2)
// handed the kernel), that is the window's timer firing late on a busy
// machine, the wait for the group commit in progress and the placement. A
// turn-end Flush does the same work and ends with its own fdatasync, so a
// round whose slowest turn-end Flush took more than half of KillSlack
// takes twice that Flush instead (KillBound).
const KillSlack = 250 * time.Millisecond

// KillBound is the age beyond which no handed-over event may be lost:
// window plus the larger of KillSlack and twice slowestFlush, the slowest
// turn-end Flush the worker saw in the round.
func KillBound(window, slowestFlush time.Duration) time.Duration {
	return window + max(KillSlack, 2*slowestFlush)
}

// KillStats are KillWindow's figures: each round's and their sums.
type KillStats struct {
	// Window is the worker's durability window (Options.WriteBehindWindow,
	// or ReferenceWindow for the reference model), FlushOnly its
	// Options.FlushOnly.
	Window    time.Duration `json:"window_ns"`
	FlushOnly bool          `json:"flush_only,omitempty"`
	Rounds    []KillRound   `json:"rounds"`
	KillTotals
}

// KillTotals are the sums over the rounds (OldestLost and Bound: the
// largest).
type KillTotals struct {
	Handed      int `json:"handed"`       // events handed to Append or Enqueue (the lines read)
	Acked       int `json:"acked"`        // of them, acknowledged by a Flush
	Lost        int `json:"lost"`         // handed over and not in the store after the kill
	LostOld     int `json:"lost_old"`     // of them, handed over more than Bound before the kill: the promise is 0
	FlushedLost int `json:"flushed_lost"` // acknowledged by a Flush and lost: 0
	// OldestLost is the largest age at the kill of an event lost (0 if
	// none was).
	OldestLost time.Duration `json:"oldest_lost_ns"`
	Bound      time.Duration `json:"bound_ns"`
	// Sessions is the sessions that had handed something over; Missing
	// those the store does not know after the kill (killed within their
	// first window).
	Sessions int `json:"sessions"`
	Missing  int `json:"missing"`
	// Interrupted is the turns Resume closed; Unclosed the sessions whose
	// log Resume's closers left unbalanced, or whose closers were not
	// recovery.InterruptedTurnClosers' (0).
	Interrupted int `json:"interrupted"`
	Unclosed    int `json:"unclosed"`
	// CheckProblems is what the store's check found as the kill left the
	// store and after the resumes (0); Problems says what went wrong, the
	// first few of each round.
	CheckProblems int      `json:"check_problems"`
	Problems      []string `json:"problems,omitempty"`
}

// KillRound is one round: when the kill came, the slowest turn-end Flush,
// and its figures.
type KillRound struct {
	KillAfter    time.Duration `json:"kill_after_ns"` // from the worker's start
	SlowestFlush time.Duration `json:"slowest_flush_ns"`
	KillTotals
}

// Promised reports whether the rounds kept the promise: nothing flushed
// or older than the bound lost, every turn closed, the store's check
// clean, no other problem.
func (k *KillStats) Promised() bool {
	return k.LostOld == 0 && k.FlushedLost == 0 && k.Unclosed == 0 && k.CheckProblems == 0 && len(k.Problems) == 0
}

// KillColumns names the columns of KillTotals.Cells (tab-separated), for
// the tables of seglog bench and bench/peers.
const KillColumns = "handed over\tflushed\tlost\tlost > bound\tflushed lost\toldest lost ms\tbound ms\tturns closed\tunclosed\tcheck problems"

// Cells returns t's figures as KillColumns names them, tab-separated.
func (t KillTotals) Cells() string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%d\t%d\t%d", t.Handed, t.Acked, t.Lost, t.LostOld, t.FlushedLost,
		ms(t.OldestLost), ms(t.Bound), t.Interrupted, t.Unclosed, t.CheckProblems)
}

func (t *KillTotals) add(r KillTotals) {
	t.Handed += r.Handed
	t.Acked += r.Acked
	t.Lost += r.Lost
	t.LostOld += r.LostOld
	t.FlushedLost += r.FlushedLost
	t.OldestLost = max(t.OldestLost, r.OldestLost)
	t.Bound = max(t.Bound, r.Bound)
	t.Sessions += r.Sessions
	t.Missing += r.Missing
	t.Interrupted += r.Interrupted
	t.Unclosed += r.Unclosed
	t.CheckProblems += r.CheckProblems
	t.Problems = append(t.Problems, r.Problems...)
}

// eventDigest identifies an event by its JSON line: the worker prints the
// digests of each turn's events, the parent compares what it reads.
func eventDigest(e *event.Event) uint64 {
	h := fnv.New64a()
	h.Write(jsonl.EventLine(e))
	return h.Sum64()
}

// killWorker is a KillWindow worker: it opens the store, says "ready",
// waits for the start and runs s.Sessions agent hosts until it is killed
// (or its stdin ends: the parent is gone). Its lines, each one write:
//
//	turn <id> <seq> <digest>,…  it starts a turn: events seq.. (eventDigest, hex)
//	hand <id> <end> <mono>      Append or Enqueue of event end-1 returned at mono (monoNow)
//	ack <id> <end> <ns>         Flush returned nil: end events are durable; it took ns
//	err <id> <op>: …            an operation failed (the session stops)
func killWorker(s workerSpec, in *bufio.Reader, out io.Writer) error {
	corpus, err := LoadCorpus(s.Corpus)
	if err != nil {
		return err
	}
	st, err := openHost(Config{Backend: s.Backend, Dir: s.Dir,
		Options: &engine.Options{WriteBehindWindow: s.Window, FlushOnly: s.FlushOnly}})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format+"\n", args...)
		mu.Lock()
		io.WriteString(out, line)
		mu.Unlock()
	}
	say("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}
	for j := range s.Sessions {
		go killHost(st, corpus, j, rand.New(rand.NewPCG(s.Seed, uint64(j))), say)
	}
	io.Copy(io.Discard, in)
	return errors.New("stdin closed before the kill")
}

// killHost is session j's agent host: turn after turn, at a host's pace.
func killHost(st HostStore, corpus *Corpus, j int, r *rand.Rand, say func(string, ...any)) {
	ctx := context.Background()
	id := AgentSessionID(j)
	h, err := st.Create(ctx, j)
	if err != nil {
		say("err %s create: %v", id, err)
		return
	}
	flusher := j%3 != 2
	var seq uint64
	for turn := 0; ; turn++ {
		evs := AgentTurn(corpus, j, turn, seq)
		digests := make([]string, len(evs))
		for k := range evs {
			digests[k] = strconv.FormatUint(eventDigest(&evs[k]), 16)
		}
		say("turn %s %d %s", id, seq, strings.Join(digests, ","))
		for _, e := range evs {
			// The model streams deltas every few milliseconds; a tool
			// runs for tens to a hundred or two.
			switch e.Type {
			case "assistant/chunk":
				time.Sleep(time.Duration(2+r.IntN(14)) * time.Millisecond)
			case recovery.TypeToolResult:
				time.Sleep(time.Duration(20+r.IntN(150)) * time.Millisecond)
			default:
				time.Sleep(time.Duration(2+r.IntN(40)) * time.Millisecond)
			}
			if e.Type == "assistant/chunk" {
				err = h.Enqueue(e)
			} else {
				err = h.Append(ctx, e)
			}
			if err != nil {
				say("err %s append: %v", id, err)
				return
			}
			say("hand %s %d %d", id, e.Seq+1, monoNow())
		}
		seq += uint64(len(evs))
		if flusher {
			t := monoNow()
			if err := h.Flush(ctx); err != nil {
				say("err %s flush: %v", id, err)
				return
			}
			say("ack %s %d %d", id, seq, monoNow()-t)
		}
		time.Sleep(time.Duration(20+r.IntN(400)) * time.Millisecond) // the user reads, then types
	}
}

// killPlan is what the worker said of one session.
type killPlan struct {
	digests []uint64 // of the events of the turns it started, from seq 0
	hands   []killHand
	acked   uint64 // events a Flush acknowledged (a count from seq 0)
}

type killHand struct {
	end uint64 // events handed over so far
	at  int64  // monoNow
}

func runKill(ctx context.Context, c Config) (Result, error) {
	if c.Backend != "seglog" && c.Backend != "jsonl" {
		return Result{}, fmt.Errorf("bench: Config.Backend %q: seglog or jsonl", c.Backend)
	}
	opts := engine.Options{}
	if c.Options != nil {
		opts = engine.Options{WriteBehindWindow: c.Options.WriteBehindWindow, FlushOnly: c.Options.FlushOnly}
	}
	ks := &KillStats{Window: opts.WriteBehindWindow, FlushOnly: opts.FlushOnly}
	if ks.Window == 0 {
		ks.Window = handle.DefaultWindow // the engine's default
	}
	if c.Backend == "jsonl" {
		ks.Window, ks.FlushOnly, opts = ReferenceWindow, false, engine.Options{}
	}
	corpus := ""
	if c.Corpus != nil && c.Corpus.Source != "embedded" {
		corpus = c.Corpus.Source
	}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 37))
	r := Result{Workload: KillWindow, Sessions: c.Sessions, Backend: c.Backend, Kill: ks}
	start := time.Now()
	for round := range c.Rounds {
		dir := filepath.Join(c.Dir, fmt.Sprintf("round-%d", round))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return r, err
		}
		spec := workerSpec{Mode: "kill", Backend: c.Backend, Dir: dir, Sessions: c.Sessions, Window: opts.WriteBehindWindow,
			FlushOnly: opts.FlushOnly, Seed: rnd.Uint64(), Corpus: corpus}
		after := KillMin + time.Duration(rnd.Int64N(int64(KillMax-KillMin)))
		plans, flushes, killT, err := killRound(c, spec, after)
		if err != nil {
			return r, fmt.Errorf("bench: kill-window round %d: %w", round, err)
		}
		kr := KillRound{KillAfter: after}
		for _, d := range flushes {
			kr.SlowestFlush = max(kr.SlowestFlush, d)
		}
		kr.Bound = KillBound(ks.Window, kr.SlowestFlush)
		if c.Backend == "seglog" {
			verifyKillEngine(ctx, dir, &opts, plans, killT, &kr)
		} else {
			verifyKillJSONL(dir, plans, killT, &kr)
		}
		if len(kr.Problems) > 5 {
			kr.Problems = append(kr.Problems[:5], fmt.Sprintf("… and %d more", len(kr.Problems)-5))
		}
		for i, p := range kr.Problems {
			kr.Problems[i] = fmt.Sprintf("round %d: %s", round, p)
		}
		ks.Rounds = append(ks.Rounds, kr)
		ks.add(kr.KillTotals)
		if c.Progress != nil {
			c.Progress(ks.Handed)
		}
	}
	r.Elapsed = time.Since(start)
	r.Events = ks.Handed
	return r, nil
}

// killRound starts a worker, kills it after after, and returns what it
// said of each session, the latencies of its turn-end Flushes and the
// moment of the kill (monoNow).
func killRound(c Config, spec workerSpec, after time.Duration) (_ map[string]*killPlan, flushes []time.Duration, killT int64, _ error) {
	ws, err := startAll(c, []workerSpec{spec})
	if err != nil {
		return nil, nil, 0, err
	}
	w := ws[0]
	lines := make(chan []string)
	go func() {
		var ls []string
		for {
			l, err := w.stdout.ReadString('\n')
			if err != nil {
				break
			}
			ls = append(ls, strings.TrimSuffix(l, "\n"))
		}
		lines <- ls
	}()
	if err := goAll(ws); err != nil {
		<-lines
		return nil, nil, 0, err
	}
	time.Sleep(after)
	killT = monoNow()
	w.cmd.Process.Signal(syscall.SIGKILL)
	ls := <-lines // the pipe ends when the worker is dead
	err = w.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return nil, nil, 0, fmt.Errorf("the worker ended with %v, not by SIGKILL: %s", err, strings.TrimSpace(w.stderr.String()))
	}
	if e := w.stderr.String(); strings.Contains(e, "DATA RACE") { // a worker built with -race
		return nil, nil, 0, fmt.Errorf("the race detector reported in the worker:\n%s", e)
	}
	plans := map[string]*killPlan{}
	plan := func(id string) *killPlan {
		if plans[id] == nil {
			plans[id] = &killPlan{}
		}
		return plans[id]
	}
	for _, l := range ls {
		f := strings.Fields(l)
		switch {
		case len(f) == 4 && f[0] == "turn":
			p := plan(f[1])
			seq, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil || seq != uint64(len(p.digests)) {
				return nil, nil, 0, fmt.Errorf("the worker said %q after %d events of %s", l, len(p.digests), f[1])
			}
			for _, d := range strings.Split(f[3], ",") {
				n, err := strconv.ParseUint(d, 16, 64)
				if err != nil {
					return nil, nil, 0, fmt.Errorf("the worker said %q", l)
				}
				p.digests = append(p.digests, n)
			}
		case len(f) == 4 && (f[0] == "hand" || f[0] == "ack"):
			n, err1 := strconv.ParseUint(f[2], 10, 64)
			v, err2 := strconv.ParseInt(f[3], 10, 64)
			p := plan(f[1])
			if err1 != nil || err2 != nil || n > uint64(len(p.digests)) {
				return nil, nil, 0, fmt.Errorf("the worker said %q", l)
			}
			if f[0] == "hand" {
				p.hands = append(p.hands, killHand{n, v})
			} else {
				p.acked = max(p.acked, n)
				flushes = append(flushes, time.Duration(v))
			}
		case len(f) > 0 && f[0] == "err":
			return nil, nil, 0, fmt.Errorf("the worker: %s", strings.Join(f[1:], " "))
		default:
			return nil, nil, 0, fmt.Errorf("the worker said %q", l)
		}
	}
	return plans, flushes, killT, nil
}

// judgeLog compares session id's log after the kill with its plan and
// adds its figures to kr; it reports whether the log is what the host
// handed over (a prefix of its events).
func judgeLog(id string, log []event.Event, p *killPlan, killT int64, kr *KillRound) bool {
	kr.Sessions++
	if len(log) > len(p.digests) {
		kr.Problems = append(kr.Problems, fmt.Sprintf("%s: %d events, its host started turns of only %d", id, len(log), len(p.digests)))
		return false
	}
	for i := range log {
		if log[i].Seq != uint64(i) || eventDigest(&log[i]) != p.digests[i] {
			kr.Problems = append(kr.Problems, fmt.Sprintf("%s: event %d (%s) is not the one its host handed over", id, i, log[i].Type))
			return false
		}
	}
	got := uint64(len(log))
	if got < p.acked {
		kr.FlushedLost += int(p.acked - got)
		kr.Problems = append(kr.Problems, fmt.Sprintf("%s: %d events, a Flush acknowledged %d", id, got, p.acked))
	}
	var prev uint64
	for _, h := range p.hands {
		kr.Handed += int(h.end - prev)
		if h.end > got {
			lost := int(h.end - max(prev, got))
			age := time.Duration(killT - h.at)
			kr.Lost += lost
			kr.OldestLost = max(kr.OldestLost, age)
			if age > kr.Bound {
				kr.LostOld += lost
			}
		}
		prev = h.end
	}
	kr.Acked += int(p.acked)
	return true
}

// closedTurn checks that closers, appended to log, are recovery's closers of
// it and leave it balanced.
func closedTurn(id string, log, closers []event.Event, kr *KillRound) {
	want, err := recovery.InterruptedTurnClosers(log)
	if err == nil && len(want) != len(closers) {
		err = fmt.Errorf("%d closers, recovery.InterruptedTurnClosers says %d", len(closers), len(want))
	}
	if err == nil {
		var st recovery.State
		if st, err = recovery.Fold(append(slices.Clone(log), closers...)); err == nil && !st.Balanced() {
			err = fmt.Errorf("the log is not balanced after the closers: phase %v", st.Phase)
		}
	}
	if err != nil {
		kr.Unclosed++
		kr.Problems = append(kr.Problems, fmt.Sprintf("%s: resume: %v", id, err))
		return
	}
	if len(closers) > 0 {
		kr.Interrupted++
	}
}

// verifyKillEngine checks the store in dir after the kill: Check, then
// each session read and resumed, then Check again.
func verifyKillEngine(ctx context.Context, dir string, opts *engine.Options, plans map[string]*killPlan, killT int64, kr *KillRound) {
	problem := func(format string, args ...any) { kr.Problems = append(kr.Problems, fmt.Sprintf(format, args...)) }
	check := func(when string) {
		rep, err := engine.Check(dir, opts)
		if err != nil {
			kr.CheckProblems++
			problem("check %s: %v", when, err)
			return
		}
		kr.CheckProblems += len(rep.Problems)
		for _, p := range rep.Problems {
			problem("check %s: %s", when, p)
		}
	}
	check("as the kill left the store")
	db, err := engine.Open(dir, opts) // as a host does after a crash
	if err != nil {
		problem("open after the kill: %v", err)
		return
	}
	for _, id := range slices.Sorted(maps.Keys(plans)) {
		p := plans[id]
		if len(p.hands) == 0 {
			continue
		}
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			kr.Missing++
			judgeLog(id, nil, p, killT, kr)
			continue
		}
		if err != nil {
			problem("%s: open: %v", id, err)
			continue
		}
		log, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			problem("%s: read: %v", id, err)
			continue
		}
		if !judgeLog(id, log, p, killT, kr) {
			continue
		}
		rh, closers, err := db.Resume(ctx, id)
		if err != nil {
			kr.Unclosed++
			problem("%s: resume: %v", id, err)
			continue
		}
		after, err := rh.Read(ctx, 0, -1)
		if cerr := rh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			kr.Unclosed++
			problem("%s: read after resume: %v", id, err)
			continue
		}
		if len(after) != len(log)+len(closers) {
			kr.Unclosed++
			problem("%s: %d events after resume, %d before and %d closers", id, len(after), len(log), len(closers))
			continue
		}
		closedTurn(id, log, closers, kr)
	}
	if err := db.Close(); err != nil {
		problem("close after resume: %v", err)
	}
	check("after the resumes")
}

// verifyKillJSONL is verifyKillEngine for the reference model: each
// session's file read by jsonl.Parse (the reference's torn-tail rule; a
// file that does not parse is a check problem), its closers appended in
// memory.
func verifyKillJSONL(dir string, plans map[string]*killPlan, killT int64, kr *KillRound) {
	for _, id := range slices.Sorted(maps.Keys(plans)) {
		p := plans[id]
		if len(p.hands) == 0 {
			continue
		}
		path, err := jsonl.LogPath(dir, jsonlHeader(id), false)
		var b []byte
		if err == nil {
			b, err = os.ReadFile(path)
		}
		if errors.Is(err, os.ErrNotExist) {
			kr.Missing++
			judgeLog(id, nil, p, killT, kr)
			continue
		}
		var log *jsonl.Log
		if err == nil {
			log, err = jsonl.Parse(b, false)
		}
		if err != nil {
			kr.CheckProblems++
			kr.Problems = append(kr.Problems, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		if !judgeLog(id, log.Events, p, killT, kr) {
			continue
		}
		closers, err := recovery.InterruptedTurnClosers(log.Events)
		if err != nil {
			kr.Unclosed++
			kr.Problems = append(kr.Problems, fmt.Sprintf("%s: closers: %v", id, err))
			continue
		}
		closedTurn(id, log.Events, closers, kr)
	}
}

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// The multi-process workloads run their writers in worker processes: the
// parent re-executes a binary (Config.Exe, default itself) with WorkerEnv
// set to the worker's spec in JSON; that binary calls ServeWorker first
// thing (cmd/seglog does it in an init, a test binary in TestMain), which
// runs the worker and exits. A worker opens its store and creates its
// sessions, prints "ready", waits for a line on stdin (the start, sent to
// all workers at once), runs, and prints its report as one JSON line.

// WorkerEnv is the environment variable that makes a process started by
// MultiDurable, Follow or KillWindow a worker.
const WorkerEnv = "SEGLOG_BENCH_WORKER"

// ServeWorker returns at once unless WorkerEnv is set; then it runs the
// worker it describes and exits the process (status 1 if it failed).
func ServeWorker() {
	spec := os.Getenv(WorkerEnv)
	if spec == "" {
		return
	}
	if err := serveWorker(spec, bufio.NewReader(os.Stdin), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// workerSpec is what a worker is told.
type workerSpec struct {
	Mode      string        `json:"mode"` // "append", "follow" or "kill" (KillWindow)
	Backend   string        `json:"backend"`
	Dir       string        `json:"dir"`
	Proc      int           `json:"proc"`
	Sessions  int           `json:"sessions"`
	Turns     int           `json:"turns"`    // append: per session, if Duration is 0
	Duration  time.Duration `json:"duration"` // append
	EventSize int           `json:"event_size"`
	Events    int           `json:"events"` // follow
	Interval  time.Duration `json:"interval"`
	Profile   string        `json:"profile,omitempty"` // a CPU profile of the run goes there
	// kill: the store's options, the pace's seed, the corpus's directory
	// ("": LoadCorpus's default).
	Window    time.Duration `json:"window,omitempty"`
	FlushOnly bool          `json:"flush_only,omitempty"`
	Seed      uint64        `json:"seed,omitempty"`
	Corpus    string        `json:"corpus,omitempty"`
}

// workerReport is what a worker answers.
type workerReport struct {
	Elapsed time.Duration `json:"elapsed"`
	Acked   []uint64      `json:"acked,omitempty"`   // append: flushed events per session
	Latency []int64       `json:"latency,omitempty"` // append: ns per append+flush
	Flushed []int64       `json:"flushed,omitempty"` // follow: CLOCK_MONOTONIC ns at each Flush's return
	Err     string        `json:"error,omitempty"`
}

// sessionID is the ID of session i of worker proc.
func sessionID(proc, i int) string { return fmt.Sprintf("p%d-s%d", proc, i) }

// followID is the session of Follow.
const followID = "follow"

// monoNow reads CLOCK_MONOTONIC, one clock for every process of the
// machine (time.Time's monotonic reading is relative to its process).
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func serveWorker(specJSON string, in *bufio.Reader, out io.Writer) error {
	var s workerSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		return fmt.Errorf("%s: %w", WorkerEnv, err)
	}
	if s.Mode == "kill" {
		return killWorker(s, in, out)
	}
	ctx := context.Background()
	var db *engine.DB
	if s.Backend == "seglog" {
		var err error
		if db, err = engine.Open(s.Dir, nil); err != nil {
			return err
		}
		defer db.Close()
	}
	create := func(id string) (appender, error) {
		if db == nil {
			return createJSONL(s.Dir, id)
		}
		return db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	}
	var hs []appender
	defer func() {
		for _, h := range hs {
			h.Close()
		}
	}()
	ids := []string{followID}
	if s.Mode == "append" {
		ids = ids[:0]
		for i := range s.Sessions {
			ids = append(ids, sessionID(s.Proc, i))
		}
	}
	for _, id := range ids {
		h, err := create(id)
		if err == nil {
			err = h.Flush(ctx) // the session exists for every process
		}
		if err != nil {
			return err
		}
		hs = append(hs, h)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}
	if s.Profile != "" {
		f, err := os.Create(s.Profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	var rep workerReport
	if s.Mode == "follow" {
		rep = followWriter(ctx, s, hs[0])
	} else {
		rep = appendWorker(ctx, s, hs)
	}
	if s.Profile != "" {
		pprof.StopCPUProfile()
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// appendWorker is Durable in one worker: a goroutine per session appends
// one event and flushes, until the turns or the time are up.
func appendWorker(ctx context.Context, s workerSpec, hs []appender) workerReport {
	pool := testgen.Events(0, 256, s.EventSize)
	rep := workerReport{Acked: make([]uint64, len(hs))}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(s.Duration)
	for i, h := range hs {
		wg.Go(func() {
			lat := make([]int64, 0, 1024)
			var seq uint64
			for ; s.Duration > 0 || seq < uint64(s.Turns); seq++ {
				t := time.Now()
				if s.Duration > 0 && seq > 0 && t.After(deadline) {
					break // (each session flushes once at least: a goroutine started late on a busy machine met the deadline before its first event)
				}
				e := pool[(int(seq)+i)%len(pool)]
				e.Seq = seq
				err := h.Append(ctx, e)
				if err == nil {
					err = h.Flush(ctx)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					break
				}
				lat = append(lat, int64(time.Since(t)))
			}
			mu.Lock()
			rep.Acked[i] = uint64(len(lat))
			rep.Latency = append(rep.Latency, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		rep.Err = err.Error()
	}
	return rep
}

// followWriter appends and flushes one event every s.Interval, s.Events
// times, and notes when each Flush returned.
func followWriter(ctx context.Context, s workerSpec, h appender) workerReport {
	rep := workerReport{Flushed: make([]int64, 0, s.Events)}
	start := time.Now()
	for seq := range uint64(s.Events) {
		time.Sleep(s.Interval)
		e := testgen.Event(seq, s.EventSize)
		err := h.Append(ctx, e)
		if err == nil {
			err = h.Flush(ctx)
		}
		if err != nil {
			rep.Err = err.Error()
			break
		}
		rep.Flushed = append(rep.Flushed, monoNow())
	}
	rep.Elapsed = time.Since(start)
	return rep
}

// worker is a started worker process.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

func startWorker(c Config, s workerSpec) (*worker, error) {
	exe := c.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if c.CPUProfile != "" {
		s.Profile = fmt.Sprintf("%s-%d.pprof", c.CPUProfile, s.Proc)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: exec.Command(exe)}
	w.cmd.Env = append(os.Environ(), WorkerEnv+"="+string(spec))
	w.cmd.Stderr = &w.stderr
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.stdout = bufio.NewReader(out)
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start worker %s: %w", exe, err)
	}
	return w, nil
}

// fail describes a worker that did not answer as it should.
func (w *worker) fail(what string, err error) error {
	w.cmd.Process.Kill()
	w.cmd.Wait()
	return fmt.Errorf("bench: worker %d: %s: %w: %s", w.cmd.Process.Pid, what, err, strings.TrimSpace(w.stderr.String()))
}

func (w *worker) ready() error {
	line, err := w.stdout.ReadString('\n')
	if err == nil && line != "ready\n" {
		err = fmt.Errorf("said %q", line)
	}
	if err != nil {
		return w.fail("starting", err)
	}
	return nil
}

func (w *worker) report() (workerReport, error) {
	var rep workerReport
	line, err := w.stdout.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err != nil {
		return rep, w.fail("report", err)
	}
	w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		return rep, fmt.Errorf("bench: worker %d: %w: %s", w.cmd.Process.Pid, err, strings.TrimSpace(w.stderr.String()))
	}
	if rep.Err != "" {
		return rep, fmt.Errorf("bench: worker %d: %s", w.cmd.Process.Pid, rep.Err)
	}
	return rep, nil
}

// startAll starts the workers, waits until each is ready and starts them
// all. On an error every worker started is killed.
func startAll(c Config, specs []workerSpec) ([]*worker, error) {
	var ws []*worker
	kill := func() {
		for _, w := range ws {
			w.cmd.Process.Kill()
			w.cmd.Wait()
		}
	}
	for _, s := range specs {
		w, err := startWorker(c, s)
		if err != nil {
			kill()
			return nil, err
		}
		ws = append(ws, w)
	}
	for i, w := range ws {
		if err := w.ready(); err != nil {
			ws = append(ws[:i], ws[i+1:]...)
			kill()
			return nil, err
		}
	}
	return ws, nil
}

func goAll(ws []*worker) error {
	for _, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			for _, w := range ws {
				w.cmd.Process.Kill()
				w.cmd.Wait()
			}
			return fmt.Errorf("bench: starting a worker: %w", err)
		}
	}
	return nil
}

func runMulti(ctx context.Context, c Config) (Result, error) {
	if c.Backend != "seglog" && c.Backend != "jsonl" {
		return Result{}, fmt.Errorf("bench: Config.Backend %q: seglog or jsonl", c.Backend)
	}
	turns := 0
	if c.Duration <= 0 {
		turns = max(c.Events/(c.Procs*c.Sessions), 1)
	}
	specs := make([]workerSpec, c.Procs)
	for p := range specs {
		specs[p] = workerSpec{Mode: "append", Backend: c.Backend, Dir: c.Dir, Proc: p, Sessions: c.Sessions,
			Turns: turns, Duration: c.Duration, EventSize: c.EventSize}
	}
	ws, err := startAll(c, specs)
	if err != nil {
		return Result{}, err
	}
	if err := goAll(ws); err != nil {
		return Result{}, err
	}
	r := Result{Workload: MultiDurable, Sessions: c.Procs * c.Sessions, Procs: c.Procs, Backend: c.Backend, Acked: map[string]uint64{}}
	var lat []time.Duration
	var errs []error
	for p, w := range ws {
		rep, err := w.report()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, n := range rep.Acked {
			r.Acked[sessionID(p, i)] = n
			r.Events += int(n)
		}
		for _, ns := range rep.Latency {
			lat = append(lat, time.Duration(ns))
		}
		r.Elapsed = max(r.Elapsed, rep.Elapsed)
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	pool := testgen.Events(0, 256, c.EventSize)
	r.InputBytes = int64(testgen.Size(pool)) * int64(r.Events) / int64(len(pool))
	percentiles(&r, lat)
	if c.Progress != nil {
		c.Progress(r.Events)
	}
	return r, nil
}

func runFollow(ctx context.Context, c Config) (Result, error) {
	ws, err := startAll(c, []workerSpec{{Mode: "follow", Backend: "seglog", Dir: c.Dir, Events: c.Events,
		Interval: c.Interval, EventSize: c.EventSize}})
	if err != nil {
		return Result{}, err
	}
	w := ws[0]
	kill := func(err error) (Result, error) {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		return Result{}, err
	}
	db, err := engine.Open(c.Dir, &engine.Options{ReadOnly: true})
	if err != nil {
		return kill(err)
	}
	defer db.Close()
	h, err := db.Open(ctx, followID, store.Read)
	if err != nil {
		return kill(err)
	}
	defer h.Close()
	if err := goAll(ws); err != nil {
		return Result{}, err
	}
	// The writer needs about Events*Interval; a reader that has not seen
	// everything well after that is stuck.
	wctx, cancel := context.WithTimeout(ctx, time.Duration(c.Events)*(c.Interval+20*time.Millisecond)+30*time.Second)
	defer cancel()
	wake := make([]int64, c.Events)
	for n := uint64(0); n < uint64(c.Events); {
		got, err := h.Wait(wctx, n)
		t := monoNow()
		if err != nil {
			return kill(fmt.Errorf("bench: follow: waiting for event %d: %w", n, err))
		}
		for s := n; s < min(got, uint64(c.Events)); s++ {
			wake[s] = t
		}
		n = got
		if c.Progress != nil {
			c.Progress(int(n))
		}
	}
	rep, err := w.report()
	if err != nil {
		return Result{}, err
	}
	if len(rep.Flushed) != c.Events {
		return Result{}, fmt.Errorf("bench: follow: the writer flushed %d events of %d", len(rep.Flushed), c.Events)
	}
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return Result{}, err
	}
	if len(evs) != c.Events {
		return Result{}, fmt.Errorf("bench: follow: the reader reads %d events, the writer flushed %d", len(evs), c.Events)
	}
	lat := make([]time.Duration, c.Events)
	for i := range lat {
		lat[i] = time.Duration(wake[i] - rep.Flushed[i])
	}
	r := Result{Workload: Follow, Sessions: 1, Procs: 2, Backend: "seglog", Events: c.Events, Elapsed: rep.Elapsed,
		InputBytes: int64(testgen.Size(evs))}
	percentiles(&r, lat)
	return r, nil
}

var _ appender = (*engine.Handle)(nil)

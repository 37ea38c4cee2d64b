package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// The agent-host workload (AgentHost): Config.Sessions sessions (default
// 16) each do Config.Turns turns (default 20) at once, as an agent host
// writes them (agentgen.go): the streamed assistant/chunk deltas through
// Enqueue (write-behind), every other event through Append, and a Flush
// at each turn's end, the durability a host promises its user; the flush
// latencies are P50 and P99. The turns are made before the clock starts;
// the sessions are created before it too.
//
// It runs on the local engine (Config.Open, default Local(c.Options)), on
// the reference model (Config.Backend "jsonl": jsonlref.go's file per
// session, buffered until a flush writes and fdatasyncs it), or on any
// HostStore (Config.OpenHost; bench/peers adapts its peers).

// HostStore is a store the agent-host workload runs on in seglog's place.
type HostStore interface {
	// Create creates session i (AgentSessionID(i)) and returns its writer.
	Create(ctx context.Context, i int) (HostSession, error)
	// Written returns the bytes the store has written for its sessions so
	// far (after the workload's last Flush; its handles still open). A
	// store that cannot tell returns -1: its files' size is taken then.
	Written(ctx context.Context) (int64, error)
	Close() error
}

// HostSession is what a host does with a session it writes; a store's
// Handle (store.Handle) is one.
type HostSession interface {
	// Enqueue hands over events without waiting (write-behind).
	Enqueue(evs ...event.Event) error
	Append(ctx context.Context, evs ...event.Event) error
	// Flush makes every event handed over durable.
	Flush(ctx context.Context) error
	Close() error
}

// storeHost is the local engine (or any Store) as a HostStore.
type storeHost struct{ st Store }

func (s storeHost) Create(ctx context.Context, i int) (HostSession, error) {
	return s.st.Create(ctx, store.Header{ID: AgentSessionID(i), CreatedAt: 1_750_000_000_000, Cwd: "/work/seglog"})
}

// Written is the bytes of the sessions' frames (Snapshot.SizeBytes): what
// the store wrote for them, its files' preallocated room aside.
func (s storeHost) Written(ctx context.Context) (int64, error) {
	snaps, err := s.st.List(ctx)
	var n int64
	for _, sn := range snaps {
		n += sn.SizeBytes
	}
	return n, err
}

func (s storeHost) Close() error { return s.st.Close() }

// jsonlHost is the reference model: jsonlref.go's sessions.
type jsonlHost struct {
	root    string
	written atomic.Int64
}

func (j *jsonlHost) Create(_ context.Context, i int) (HostSession, error) {
	s, err := createJSONL(j.root, AgentSessionID(i))
	if err != nil {
		return nil, err
	}
	j.written.Add(int64(len(jsonl.HeaderLine(jsonlHeader(AgentSessionID(i))))))
	hs := &jsonlHostSession{s: s}
	hs.w.Write = func() error {
		n := len(s.pending)
		if err := s.Flush(context.Background()); err != nil {
			return err
		}
		j.written.Add(int64(n))
		return nil
	}
	return hs, nil
}

func (j *jsonlHost) Written(context.Context) (int64, error) { return j.written.Load(), nil }
func (j *jsonlHost) Close() error                           { return nil }

// jsonlHostSession is a session of the reference model with the
// reference's write-behind (Windowed): written and fdatasynced at a Flush
// or at the end of the window.
type jsonlHostSession struct {
	s *jsonlSession
	w Windowed
}

func (s *jsonlHostSession) Append(_ context.Context, evs ...event.Event) error {
	s.w.Hand(func() { s.s.Append(context.Background(), evs...) })
	return nil
}

func (s *jsonlHostSession) Enqueue(evs ...event.Event) error {
	return s.Append(context.Background(), evs...)
}

func (s *jsonlHostSession) Flush(context.Context) error { return s.w.Flush() }

func (s *jsonlHostSession) Close() error {
	s.w.Stop()
	return s.s.Close()
}

// ReferenceWindow is the reference's write-behind window.
const ReferenceWindow = 200 * time.Millisecond

// Windowed is the reference's write-behind for a store that has none of
// its own (the reference model, bench/peers' peers): what a session is
// handed is kept until a Flush or the end of a window of ReferenceWindow
// from the first item after the last write, whichever comes first, then
// written durably (Write) as one batch: the promise seglog's durability
// window keeps. The zero value, with Write set, is ready.
type Windowed struct {
	// Write writes and makes durable what was handed over; called with
	// the Windowed's lock held.
	Write func() error

	mu    sync.Mutex
	timer *time.Timer // the window's, armed by the first item after a write
	err   error       // a failed window's write, returned by the next Flush
}

// Hand runs add, which keeps what a session was handed, under the lock,
// and opens a window if none is open.
func (w *Windowed) Hand(add func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	add()
	if w.timer == nil {
		w.timer = time.AfterFunc(ReferenceWindow, w.end)
	}
}

// end writes what the window gathered, unless a Flush took it.
func (w *Windowed) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		return
	}
	w.timer = nil
	if err := w.Write(); err != nil && w.err == nil {
		w.err = err
	}
}

// Flush closes the window and writes what is kept: a failed window's
// error first.
func (w *Windowed) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
	if w.err != nil {
		return w.err
	}
	return w.Write()
}

// Stop closes the window without writing.
func (w *Windowed) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

func (w *Windowed) stopLocked() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

func openHost(c Config) (HostStore, error) {
	if c.OpenHost != nil {
		return c.OpenHost(c.Dir)
	}
	switch c.Backend {
	case "jsonl":
		return &jsonlHost{root: c.Dir}, nil
	case "seglog":
		st, err := openDB(c)
		if err != nil {
			return nil, err
		}
		return storeHost{st}, nil
	}
	return nil, fmt.Errorf("bench: unknown backend %q (seglog or jsonl)", c.Backend)
}

// DirSize is the size of the files under dir.
func DirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// heap returns the live heap after two collections (the second frees
// what the first's sweep left to finalizers and pools).
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// warmUp writes a turn of a session to a store like c's in a temporary
// directory and removes it: what a process makes once, at its first use
// of a store (encoders, pools), is then made, and the heap per session
// counts what each session costs (and what each store does, shared over
// its sessions). The local engine's warm-up store does not preallocate
// its segments, whose write-back would go on into the measured run.
func warmUp(ctx context.Context, c Config, corpus *Corpus) error {
	dir, err := os.MkdirTemp("", "seglog-agent-warm-up-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.Dir = dir
	if c.Open == nil && c.OpenHost == nil && c.Backend == "seglog" {
		var o engine.Options
		if c.Options != nil {
			o = *c.Options
		}
		o.NoPreallocate = true
		c.Options = &o
	}
	st, err := openHost(c)
	if err != nil {
		return err
	}
	h, err := st.Create(ctx, 0)
	if err == nil {
		for _, e := range AgentTurn(corpus, 0, 0, 0) {
			if e.Type == "assistant/chunk" {
				err = h.Enqueue(e)
			} else {
				err = h.Append(ctx, e)
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = h.Flush(ctx)
		}
		err = errors.Join(err, h.Close())
	}
	return errors.Join(err, st.Close())
}

// CPUTime returns the process's CPU time so far (user and system).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runAgent(ctx context.Context, c Config) (Result, error) {
	corpus := c.Corpus
	if corpus == nil {
		var err error
		if corpus, err = LoadCorpus(""); err != nil {
			return Result{}, err
		}
	}
	r := Result{Workload: AgentHost, Sessions: c.Sessions, Turns: c.Turns, Backend: c.Backend, Corpus: corpus.Source,
		Acked: map[string]uint64{}}
	if c.OpenHost != nil {
		r.Backend = ""
	}
	// The turns, made before the clock starts.
	turns := make([][][]event.Event, c.Sessions)
	for i := range turns {
		seq := uint64(0)
		for t := range c.Turns {
			evs := AgentTurn(corpus, i, t, seq)
			seq += uint64(len(evs))
			turns[i] = append(turns[i], evs)
			r.Events += len(evs)
			r.InputBytes += int64(testgen.Size(evs))
			for k := range evs {
				r.RawJSONBytes += int64(len(jsonl.EventLine(&evs[k])))
			}
		}
	}
	lat := make([][]time.Duration, c.Sessions)
	for i := range lat {
		lat[i] = make([]time.Duration, 0, c.Turns)
	}

	if err := warmUp(ctx, c, corpus); err != nil {
		return r, fmt.Errorf("bench: warm-up: %w", err)
	}
	st, err := openHost(c)
	if err != nil {
		return r, err
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	base := heap()
	hs := make([]HostSession, c.Sessions)
	for i := range hs {
		if hs[i], err = st.Create(ctx, i); err != nil {
			return r, err
		}
	}
	acked := make([]uint64, c.Sessions)
	var done atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), CPUTime()
	for i, h := range hs {
		wg.Go(func() {
			for _, evs := range turns[i] {
				for k := range evs {
					var err error
					if evs[k].Type == "assistant/chunk" {
						err = h.Enqueue(evs[k])
					} else {
						err = h.Append(ctx, evs[k])
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("session %s seq %d: %w", AgentSessionID(i), evs[k].Seq, err))
						mu.Unlock()
						return
					}
				}
				t := time.Now()
				if err := h.Flush(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("session %s flush: %w", AgentSessionID(i), err))
					mu.Unlock()
					return
				}
				lat[i] = append(lat[i], time.Since(t))
				acked[i] = evs[len(evs)-1].Seq + 1
				if n := done.Add(int64(len(evs))); c.Progress != nil {
					mu.Lock()
					c.Progress(int(n))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	r.Elapsed, r.CPU = time.Since(start), CPUTime()-cpu0
	for i := range acked {
		r.Acked[AgentSessionID(i)] = acked[i]
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	percentiles(&r, all)
	r.HeapPerSession = (heap() - base) / int64(c.Sessions)
	if r.WrittenBytes, err = st.Written(ctx); err != nil {
		return r, err
	}
	if r.WrittenBytes < 0 {
		if r.WrittenBytes, err = DirSize(c.Dir); err != nil {
			return r, err
		}
	}
	r.DiskBytes = r.WrittenBytes
	for _, h := range hs {
		if err := h.Close(); err != nil {
			return r, err
		}
	}
	r.HeapPerIdleSession = (heap() - base) / int64(c.Sessions)
	closed = true
	if err := st.Close(); err != nil {
		return r, err
	}
	if r.RestBytes, err = DirSize(c.Dir); err != nil {
		return r, err
	}
	runtime.KeepAlive(turns)
	return r, nil
}

// ReportAgent reports an AgentHost result's figures as benchmark metrics.
func ReportAgent(b interface{ ReportMetric(float64, string) }, r Result) {
	b.ReportMetric(r.EventsPerSec(), "events/s")
	b.ReportMetric(float64(r.CPU.Microseconds())/float64(max(r.Events, 1)), "cpu-µs/event")
	b.ReportMetric(float64(r.P50)/1e3, "flush-p50-µs")
	b.ReportMetric(float64(r.P99)/1e3, "flush-p99-µs")
	b.ReportMetric(r.WrittenPerEvent(), "written-B/event")
	b.ReportMetric(r.RestPerEvent(), "rest-B/event")
	b.ReportMetric(r.RawPerEvent(), "raw-json-B/event")
	b.ReportMetric(r.WrittenPerRaw(), "written/raw")
	b.ReportMetric(float64(r.HeapPerSession), "heap-B/session")
	b.ReportMetric(float64(r.HeapPerIdleSession), "idle-heap-B/session")
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// Workload names a measured scenario.
type Workload string

// The workloads. Each runs on a fresh store in Config.Dir.
const (
	// RawSync is the physical limit: write+fdatasync of one frame's worth of
	// bytes into a preallocated file, Config.Events times.
	RawSync Workload = "raw-fdatasync"
	// Durable appends one event and flushes, by Config.Sessions goroutines
	// each with its own session, Config.Events events in all.
	Durable Workload = "durable"
	// Bulk appends Config.Events events to one session in batches of
	// Config.Batch without flushing, then flushes once.
	Bulk Workload = "bulk"
	// Replay writes Config.Events events to one session (as Bulk does),
	// or spread over Config.Sessions sessions each flushed every
	// Config.Batch events, reopens the store, and opens and reads each
	// session from start to end: the time of the opens and reads.
	Replay Workload = "replay"
	// MultiDurable is Durable in Config.Procs worker processes at once,
	// each with Config.Sessions sessions of its own, all in one store
	// (Config.Backend "seglog") or in a JSONL file per session
	// ("jsonl", the reference model), for Config.Duration (or
	// Config.Events events in all). See multiproc.go.
	MultiDurable Workload = "multi-process-durable"
	// Follow has a worker process append and flush one event every
	// Config.Interval, Config.Events times, while this process waits for
	// each on a read handle (Handle.Wait); the latency is from the return
	// of the writer's Flush to the reader's wake-up.
	Follow Workload = "follow"
	// AgentHost is Config.Sessions sessions (default 16) doing
	// Config.Turns turns each (default 20) at once, as an agent host
	// writes them: streamed deltas through Enqueue, the other events
	// through Append, a Flush at each turn's end (P50 and P99 are its
	// latencies), the text cut from Config.Corpus. See agent.go.
	AgentHost Workload = "agent-host"
	// KillWindow is the durability window's promise under SIGKILL:
	// Config.Rounds rounds (default 5), each a worker process whose
	// Config.Sessions agent hosts (default 8) hand turns over without
	// flushing mid-turn, killed at a random moment, then the store
	// checked and every session read and resumed; Result.Kill holds the
	// figures (Events: the events handed over). Config.Options'
	// WriteBehindWindow and FlushOnly are the worker's; Config.Backend
	// "jsonl" runs the reference model. See killwindow.go.
	KillWindow Workload = "kill-window"
)

// Config describes one run. The zero values of the sizes get defaults.
type Config struct {
	Workload  Workload
	Dir       string          // an empty directory for the store (required)
	Events    int             // default 2000
	Sessions  int             // Durable and Replay (default 1), MultiDurable (per process) and AgentHost (default 16)
	EventSize int             // bytes of JSON data per event; default 300
	Batch     int             // Bulk and Replay; default 1000
	Options   *engine.Options // for the local engine
	// Open opens the store the workloads (but RawSync) run on, over dir;
	// a workload that reopens (Replay) calls it again after Close. Default:
	// the local engine, Local(c.Options).
	Open func(dir string) (Store, error)
	// Progress, if set, is called with the events done so far.
	Progress func(done int)

	// Procs is the number of worker processes of MultiDurable; default 4.
	Procs int
	// Duration is how long MultiDurable appends; 0: Config.Events events
	// in all (Events / (Procs*Sessions) per session).
	Duration time.Duration
	// Backend is what MultiDurable, AgentHost, Bulk and KillWindow write: "seglog"
	// (default, the local engine: MultiDurable's with default options,
	// AgentHost's and Bulk's as Open opens it) or "jsonl" (the reference
	// model).
	Backend string
	// Interval is the time between two flushes of Follow; default 3ms.
	Interval time.Duration
	// Exe is the binary the workers of MultiDurable, Follow and KillWindow run;
	// default os.Executable(). It must call ServeWorker when it starts.
	Exe string
	// CPUProfile, if set, makes each worker of MultiDurable and Follow
	// write the CPU profile of its measured part to CPUProfile-<n>.pprof
	// (n: the worker's number).
	CPUProfile string

	// Turns is the turns of each AgentHost session; default 20.
	Turns int
	// Corpus is the text of AgentHost's events; nil: LoadCorpus("").
	Corpus *Corpus
	// OpenHost, if set, opens the store AgentHost runs on over dir, in
	// place of Backend's (bench/peers sets it).
	OpenHost func(dir string) (HostStore, error)

	// Rounds is the rounds of KillWindow; default 5.
	Rounds int
}

// Store is what the workloads need of a store: the local engine's API,
// Store is what the workloads run on: the contract's store (store.Store),
// the local engine by default (Local).
type Store = store.Store

// Session is what the workloads need of a handle (store.Handle).
type Session = store.Handle

// Local opens the local engine with opts in dir.
func Local(opts *engine.Options) func(dir string) (Store, error) {
	return func(dir string) (Store, error) {
		db, err := engine.Open(dir, opts)
		if err != nil {
			return nil, err
		}
		return store.Wrap[*engine.Handle](db), nil
	}
}

// Result is what a run measured.
type Result struct {
	Workload   Workload      `json:"workload"`
	Sessions   int           `json:"sessions"`
	Events     int           `json:"events"`
	InputBytes int64         `json:"input_bytes"` // bytes of events handed over (type, data, surfaceOp, seq, time)
	DiskBytes  int64         `json:"disk_bytes"`  // bytes of the sessions' frames on disk after the run
	Elapsed    time.Duration `json:"elapsed_ns"`
	P50        time.Duration `json:"p50_ns,omitempty"` // per-operation latency, where one was measured
	P99        time.Duration `json:"p99_ns,omitempty"`
	// Latency is the distribution P50 and P99 are two points of: the
	// latency at each of DistributionPoints (nil where none was measured).
	Latency []Percentile `json:"latency,omitempty"`
	// Procs and Backend are set by the multi-process workloads; Acked is
	// MultiDurable's count of flushed events by session ID.
	Procs   int               `json:"procs,omitempty"`
	Backend string            `json:"backend,omitempty"`
	Acked   map[string]uint64 `json:"-"`

	// AgentHost's figures. Events are its events, InputBytes as above,
	// DiskBytes its WrittenBytes, P50 and P99 its turn-end flushes.
	Turns int `json:"turns,omitempty"` // per session
	// RawJSONBytes is the events as JSON lines, the reference's encoding
	// (jsonl.EventLine, newline included): the yardstick of compression.
	RawJSONBytes int64 `json:"raw_json_bytes,omitempty"`
	// WrittenBytes is what the store wrote for the sessions by the last
	// flush (HostStore.Written: the local engine's frames, the JSONL
	// files' bytes); RestBytes its directory's files after Close.
	WrittenBytes int64 `json:"written_bytes,omitempty"`
	RestBytes    int64 `json:"rest_bytes,omitempty"`
	// HeapPerSession is the live heap the run added (after GC, the turns'
	// events not counted), per session, with the handles open after the
	// last flush; HeapPerIdleSession once they are closed, the store open.
	// What the store makes at its first write (buffers, encoders) counts,
	// shared over the sessions; what the process makes at its first use
	// of such a store does not (a warm-up store made it). The figures are
	// differences of the whole heap: with few sessions they move by a few
	// KiB from run to run, and may fall below 0.
	HeapPerSession     int64 `json:"heap_per_session,omitempty"`
	HeapPerIdleSession int64 `json:"heap_per_idle_session,omitempty"`
	// CPU is the CPU time (user and system) the whole process spent over
	// Elapsed: the store's, its background goroutines' and the
	// sessions' goroutines' (the turns are made before the clock
	// starts). CPU over Events is the CPU per durable event.
	CPU    time.Duration `json:"cpu_ns,omitempty"`
	Corpus string        `json:"corpus,omitempty"` // Corpus.Source

	// Kill is KillWindow's figures.
	Kill *KillStats `json:"kill_window,omitempty"`
}

// EventsPerSec returns the throughput in events per second.
func (r Result) EventsPerSec() float64 { return float64(r.Events) / r.Elapsed.Seconds() }

// WrittenPerEvent is AgentHost's bytes written per event.
func (r Result) WrittenPerEvent() float64 { return float64(r.WrittenBytes) / float64(max(r.Events, 1)) }

// RestPerEvent is AgentHost's bytes at rest per event.
func (r Result) RestPerEvent() float64 { return float64(r.RestBytes) / float64(max(r.Events, 1)) }

// RawPerEvent is AgentHost's raw JSON bytes per event.
func (r Result) RawPerEvent() float64 { return float64(r.RawJSONBytes) / float64(max(r.Events, 1)) }

// WrittenPerRaw is AgentHost's bytes written per raw JSON byte: the
// compression ratio (below 1 is smaller than the JSON).
func (r Result) WrittenPerRaw() float64 {
	return float64(r.WrittenBytes) / float64(max(r.RawJSONBytes, 1))
}

// MBPerSec returns the input throughput in MB (10^6 bytes) per second.
func (r Result) MBPerSec() float64 { return float64(r.InputBytes) / r.Elapsed.Seconds() / 1e6 }

func (c *Config) defaults() error {
	if c.Dir == "" {
		return errors.New("bench: Config.Dir is required")
	}
	if c.Events <= 0 {
		c.Events = 2000
	}
	if c.Sessions <= 0 {
		c.Sessions = 1
		switch c.Workload {
		case AgentHost:
			c.Sessions = 16
		case KillWindow:
			c.Sessions = 8
		}
	}
	if c.Turns <= 0 {
		c.Turns = 20
	}
	if c.EventSize <= 0 {
		c.EventSize = 300
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.Procs <= 0 {
		c.Procs = 4
	}
	if c.Backend == "" {
		c.Backend = "seglog"
	}
	if c.Interval <= 0 {
		c.Interval = 3 * time.Millisecond
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	return nil
}

// Run runs one workload.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.defaults(); err != nil {
		return Result{}, err
	}
	switch c.Workload {
	case RawSync:
		return runRaw(c)
	case Durable:
		return runDurable(ctx, c)
	case Bulk:
		return runBulk(ctx, c)
	case Replay:
		return runReplay(ctx, c)
	case MultiDurable:
		return runMulti(ctx, c)
	case Follow:
		return runFollow(ctx, c)
	case AgentHost:
		return runAgent(ctx, c)
	case KillWindow:
		return runKill(ctx, c)
	}
	return Result{}, fmt.Errorf("bench: unknown workload %q", c.Workload)
}

// Percentile is a point of a latency distribution: P percent (0 to 100)
// of the operations took at most Latency.
type Percentile struct {
	P       float64       `json:"p"`
	Latency time.Duration `json:"ns"`
}

// DistributionPoints are the percentiles of Result.Latency: the fastest
// operation (0), the slowest (100) and the points between that a
// distribution's plot needs.
var DistributionPoints = []float64{0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100}

// Distribution returns the latency at each of DistributionPoints of
// sorted, which is in ascending order: the nearest rank at or below the
// point (P50 of n operations is sorted[n/2], as Result.P50), nil if sorted
// is empty.
func Distribution(sorted []time.Duration) []Percentile {
	if len(sorted) == 0 {
		return nil
	}
	out := make([]Percentile, len(DistributionPoints))
	for i, p := range DistributionPoints {
		out[i] = Percentile{P: p, Latency: sorted[rank(len(sorted), p)]}
	}
	return out
}

// rank is the index of percentile p (0 to 100) among n sorted values:
// n*p/100 rounded down, counted in tenths of a percent so that p 99 is
// exactly n*99/100.
func rank(n int, p float64) int {
	tenths := int(math.Round(p * 10))
	return min(n*tenths/1000, n-1)
}

func percentiles(r *Result, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	r.P50, r.P99 = lat[rank(len(lat), 50)], lat[rank(len(lat), 99)]
	r.Latency = Distribution(lat)
}

func runRaw(c Config) (Result, error) {
	const frame = 360 // about one 300-byte event's frame
	f, err := vfs.Default.Create(filepath.Join(c.Dir, "raw.bin"))
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, frame*c.Events), 0); err != nil {
		return Result{}, err
	}
	if err := f.Sync(); err != nil {
		return Result{}, err
	}
	buf := make([]byte, frame)
	lat := make([]time.Duration, 0, c.Events)
	start := time.Now()
	for i := range c.Events {
		t := time.Now()
		if _, err := f.WriteAt(buf, int64(i*frame)); err != nil {
			return Result{}, err
		}
		if err := f.Sync(); err != nil {
			return Result{}, err
		}
		lat = append(lat, time.Since(t))
		if c.Progress != nil && i%64 == 0 {
			c.Progress(i)
		}
	}
	r := Result{Workload: RawSync, Sessions: 1, Events: c.Events, InputBytes: int64(frame * c.Events), Elapsed: time.Since(start), DiskBytes: int64(frame * c.Events)}
	percentiles(&r, lat)
	return r, nil
}

func openDB(c Config) (Store, error) {
	if c.Open != nil {
		return c.Open(c.Dir)
	}
	return Local(c.Options)(c.Dir)
}

// storedBytes sums the bytes of the sessions' frames on disk (the
// preallocated, still unwritten part of the active segment not counted).
func storedBytes(ctx context.Context, db Store) int64 {
	var n int64
	snaps, _ := db.List(ctx)
	for _, s := range snaps {
		n += s.SizeBytes
	}
	return n
}

func runDurable(ctx context.Context, c Config) (Result, error) {
	db, err := openDB(c)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	per := max(c.Events/c.Sessions, 1)
	pool := testgen.Events(0, 256, c.EventSize)
	hs := make([]Session, c.Sessions)
	for i := range hs {
		if hs[i], err = db.Create(ctx, store.Header{ID: fmt.Sprintf("durable-%d", i), CreatedAt: 1}); err != nil {
			return Result{}, err
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	var errs []error
	var done int
	var wg sync.WaitGroup
	start := time.Now()
	for i, h := range hs {
		wg.Go(func() {
			my := make([]time.Duration, 0, per)
			for seq := range uint64(per) {
				e := pool[(int(seq)+i)%len(pool)]
				e.Seq = seq
				t := time.Now()
				err := h.Append(ctx, e)
				if err == nil {
					err = h.Flush(ctx)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				my = append(my, time.Since(t))
				if c.Progress != nil && seq%16 == 0 {
					mu.Lock()
					done += 16
					c.Progress(done)
					mu.Unlock()
				}
			}
			mu.Lock()
			lat = append(lat, my...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r := Result{Workload: Durable, Sessions: c.Sessions, Events: per * c.Sessions, Elapsed: time.Since(start)}
	r.InputBytes = int64(testgen.Size(pool)) * int64(r.Events) / int64(len(pool))
	percentiles(&r, lat)
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	r.DiskBytes = storedBytes(ctx, db)
	return r, db.Close()
}

func bulkLoad(ctx context.Context, db Store, c Config, id string) (int64, error) {
	h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	if err != nil {
		return 0, err
	}
	input, err := bulkBatches(c, func(batch []event.Event) error { return h.Append(ctx, batch...) })
	if err != nil {
		return input, err
	}
	if err := h.Flush(ctx); err != nil {
		return input, err
	}
	return input, h.Close()
}

// bulkBatches hands c.Events events of c.EventSize bytes to appendBatch in
// batches of c.Batch and returns their size.
func bulkBatches(c Config, appendBatch func([]event.Event) error) (int64, error) {
	pool := testgen.Events(0, 4096, c.EventSize)
	batch := make([]event.Event, 0, c.Batch)
	var input int64
	for seq := 0; seq < c.Events; {
		batch = batch[:0]
		for i := 0; i < c.Batch && seq < c.Events; i++ {
			e := pool[seq%len(pool)]
			e.Seq = uint64(seq)
			batch = append(batch, e)
			seq++
		}
		input += int64(testgen.Size(batch))
		if err := appendBatch(batch); err != nil {
			return input, err
		}
		if c.Progress != nil {
			c.Progress(seq)
		}
	}
	return input, nil
}

// runBulkJSONL is Bulk on the reference model (Config.Backend "jsonl"):
// the same batches as JSON lines in one session's file, one fdatasync at
// the end.
func runBulkJSONL(c Config) (Result, error) {
	s, err := createJSONL(c.Dir, "bulk")
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	ctx := context.Background()
	start := time.Now()
	input, err := bulkBatches(c, func(batch []event.Event) error {
		s.Append(ctx, batch...)
		return s.write() // as the JSONL peer does: a write per batch
	})
	if err == nil {
		err = s.Flush(ctx)
	}
	r := Result{Workload: Bulk, Backend: "jsonl", Sessions: 1, Events: c.Events, InputBytes: input, Elapsed: time.Since(start)}
	if err != nil {
		return r, err
	}
	if err := s.Close(); err != nil {
		return r, err
	}
	r.DiskBytes, err = DirSize(c.Dir)
	return r, err
}

func runBulk(ctx context.Context, c Config) (Result, error) {
	if c.Backend == "jsonl" && c.Open == nil {
		return runBulkJSONL(c)
	}
	db, err := openDB(c)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	start := time.Now()
	input, err := bulkLoad(ctx, db, c, "bulk")
	r := Result{Workload: Bulk, Sessions: 1, Events: c.Events, InputBytes: input, Elapsed: time.Since(start)}
	if err != nil {
		return r, err
	}
	r.DiskBytes = storedBytes(ctx, db)
	return r, db.Close()
}

func runReplay(ctx context.Context, c Config) (Result, error) {
	db, err := openDB(c)
	if err != nil {
		return Result{}, err
	}
	ids := []string{"replay"}
	if c.Sessions == 1 {
		_, err = bulkLoad(ctx, db, c, ids[0])
	} else {
		ids, err = smallLoad(ctx, db, c)
	}
	if err != nil {
		db.Close()
		return Result{}, err
	}
	if err := db.Close(); err != nil {
		return Result{}, err
	}
	if db, err = openDB(c); err != nil {
		return Result{}, err
	}
	defer db.Close()
	r := Result{Workload: Replay, Sessions: len(ids)}
	start := time.Now()
	for _, id := range ids {
		// The open counts: it is where a backend indexes the session.
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			return r, err
		}
		evs, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			return r, fmt.Errorf("bench: replay of %s: %w", id, err)
		}
		want := c.Events / len(ids)
		if id == ids[0] {
			want += c.Events % len(ids)
		}
		if len(evs) != want {
			return r, fmt.Errorf("bench: replay of %s read %d events, wrote %d", id, len(evs), want)
		}
		for i := range evs {
			if evs[i].Seq != uint64(i) {
				return r, fmt.Errorf("bench: replay of %s: event %d has seq %d", id, i, evs[i].Seq)
			}
		}
		r.Events += len(evs)
		r.InputBytes += int64(testgen.Size(evs))
		if c.Progress != nil {
			c.Progress(r.Events)
		}
	}
	r.Elapsed = time.Since(start)
	r.DiskBytes = storedBytes(ctx, db)
	return r, nil
}

// smallLoad is Replay's load of Config.Sessions sessions: Config.Events
// spread over them (the remainder in the first), each appended and
// flushed Config.Batch events at a time, 16 sessions at once.
func smallLoad(ctx context.Context, db Store, c Config) ([]string, error) {
	ids := make([]string, c.Sessions)
	errs := make([]error, c.Sessions)
	pool := testgen.Events(0, 4096, c.EventSize)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = fmt.Sprintf("replay-%d", i)
		n := c.Events / c.Sessions
		if i == 0 {
			n += c.Events % c.Sessions
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = func() error {
				h, err := db.Create(ctx, store.Header{ID: ids[i], CreatedAt: 1})
				if err != nil {
					return err
				}
				defer h.Close()
				for seq := 0; seq < n; {
					batch := make([]event.Event, 0, c.Batch)
					for ; len(batch) < c.Batch && seq < n; seq++ {
						e := pool[seq%len(pool)]
						e.Seq = uint64(seq)
						batch = append(batch, e)
					}
					if err := h.Append(ctx, batch...); err != nil {
						return err
					}
					if err := h.Flush(ctx); err != nil {
						return err
					}
				}
				return h.Close()
			}()
		})
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

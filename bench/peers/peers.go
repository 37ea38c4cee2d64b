// Package peers runs seglog's benchmark workloads on the storage engines
// an agent host would otherwise pick: a JSONL file per session (the
// reference harness's design, with and without zstd), SQLite in WAL mode,
// bbolt, pebble, hashicorp/raft-wal, and a raw write+fdatasync as the
// physical limit. It is its own module so that the core module keeps its
// small dependency set. S1-S4 are the PEERS.md scenarios; S5 is bench's
// agent-host workload (agent.go), the same turns on every peer.
package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
)

// Store is one engine under test. Sessions are numbered from 0.
type Store interface {
	// Append stores the events of session s; with sync they are durable
	// when it returns.
	Append(s int, evs []event.Event, sync bool) error
	// Sync makes everything appended durable.
	Sync() error
	// Replay reads session s from start to end and returns the number of
	// events and of bytes it handed back.
	Replay(s int) (int, int64, error)
	// Close closes the store.
	Close() error
}

// Peer names a Store implementation and opens it in a directory.
type Peer struct {
	Name string
	Note string // how it is used (its own concurrency, durability settings)
	Open func(dir string, sessions int) (Store, error)
	// Serial says the engine takes one writer at a time: the concurrent
	// workload then serializes its appends through one lock.
	Serial bool
}

// Workload is one of the PEERS.md scenarios.
type Workload string

// The workloads, as in ../shared/PEERS.md.
const (
	S1 Workload = "S1-durable-1-session"
	S2 Workload = "S2-durable-64-sessions"
	S3 Workload = "S3-bulk-1M"
	S4 Workload = "S4-replay-100k"
	// S5 is bench's agent-host workload (bench.AgentHost): sessions doing
	// turns at once, a durable flush at each turn's end. See agent.go.
	S5 Workload = "S5-agent-host"
)

// Workloads is every workload, in order.
var Workloads = []Workload{S1, S2, S3, S4, S5}

// Config sizes a run.
type Config struct {
	Durable   int // S1 appends; S2 appends per session times 64 / 4
	Sessions  int // S2 sessions
	Bulk      int // S3 events
	Replay    int // S4 events
	EventSize int
	// S5: sessions, turns of each, and the text (nil: bench.LoadCorpus("")).
	AgentSessions int
	AgentTurns    int
	Corpus        *bench.Corpus
}

// DefaultConfig is the size of the PEERS.md runs, scaled to finish in
// about a minute per engine.
func DefaultConfig() Config {
	return Config{Durable: 2000, Sessions: 64, Bulk: 1_000_000, Replay: 100_000, EventSize: 300, AgentSessions: 16, AgentTurns: 20}
}

// Result is one measured run.
type Result struct {
	Peer       string   `json:"peer"`
	Workload   Workload `json:"workload"`
	Events     int      `json:"events"`
	InputBytes int64    `json:"input_bytes"`
	DiskBytes  int64    `json:"disk_bytes"`
	Seconds    float64  `json:"seconds"`
	// CPUSeconds is the process's CPU time (user and system, every
	// goroutine: the engine's background work and the collector too)
	// over the same span as Seconds.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	P50us      float64 `json:"p50_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	// Latency is the distribution P50us and P99us are two points of
	// (bench.Distribution), where a latency was measured.
	Latency []bench.Percentile `json:"latency,omitempty"`
	Err     string             `json:"error,omitempty"`

	// S5's figures beside the ones above (P50us and P99us: the turn-end
	// flush; DiskBytes: the files after Close): bytes written by the last
	// flush (seglog's frames; a peer's files then), the events as raw JSON
	// lines, and the heap each session adds, open and idle (bench.Result).
	WrittenBytes       int64 `json:"written_bytes,omitempty"`
	RawJSONBytes       int64 `json:"raw_json_bytes,omitempty"`
	HeapPerSession     int64 `json:"heap_per_session,omitempty"`
	HeapPerIdleSession int64 `json:"heap_per_idle_session,omitempty"`
}

// EventsPerSec is the throughput.
func (r Result) EventsPerSec() float64 { return float64(r.Events) / r.Seconds }

// CPUPerEvent is the CPU time the process spent per event, in µs.
func (r Result) CPUPerEvent() float64 { return r.CPUSeconds * 1e6 / float64(r.Events) }

// Ceiling is the events/s the run's CPU cost per event allows on cores
// cores, were they busy with nothing else and never idle: no run of the
// same work can go faster, so a goal above it is out of reach.
func (r Result) Ceiling(cores int) float64 {
	return float64(cores) / (r.CPUSeconds / float64(r.Events))
}

// cpuTime returns the process's CPU time so far (user and system).
var cpuTime = bench.CPUTime

// MBPerSec is the input throughput in MB/s.
func (r Result) MBPerSec() float64 { return float64(r.InputBytes) / r.Seconds / 1e6 }

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func lat(r *Result, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	r.P50us = float64(ds[len(ds)/2].Microseconds())
	r.P99us = float64(ds[min(len(ds)*99/100, len(ds)-1)].Microseconds())
	r.Latency = bench.Distribution(ds)
}

// Run runs workload w on peer p in a fresh directory under root.
func Run(ctx context.Context, p Peer, w Workload, c Config, root string) Result {
	dir, err := os.MkdirTemp(root, p.Name+"-")
	res := Result{Peer: p.Name, Workload: w}
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	// What the runs before left to the kernel (dirty pages, and the frees
	// of the directories they removed) is written out now, not during
	// this run: the peer after a heavy writer pays none of its debt.
	syscall.Sync()
	if w == S5 {
		runAgent(ctx, p, c, dir, &res)
		return res
	}
	sessions := 1
	if w == S2 {
		sessions = c.Sessions
	}
	st, err := p.Open(dir, sessions)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer st.Close()
	if err := run(ctx, p, st, w, c, &res); err != nil {
		res.Err = err.Error()
	}
	if res.DiskBytes == 0 {
		res.DiskBytes = dirSize(dir)
	}
	return res
}

func run(ctx context.Context, p Peer, st Store, w Workload, c Config, res *Result) error {
	pool := testgen.Events(0, 1024, c.EventSize)
	ev := func(seq int) event.Event {
		e := pool[seq%len(pool)]
		e.Seq = uint64(seq)
		return e
	}
	size := func(n int) int64 { return int64(testgen.Size(pool)) * int64(n) / int64(len(pool)) }
	switch w {
	case S1:
		ds := make([]time.Duration, 0, c.Durable)
		start, cpu := time.Now(), cpuTime()
		for i := range c.Durable {
			t := time.Now()
			if err := st.Append(0, []event.Event{ev(i)}, true); err != nil {
				return err
			}
			ds = append(ds, time.Since(t))
		}
		res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu).Seconds()
		res.Events, res.InputBytes = c.Durable, size(c.Durable)
		lat(res, ds)
	case S2:
		per := max(c.Durable*4/c.Sessions, 1)
		var mu, serial sync.Mutex
		var all []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		start, cpu := time.Now(), cpuTime()
		for s := range c.Sessions {
			wg.Go(func() {
				ds := make([]time.Duration, 0, per)
				for i := range per {
					t := time.Now()
					if p.Serial {
						serial.Lock()
					}
					err := st.Append(s, []event.Event{ev(i)}, true)
					if p.Serial {
						serial.Unlock()
					}
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					ds = append(ds, time.Since(t))
				}
				mu.Lock()
				all = append(all, ds...)
				mu.Unlock()
			})
		}
		wg.Wait()
		res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu).Seconds()
		res.Events, res.InputBytes = per*c.Sessions, size(per*c.Sessions)
		lat(res, all)
		return firstErr
	case S3, S4:
		n := c.Bulk
		if w == S4 {
			n = c.Replay
		}
		batch := make([]event.Event, 0, 1000)
		start, cpu := time.Now(), cpuTime()
		for i := 0; i < n; {
			batch = batch[:0]
			for j := 0; j < 1000 && i < n; j++ {
				batch = append(batch, ev(i))
				i++
			}
			if err := st.Append(0, batch, false); err != nil {
				return err
			}
		}
		if err := st.Sync(); err != nil {
			return err
		}
		res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu).Seconds()
		res.Events, res.InputBytes = n, size(n)
		if w == S4 {
			start, cpu := time.Now(), cpuTime()
			got, bytes, err := st.Replay(0)
			if err != nil {
				return err
			}
			if got != n {
				return fmt.Errorf("replay read %d events, wrote %d", got, n)
			}
			res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), (cpuTime() - cpu).Seconds()
			res.InputBytes = bytes
		}
	}
	return nil
}

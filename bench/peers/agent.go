package peers

import (
	"context"
	"fmt"
	"sync"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/event"
)

// S5 runs bench's agent-host workload (bench.AgentHost) with the same
// turns, made from the same corpus, on every peer. seglog is the engine
// with its defaults, written as a host writes it: the streamed deltas
// through Enqueue, the other events through Append, a Flush at each
// turn's end. A peer has no write-behind of its own: the harness keeps a
// session's events until the turn's end or the end of the reference's
// 200 ms window, whichever comes first, and hands them over as one
// durable batch (Store.Append with sync), as the reference model does
// (bench/agent.go): every store in S5 keeps seglog's promise, durable
// within the window without a flush. A Serial peer's batches go one at a
// time. A peer's
// bytes written are its files' size after the last flush; before Close
// every session is replayed and must hold every event flushed to it.

func runAgent(ctx context.Context, p Peer, c Config, dir string, res *Result) {
	cfg := bench.Config{Workload: bench.AgentHost, Dir: dir, Sessions: c.AgentSessions, Turns: c.AgentTurns, Corpus: c.Corpus}
	if p.Name != "seglog" {
		var serial sync.Mutex
		cfg.OpenHost = func(dir string) (bench.HostStore, error) {
			st, err := p.Open(dir, cfg.Sessions)
			if err != nil {
				return nil, err
			}
			h := &peerHost{st: st, flushed: make([]int, cfg.Sessions), oneLog: p.Name == "raw" || p.Name == "raw-group"}
			if p.Serial {
				h.serial = &serial
			}
			return h, nil
		}
	}
	r, err := bench.Run(ctx, cfg)
	if err != nil {
		res.Err = err.Error()
	}
	res.Events, res.InputBytes, res.Seconds = r.Events, r.InputBytes, r.Elapsed.Seconds()
	res.P50us, res.P99us = float64(r.P50.Microseconds()), float64(r.P99.Microseconds())
	res.Latency = r.Latency
	res.DiskBytes, res.WrittenBytes, res.RawJSONBytes = r.RestBytes, r.WrittenBytes, r.RawJSONBytes
	res.HeapPerSession, res.HeapPerIdleSession = r.HeapPerSession, r.HeapPerIdleSession
}

// WrittenPerEvent, RestPerEvent and RawPerEvent are S5's bytes per event.
func (r Result) WrittenPerEvent() float64 { return float64(r.WrittenBytes) / float64(max(r.Events, 1)) }

// RestPerEvent is S5's bytes per event in the files after Close.
func (r Result) RestPerEvent() float64 { return float64(r.DiskBytes) / float64(max(r.Events, 1)) }

// RawPerEvent is S5's events' raw JSON bytes per event.
func (r Result) RawPerEvent() float64 { return float64(r.RawJSONBytes) / float64(max(r.Events, 1)) }

// peerHost is a Store as a bench.HostStore.
type peerHost struct {
	st      Store
	serial  *sync.Mutex // a Serial peer's
	mu      sync.Mutex
	flushed []int // events flushed, by session
	oneLog  bool  // raw: every session's events in one log, which Replay reads whole
}

func (h *peerHost) Create(_ context.Context, i int) (bench.HostSession, error) {
	return h.newSession(i), nil
}

// Written: -1, the files' size.
func (h *peerHost) Written(context.Context) (int64, error) { return -1, nil }

// Close replays every session first: each holds what was flushed to it.
func (h *peerHost) Close() error {
	if h.st == nil {
		return nil
	}
	st := h.st
	h.st = nil
	flushed := h.flushed
	if h.oneLog {
		total := 0
		for _, n := range flushed {
			total += n
		}
		flushed = []int{total}
	}
	for i, want := range flushed {
		n, _, err := st.Replay(i)
		if err == nil && n != want {
			err = fmt.Errorf("session %d holds %d events, %d were flushed", i, n, want)
		}
		if err != nil {
			st.Close()
			return err
		}
	}
	return st.Close()
}

// peerSession is a session a peer writes, with the reference's
// write-behind (bench.Windowed): its events are handed over as one durable
// batch at the turn's end (Flush) or the end of the window.
type peerSession struct {
	h       *peerHost
	i       int
	pending []event.Event
	w       bench.Windowed
}

func (h *peerHost) newSession(i int) *peerSession {
	s := &peerSession{h: h, i: i}
	s.w.Write = s.write
	return s
}

func (s *peerSession) Enqueue(evs ...event.Event) error {
	s.w.Hand(func() { s.pending = append(s.pending, evs...) })
	return nil
}

func (s *peerSession) Append(_ context.Context, evs ...event.Event) error { return s.Enqueue(evs...) }

func (s *peerSession) Flush(context.Context) error { return s.w.Flush() }

// write hands the kept events to the peer, durably (under the window's
// lock).
func (s *peerSession) write() error {
	if len(s.pending) == 0 {
		return nil
	}
	if s.h.serial != nil {
		s.h.serial.Lock()
		defer s.h.serial.Unlock()
	}
	if err := s.h.st.Append(s.i, s.pending, true); err != nil {
		return err
	}
	s.h.mu.Lock()
	s.h.flushed[s.i] += len(s.pending)
	s.h.mu.Unlock()
	s.pending = s.pending[:0]
	return nil
}

func (s *peerSession) Close() error {
	s.w.Stop()
	return nil
}

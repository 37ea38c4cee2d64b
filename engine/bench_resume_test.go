package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// cutTurnLog is testgen.AgentLog of about n events cut inside its last
// turn, a few events after that turn's start: a log a crash cut.
func cutTurnLog(seed uint64, n, pad int) []event.Event {
	log := testgen.AgentLog(seed, n, pad)
	for i := len(log) - 1; i > 0; i-- {
		if log[i].Type == recovery.TypeTurnStart {
			end := i + 1
			for end < len(log) && end < i+6 && !recovery.IsTurnBoundary(log[end].Type) {
				end++
			}
			return log[:end]
		}
	}
	return log
}

// openTurnAgain appends to h, whose log is balanced, the start of a turn
// a crash then cuts: turn/start, step/start, an assistant message asking
// for a call, its tool/call.
func openTurnAgain(ctx context.Context, h *engine.Handle, turn uint64) error {
	seq := h.Len()
	evs := []event.Event{
		{Type: "turn/start", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, turn))},
		{Type: "step/start", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":0}`, turn))},
		{Type: "assistant/message", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":0,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c%d","name":"read","arguments":"{}"}]}}`, turn, seq)), SurfaceOp: json.RawMessage(`"append"`)},
		{Type: "tool/call", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"step":0,"callId":"c%d","name":"read","arguments":"{}"}`, turn, seq))},
	}
	for i := range evs {
		evs[i].Seq, evs[i].Time = seq+uint64(i), 1_800_000_000_000
	}
	return h.Append(ctx, evs...)
}

// BenchmarkResumeLarge: Resume of a session of 100,000 events (agent-loop
// events of about 150 bytes, testgen.AgentLog) whose last turn a crash
// cut, in a store opened afresh (each iteration closes and opens the
// store, untimed, and opens a turn again after the Resume). Reports the
// median Resume (resume-ns: the write open, the fold of the open turn,
// the closers appended and flushed, one fdatasync) and the events it read
// to fold (events-read, Metrics.TurnEvents). The goal: 5 ms.
// op=inspect times Inspect with InspectEvents(0, 0) instead (the turn
// state and the closers, no events): resume-ns is then its median.
func BenchmarkResumeLarge(b *testing.B) {
	for _, op := range []string{"resume", "inspect"} {
		b.Run("op="+op, func(b *testing.B) { benchResumeLarge(b, op == "inspect") })
	}
}

func benchResumeLarge(b *testing.B, inspect bool) {
	ctx := context.Background()
	dir := b.TempDir()
	opts := &engine.Options{CompactInterval: -1}
	db, err := engine.OpenStore(b, dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		b.Fatal(err)
	}
	log := cutTurnLog(1, 100_000, 100)
	for i := 0; i < len(log); i += 1000 {
		if err := h.Append(ctx, log[i:min(i+1000, len(log))]...); err != nil {
			b.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	var read uint64
	turn := uint64(1 << 20)
	for b.Loop() {
		b.StopTimer()
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		if db, err = engine.OpenStore(b, dir, opts); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t := time.Now()
		if inspect {
			in, err := db.Inspect(ctx, "s", store.InspectEvents(0, 0))
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
			b.StopTimer()
			if len(in.Closers) == 0 || !in.Turn.Open {
				b.Fatal("Inspect of a cut turn: no closers")
			}
			read += db.Metrics().TurnEvents
			b.StartTimer()
			continue
		}
		h, closers, err := db.Resume(ctx, "s")
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		b.StopTimer()
		if len(closers) == 0 {
			b.Fatal("Resume of a cut turn appended no closers")
		}
		read += db.Metrics().TurnEvents
		if err := openTurnAgain(ctx, h, turn); err != nil {
			b.Fatal(err)
		}
		turn++
		if err := h.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	db.Close()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "resume-ns")
	b.ReportMetric(float64(read)/float64(len(lat)), "events-read")
}

// BenchmarkResumeMany: a host's start-up after a crash: 1,000 sessions of
// 200 events each, every one with a turn the crash cut, resumed in a
// store opened afresh, by ResumeMany (one flush for all) or by Resume one
// after another (a flush each). One operation resumes all 1,000 (then,
// untimed, opens a turn in each again and reopens the store). Reports
// ms per 1,000 sessions (all-ms); the goal: 1 s.
func BenchmarkResumeMany(b *testing.B) {
	ctx := context.Background()
	const sessions = 1000
	for _, many := range []bool{true, false} {
		b.Run(fmt.Sprintf("many=%v", many), func(b *testing.B) {
			dir := b.TempDir()
			opts := &engine.Options{CompactInterval: -1}
			db, err := engine.OpenStore(b, dir, opts)
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, sessions)
			for i := range ids {
				ids[i] = fmt.Sprintf("session-%04d", i)
				h, err := db.Create(ctx, store.Header{ID: ids[i], CreatedAt: 1})
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Append(ctx, cutTurnLog(uint64(i), 200, 100)...); err != nil {
					b.Fatal(err)
				}
				if err := h.Close(); err != nil {
					b.Fatal(err)
				}
			}
			var total time.Duration
			turn := uint64(1 << 20)
			for b.Loop() {
				b.StopTimer()
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				if db, err = engine.OpenStore(b, dir, opts); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t := time.Now()
				hs := make([]*engine.Handle, 0, sessions)
				if many {
					rs, err := db.ResumeMany(ctx, ids)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range rs {
						if r.Err != nil || len(r.Closers) == 0 {
							b.Fatalf("ResumeMany of %s: %d closers, %v", r.ID, len(r.Closers), r.Err)
						}
						hs = append(hs, r.Handle)
					}
				} else {
					for _, id := range ids {
						h, closers, err := db.Resume(ctx, id)
						if err != nil || len(closers) == 0 {
							b.Fatalf("Resume of %s: %d closers, %v", id, len(closers), err)
						}
						hs = append(hs, h)
					}
				}
				total += time.Since(t)
				b.StopTimer()
				for _, h := range hs {
					if err := openTurnAgain(ctx, h, turn); err != nil {
						b.Fatal(err)
					}
					if err := h.Close(); err != nil {
						b.Fatal(err)
					}
				}
				turn++
				b.StartTimer()
			}
			db.Close()
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "all-ms")
		})
	}
}

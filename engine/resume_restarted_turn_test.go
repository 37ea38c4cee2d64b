package engine_test

// Interrupted-turn closers of a log in which a turn/start follows a turn
// that never ended (the host restarted without resuming: no turn/end
// between the two turn/starts). As the reference's closer scan, the next
// turn/start opens a new turn, its step closed and no call pending: the
// closers close that last turn only (its pending calls, its open step,
// its turn/end with its turn number), never the earlier one's calls or
// step. Inspect and Resume give the same closers, the store's surface
// rules take them, and the resumed log is balanced and keeps the rules.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// turnLog builds a log that keeps the v3 surface rules, with seqs from 0.
type turnLog struct{ evs []event.Event }

func (l *turnLog) add(typ, data string) *turnLog {
	l.evs = append(l.evs, rawEv(uint64(len(l.evs)), typ, data))
	return l
}

func (l *turnLog) surface(typ, data string) *turnLog {
	l.add(typ, data)
	l.evs[len(l.evs)-1].SurfaceOp = json.RawMessage(`"append"`)
	return l
}

func (l *turnLog) turnStart(turn int) *turnLog {
	return l.add("turn/start", fmt.Sprintf(`{"turn":%d}`, turn))
}

func (l *turnLog) stepStart(turn, step int) *turnLog {
	return l.add("step/start", fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
}

func (l *turnLog) stepEnd(turn, step int) *turnLog {
	return l.add("step/end", fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
}

func (l *turnLog) user(turn, step int) *turnLog {
	return l.surface("user/message", fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"u%d","role":"user","content":[{"type":"text","text":"go"}],"source":{"kind":"user"}}}`, turn, step, turn))
}

// asks is an assistant message that asks for the calls.
func (l *turnLog) asks(turn, step int, calls ...string) *turnLog {
	blocks := `{"type":"text","text":"ok"}`
	for _, c := range calls {
		blocks += fmt.Sprintf(`,{"type":"tool-call","id":%q,"name":"read","arguments":"{}"}`, c)
	}
	return l.surface("assistant/message", fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"a%d","role":"assistant","content":[%s],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[]}`, turn, step, turn, blocks))
}

func (l *turnLog) call(turn, step int, id string) *turnLog {
	return l.add("tool/call", fmt.Sprintf(`{"turn":%d,"step":%d,"callId":%q,"name":"read","arguments":"{}"}`, turn, step, id))
}

// closer is what the test asserts of one closer.
type closer struct {
	Type    string
	Turn    int
	Step    *int     // step/end and tool results
	CallID  string   // tool results
	Code    string   // tool results
	Sources []uint64 // tool results of a recorded tool/call
	Reason  string   // turn/end
}

func closersOf(t *testing.T, evs []event.Event) []closer {
	t.Helper()
	var out []closer
	for _, e := range evs {
		var d struct {
			Turn    int
			Step    *int
			Reason  struct{ Kind string }
			Error   struct{ Code string }
			Message struct {
				Source struct{ CallID string }
			}
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("closer %d: %v", e.Seq, err)
		}
		out = append(out, closer{Type: e.Type, Turn: d.Turn, Step: d.Step, CallID: d.Message.Source.CallID,
			Code: d.Error.Code, Sources: e.SourceEventSeqs, Reason: d.Reason.Kind})
	}
	return out
}

func intp(i int) *int { return &i }

func TestResumeTurnStartWithoutTurnEnd(t *testing.T) {
	cases := []struct {
		name string
		log  *turnLog
		want []closer
	}{
		{
			// Turn 0 cut inside a tool call; turn 1 cut inside one too:
			// only c1 gets a result, only turn 1's step and turn close.
			name: "both turns cut inside a tool call",
			log: new(turnLog).turnStart(0).stepStart(0, 0).user(0, 0).asks(0, 0, "c0").call(0, 0, "c0").
				turnStart(1).stepStart(1, 0).user(1, 0).asks(1, 0, "c1", "c2").call(1, 0, "c1"),
			want: []closer{
				{Type: "tool/result", Turn: 1, Step: intp(0), CallID: "c1", Code: recovery.CodeToolOutcomeUnknown, Sources: []uint64{9}},
				{Type: "tool/result", Turn: 1, Step: intp(0), CallID: "c2", Code: recovery.CodeToolNotStarted},
				{Type: "step/end", Turn: 1, Step: intp(0)},
				{Type: "turn/end", Turn: 1, Reason: "interrupted"},
			},
		},
		{
			// Turn 0 cut inside a step with a call pending; turn 1 only
			// started: no step/end, no result.
			name: "the last turn has no step",
			log:  new(turnLog).turnStart(0).stepStart(0, 0).user(0, 0).asks(0, 0, "c0").turnStart(1),
			want: []closer{{Type: "turn/end", Turn: 1, Reason: "interrupted"}},
		},
		{
			// Three turn/starts, none ended; the last one's step ended.
			name: "three turns, the last one's step ended",
			log: new(turnLog).turnStart(0).stepStart(0, 0).user(0, 0).asks(0, 0, "c0").
				turnStart(1).stepStart(1, 0).asks(1, 0, "c1").
				turnStart(2).stepStart(2, 0).asks(2, 0, "c2").stepEnd(2, 0),
			want: []closer{{Type: "turn/end", Turn: 2, Reason: "interrupted"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if err := recovery.CheckSurface(c.log.evs); err != nil {
				t.Fatalf("the log breaks the surface rules: %v", err)
			}
			db, err := engine.OpenStore(t, t.TempDir(), &engine.Options{SurfaceRules: true, CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Create(ctx, enginetest.Meta("s"))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Append(ctx, c.log.evs...); err != nil {
				t.Fatal(err)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}

			in, err := db.Inspect(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, closersOf(t, in.Closers)); diff != "" {
				t.Fatalf("Inspect's closers (-want +got):\n%s", diff)
			}
			n := uint64(len(c.log.evs))
			last := c.log.evs[n-1]
			for i, e := range in.Closers {
				if e.Seq != n+uint64(i) || e.Time != last.Time {
					t.Fatalf("closer %d: seq %d time %d, want seq %d time %d", i, e.Seq, e.Time, n+uint64(i), last.Time)
				}
			}
			w, closers, err := db.Resume(ctx, "s") // (its append is checked by the surface rules)
			if err != nil {
				t.Fatalf("resume: %v", err)
			}
			if diff := cmp.Diff(in.Closers, closers); diff != "" {
				t.Fatalf("Resume's closers differ from Inspect's (-inspect +resume):\n%s", diff)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := db.Open(ctx, "s", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			all, err := r.Read(ctx, 0, -1)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := recovery.CheckSurface(all); err != nil {
				t.Fatalf("the resumed log breaks the surface rules: %v", err)
			}
			if st, err := recovery.Fold(all); err != nil || !st.Balanced() || len(st.Pending) != 0 {
				t.Fatalf("the resumed log is not balanced: %+v, %v", st, err)
			}
			if _, again, err := db.Resume(ctx, "s"); err != nil || len(again) != 0 {
				t.Fatalf("a second resume: %d closers, %v; want none", len(again), err)
			}
		})
	}
}

package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
)

// memLog is a Log in memory; failNext makes the next Append fail.
type memLog struct {
	evs      []event.Event
	failNext bool
}

func (m *memLog) Read(_ context.Context, off, limit int) ([]event.Event, error) {
	if off >= len(m.evs) {
		return nil, nil
	}
	end := len(m.evs)
	if limit >= 0 && off+limit < end {
		end = off + limit
	}
	return append([]event.Event(nil), m.evs[off:end]...), nil
}

func (m *memLog) Append(_ context.Context, evs ...event.Event) error {
	if m.failNext {
		m.failNext = false
		return errors.New("disk full")
	}
	for i, e := range evs {
		if e.Seq != uint64(len(m.evs)) {
			return fmt.Errorf("seq %d at %d", e.Seq, len(m.evs))
		}
		if err := e.Validate(i); err != nil {
			return err
		}
		m.evs = append(m.evs, e)
	}
	return nil
}

func (m *memLog) add(typ, data string) {
	m.evs = append(m.evs, event.Event{Seq: uint64(len(m.evs)), Type: typ, Time: 1, Data: json.RawMessage(data)})
}

func (m *memLog) types() []string {
	var out []string
	for _, e := range m.evs {
		out = append(out, e.Type)
	}
	return out
}

func newCtl(log *memLog) *Controller {
	return NewController(Config{Section: "Plan first."}, log, func() int64 { return 42 })
}

var ctx = context.Background()

// log setups
func idle() *memLog { return &memLog{} }
func inTurn() *memLog {
	m := &memLog{}
	m.add("turn/start", `{"turn":0}`)
	m.add("step/start", `{"turn":0,"step":0}`)
	return m
}
func withHeader(m *memLog, planActive bool) *memLog {
	if planActive {
		m.add(EventType, `{"active":true}`)
	}
	m.add("request/header", `{"header":{"config":{"provider":"p","model":"m"}},"reason":"initial"}`)
	return m
}

func TestSet(t *testing.T) {
	tests := []struct {
		name       string
		log        func() *memLog
		before     []bool // earlier Set calls
		set        bool
		want       SetResult
		wantActive bool
		wantPend   *bool
		appended   int // plan/mode events appended by the whole case
	}{
		{"committed: no turn open, the event is appended at once", idle, nil, true, Committed, true, nil, 1},
		{"queued: a turn is open, appended at the next accepted in-turn pre-step", inTurn, nil, true, Queued, false, ptr(true), 0},
		{"noop: the state asked for is already current", idle, nil, false, Noop, false, nil, 0},
		{"noop: the state asked for is already pending", inTurn, []bool{true}, true, Noop, false, ptr(true), 0},
		{"cancelled: undoes a pending change", inTurn, []bool{true}, false, Cancelled, false, nil, 0},
		{"committed twice between turns: on then off", idle, []bool{true}, false, Committed, false, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := tt.log()
			c := newCtl(log)
			for _, b := range tt.before {
				if _, err := c.Set(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.Set(ctx, tt.set)
			if err != nil || got != tt.want {
				t.Fatalf("Set(%v) = %q, %v; want %q", tt.set, got, err, tt.want)
			}
			st, _ := c.Get(ctx)
			if st.Active != tt.wantActive || !eqPtr(st.Pending, tt.wantPend) {
				t.Errorf("Get = %+v, want active %v pending %v", st, tt.wantActive, tt.wantPend)
			}
			if n := count(log, EventType); n != tt.appended {
				t.Errorf("%d plan/mode events appended, want %d", n, tt.appended)
			}
		})
	}
}

func ptr(b bool) *bool { return &b }
func eqPtr(a, b *bool) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
func count(m *memLog, typ string) int {
	n := 0
	for _, e := range m.evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestPreStep(t *testing.T) {
	t.Run("a pending selection is appended at the next accepted in-turn pre-step", func(t *testing.T) {
		log := inTurn()
		c := newCtl(log)
		c.Set(ctx, true)
		if err := c.PreStep(ctx); err != nil {
			t.Fatal(err)
		}
		st, _ := c.Get(ctx)
		if !st.Active || st.Pending != nil || count(log, EventType) != 1 {
			t.Errorf("after pre-step: %+v, %v", st, log.types())
		}
		if err := c.PreStep(ctx); err != nil || count(log, EventType) != 1 {
			t.Errorf("a second pre-step appended again: %v", log.types())
		}
	})
	t.Run("an append failure cannot block the turn: the selection stays pending", func(t *testing.T) {
		log := inTurn()
		c := newCtl(log)
		c.Set(ctx, true)
		log.failNext = true
		if err := c.PreStep(ctx); err == nil {
			t.Fatal("the failure was not reported")
		}
		if st, _ := c.Get(ctx); st.Pending == nil || !*st.Pending {
			t.Fatalf("selection lost after a failed append: %+v", st)
		}
		if err := c.PreStep(ctx); err != nil {
			t.Fatal(err)
		}
		if st, _ := c.Get(ctx); !st.Active || st.Pending != nil {
			t.Errorf("later pre-step did not append: %+v", st)
		}
	})
}

func TestNotice(t *testing.T) {
	notices := func(log *memLog) []event.Event {
		var out []event.Event
		for _, e := range log.evs {
			if e.Type == "user/message" {
				out = append(out, e)
			}
		}
		return out
	}
	t.Run("notice only when the last request header described the other state", func(t *testing.T) {
		log := withHeader(idle(), false)
		c := newCtl(log)
		c.Set(ctx, true)
		ns := notices(log)
		if len(ns) != 1 {
			t.Fatalf("%d notices, want 1: %v", len(ns), log.types())
		}
		var d struct {
			Message struct {
				Source map[string]string
			}
		}
		json.Unmarshal(ns[0].Data, &d)
		if d.Message.Source["kind"] != "plugin" || d.Message.Source["plugin"] != "plan-mode" || d.Message.Source["form"] != "notice" {
			t.Errorf("notice source %v", d.Message.Source)
		}
		if len(ns[0].SourceEventSeqs) != 1 || ns[0].SourceEventSeqs[0] != ns[0].Seq-1 || string(ns[0].SurfaceOp) != `"append"` {
			t.Errorf("notice does not cite the plan/mode event: %+v", ns[0])
		}
	})
	t.Run("no notice when the header already describes the new state (never redundant)", func(t *testing.T) {
		log := withHeader(idle(), true) // plan active at the header
		log.add(EventType, `{"active":false}`)
		c := newCtl(log)
		c.Set(ctx, true)
		if len(notices(log)) != 0 {
			t.Errorf("redundant notice: %v", log.types())
		}
	})
	t.Run("no notice before any request header", func(t *testing.T) {
		log := idle()
		newCtl(log).Set(ctx, true)
		if len(notices(log)) != 0 {
			t.Errorf("notice without a header: %v", log.types())
		}
	})
	t.Run("an approved exit is silent", func(t *testing.T) {
		log := withHeader(inTurn(), true)
		c := newCtl(log)
		res, err := c.ExitPlanMode(ctx, json.RawMessage(`{"plan":"# Plan\n1. do it"}`), fixed{Approve, ""})
		if err != nil || res.IsError || string(res.Content) != `{"approved":true}` {
			t.Fatalf("approve = %+v, %v", res, err)
		}
		if st, _ := c.Get(ctx); !st.Active || st.Pending == nil || *st.Pending {
			t.Fatalf("guidance must stay active until the pending exit is appended: %+v", st)
		}
		c.PreStep(ctx)
		if st, _ := c.Get(ctx); st.Active || len(notices(log)) != 0 {
			t.Errorf("after the pre-step: %+v, notices %d", st, len(notices(log)))
		}
	})
}

type fixed struct {
	d        Decision
	feedback string
}

func (f fixed) Review(context.Context, string) (Decision, string, error) { return f.d, f.feedback, nil }

type broken struct{}

func (broken) Review(context.Context, string) (Decision, string, error) {
	return 0, "", errors.New("service reloaded")
}

func TestExitPlanMode(t *testing.T) {
	plan := json.RawMessage(`{"plan":"# Plan\n- step"}`)
	tests := []struct {
		name    string
		active  bool
		args    json.RawMessage
		r       Reviewer
		isError bool
		content string
		endTurn bool
		err     error
	}{
		{"fails outside plan mode", false, plan, fixed{Approve, ""}, true, "", false, ErrNotInPlanMode},
		{"requires a markdown plan starting with #", true, json.RawMessage(`{"plan":"just do it"}`), fixed{Approve, ""}, true, "", false, ErrNoPlan},
		{"requires a plan at all", true, json.RawMessage(`{}`), fixed{Approve, ""}, true, "", false, ErrNoPlan},
		{"approve returns approved:true", true, plan, fixed{Approve, ""}, false, `{"approved":true}`, false, nil},
		{"keep-planning is a failed call carrying the feedback", true, plan, fixed{KeepPlanning, "add tests"}, true, `"add tests"`, false, nil},
		{"dismiss returns approved:false and ends the turn", true, plan, fixed{Dismiss, ""}, false, `{"approved":false}`, true, nil},
		{"a missing channel fails the call", true, plan, nil, true, "", false, ErrNoChannel},
		{"a reload during review fails the call", true, plan, broken{}, true, "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := idle()
			if tt.active {
				log.add(EventType, `{"active":true}`)
			}
			c := newCtl(log)
			res, err := c.ExitPlanMode(ctx, tt.args, tt.r)
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("err = %v, want %v", err, tt.err)
			}
			if res.IsError != tt.isError || res.EndTurn != tt.endTurn || (tt.content != "" && string(res.Content) != tt.content) {
				t.Errorf("result = %+v (%s)", res, res.Content)
			}
			st, _ := c.Get(ctx)
			wantPending := tt.content == `{"approved":true}`
			if (st.Pending != nil) != wantPending {
				t.Errorf("pending = %v, want a pending exit: %v", st.Pending, wantPending)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	t.Run("bare /plan selects plan mode", func(t *testing.T) {
		c := newCtl(idle())
		r, err := c.Command(ctx, "")
		if err != nil || r.Set != Committed || r.Steer != "" {
			t.Errorf("= %+v, %v", r, err)
		}
	})
	t.Run("/plan message selects plan mode and steers the text in", func(t *testing.T) {
		c := newCtl(inTurn())
		r, err := c.Command(ctx, "  design the cache  ")
		if err != nil || r.Set != Queued || r.Steer != "design the cache" {
			t.Errorf("= %+v, %v", r, err)
		}
	})
	t.Run("/plan off cancels a pending entry before it is appended", func(t *testing.T) {
		log := inTurn()
		c := newCtl(log)
		c.Command(ctx, "")
		r, err := c.Command(ctx, "off")
		if err != nil || r.Set != Cancelled || count(log, EventType) != 0 {
			t.Errorf("= %+v, %v, %v", r, err, log.types())
		}
		c.PreStep(ctx)
		if st, _ := c.Get(ctx); st.Active {
			t.Error("the cancelled entry was appended")
		}
	})
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		raw  string
		want string // error substring, "" for valid
	}{
		{`{"section":"Plan before acting."}`, ""},
		{`{}`, `missing key "section"`},
		{`{"section":"   "}`, "blank"},
		{`{"section":3}`, "not a string"},
		{`{"section":"x","mode":"on"}`, `unknown key "mode"`},
		{`[]`, "not a JSON object"},
	}
	for _, tt := range tests {
		cfg, err := LoadConfig(json.RawMessage(tt.raw))
		if tt.want == "" {
			if err != nil || cfg.Section == "" {
				t.Errorf("LoadConfig(%s) = %+v, %v", tt.raw, cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadConfig(%s) = %v, want an error with %q", tt.raw, err, tt.want)
		}
	}
}

func TestSection(t *testing.T) {
	log := idle()
	c := newCtl(log)
	if _, ok, _ := c.Section(ctx); ok {
		t.Error("inactive plan mode contributes a section")
	}
	c.Set(ctx, true)
	if text, ok, _ := c.Section(ctx); !ok || text != "Plan first." {
		t.Errorf("active section = %q, %v", text, ok)
	}
	if SectionName != "plan:policy" || SectionOrder != 50 {
		t.Error("section placement changed")
	}
}

// After a crash mid-turn, the plan state folds correctly over the balanced
// log: the last plan/mode wins, and the interrupted turn is closed.
func TestFoldAfterCrashAndRecovery(t *testing.T) {
	log := idle()
	log.add("turn/start", `{"turn":0}`)
	log.add("step/start", `{"turn":0,"step":0}`)
	log.add(EventType, `{"active":true}`)
	log.add("request/header", `{"header":{"config":{}},"reason":"initial"}`) // then the process died
	balanced, err := recovery.Balance(log.evs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Fold{}.FoldLog(balanced)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Active || f.TurnOpen || f.HeaderMode == nil || !*f.HeaderMode {
		t.Errorf("fold over the balanced log = %+v", f)
	}
	// A resumed controller decides from it: off is committed at once now
	// that no turn is open, with a notice since the header said "on".
	m := &memLog{evs: balanced}
	c := newCtl(m)
	if r, err := c.Set(ctx, false); err != nil || r != Committed || count(m, "user/message") != 1 {
		t.Errorf("Set after recovery = %q, %v, %v", r, err, m.types())
	}
}

// FuzzPlanFold: folding any sequence of the event types plan mode reads
// never panics, and the committed state is the last well-formed plan/mode.
func FuzzPlanFold(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4})
	f.Add([]byte{2, 2, 5, 0, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := idle()
		want := false
		for _, c := range b {
			switch c % 6 {
			case 0:
				m.add("turn/start", `{"turn":1}`)
			case 1:
				m.add("turn/end", `{"turn":1,"reason":{"kind":"completed"}}`)
			case 2:
				active := c&0x80 != 0
				m.add(EventType, fmt.Sprintf(`{"active":%v}`, active))
				want = active
			case 3:
				m.add("request/header", `{"header":{"config":{}},"reason":"change"}`)
			case 4:
				m.add("step/start", `{"turn":1,"step":2}`)
			default:
				m.add("user/message", `{"turn":1}`)
			}
		}
		f, err := Fold{}.FoldLog(m.evs)
		if err != nil {
			t.Fatal(err)
		}
		if f.Active != want || f.Len != len(m.evs) {
			t.Fatalf("fold %+v, want active %v", f, want)
		}
	})
}

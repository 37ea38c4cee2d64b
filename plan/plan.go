package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/seglog/seglog/event"
)

// Event types plan mode reads and writes.
const (
	// EventType is the log-only plan/mode event: data {"active": bool},
	// whole-value replace, never part of the model's transcript.
	EventType         = "plan/mode"
	typeTurnStart     = "turn/start"
	typeTurnEnd       = "turn/end"
	typeRequestHeader = "request/header"
	typeUserMessage   = "user/message"
)

// SectionName and SectionOrder place the plan:policy system-prompt
// section.
const (
	SectionName  = "plan:policy"
	SectionOrder = 50
)

// Config is the deployment's plan guidance.
type Config struct {
	// Section is rendered as the plan:policy prompt section while plan mode
	// is active. It must be a non-blank string.
	Section string `json:"section"`
}

// ErrConfig is the kind of every configuration error.
var ErrConfig = errors.New("plan: bad configuration")

// LoadConfig parses a plan-mode configuration object. A missing, blank or
// non-string section and any unknown key fail, naming what was wrong.
func LoadConfig(raw json.RawMessage) (Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return Config{}, fmt.Errorf("%w: not a JSON object: %v", ErrConfig, err)
	}
	var unknown []string
	for k := range m {
		if k != "section" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("%w: unknown key %q", ErrConfig, unknown[0])
	}
	v, ok := m["section"]
	if !ok {
		return Config{}, fmt.Errorf("%w: missing key \"section\"", ErrConfig)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return Config{}, fmt.Errorf("%w: \"section\" is not a string", ErrConfig)
	}
	if strings.TrimSpace(s) == "" {
		return Config{}, fmt.Errorf("%w: \"section\" is blank", ErrConfig)
	}
	return Config{Section: s}, nil
}

// Fold is the plan state a log implies.
type Fold struct {
	Active   bool // the committed mode: the last plan/mode event wins; none means inactive
	TurnOpen bool // a turn/start without its turn/end
	// HeaderMode is the committed mode when the latest request/header was
	// logged: the state the model's context last described. Nil before the
	// first request header.
	HeaderMode *bool
	Len        int // events folded
	Turn       json.RawMessage
	Step       json.RawMessage
}

// FoldLog folds events (the whole log, or more of it onto f). A plan/mode
// event whose data is not {"active": bool} is an error naming its seq.
func (f Fold) FoldLog(events []event.Event) (Fold, error) {
	for i := range events {
		e := &events[i]
		switch e.Type {
		case EventType:
			var d struct {
				Active *bool `json:"active"`
			}
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Active == nil {
				return f, fmt.Errorf("plan: plan/mode event at seq %d has no boolean \"active\"", e.Seq)
			}
			f.Active = *d.Active
		case typeTurnStart:
			f.TurnOpen = true
			f.Turn = field(e.Data, "turn")
		case typeTurnEnd:
			f.TurnOpen = false
		case "step/start":
			f.Step = field(e.Data, "step")
		case typeRequestHeader:
			mode := f.Active
			f.HeaderMode = &mode
		}
		f.Len++
	}
	return f, nil
}

func field(data json.RawMessage, key string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return m[key]
}

// Log is the session a controller works on: in practice an
// *engine.Handle opened for write.
type Log interface {
	Read(ctx context.Context, offset, limit int) ([]event.Event, error)
	Append(ctx context.Context, evs ...event.Event) error
}

// SetResult says what Set did.
type SetResult string

// The results of Set.
const (
	Committed SetResult = "committed" // no turn was open: appended at once
	Queued    SetResult = "queued"    // a turn is open: appended at the next accepted in-turn pre-step
	Cancelled SetResult = "cancelled" // an opposite pending selection was cleared; the logged state matches
	Noop      SetResult = "noop"      // already the logged or pending state
)

// State is what clients see: the logged mode and a selection awaiting the
// next accepted in-turn pre-step.
type State struct {
	Active  bool  `json:"active"`
	Pending *bool `json:"pending,omitempty"`
}

type pending struct {
	active bool
	silent bool // an approved exit: no notice
}

// Controller is plan mode for one agent's session. Its decisions are pure
// functions of the folded log and the pending selection; its only I/O is
// through the Log. It is safe for concurrent use.
type Controller struct {
	cfg Config
	log Log
	now func() int64 // milliseconds, for event times

	mu      sync.Mutex
	fold    Fold
	pending *pending
}

// NewController returns a controller over log. now gives the time for the
// events it appends (the package reads no clock).
func NewController(cfg Config, log Log, now func() int64) *Controller {
	return &Controller{cfg: cfg, log: log, now: now}
}

// refresh folds the events appended since the last look. Called with c.mu held.
func (c *Controller) refresh(ctx context.Context) error {
	evs, err := c.log.Read(ctx, c.fold.Len, -1)
	if err != nil {
		return err
	}
	f, err := c.fold.FoldLog(evs)
	if err != nil {
		return err
	}
	c.fold = f
	return nil
}

// Get returns the logged mode and the pending selection, if any.
func (c *Controller) Get(ctx context.Context) (State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx); err != nil {
		return State{}, err
	}
	return c.state(), nil
}

func (c *Controller) state() State {
	s := State{Active: c.fold.Active}
	if c.pending != nil {
		p := c.pending.active
		s.Pending = &p
	}
	return s
}

// decide is Set's pure decision. p is the pending selection, if any.
func decide(f Fold, p *pending, active bool) SetResult {
	switch {
	case p != nil && p.active == active:
		return Noop // already pending
	case p != nil && f.Active == active:
		return Cancelled // the opposite was pending; the logged state already matches
	case f.Active == active:
		return Noop
	case !f.TurnOpen:
		return Committed // between turns no pre-step will run: append now
	}
	return Queued
}

// Set selects whether plan mode should be active. With no turn open the
// plan/mode event is appended at once (committed); during a turn the
// selection waits for the next accepted in-turn pre-step (queued).
// Selecting the logged or already-pending state is a no-op; selecting the
// logged state while the opposite is pending cancels it.
func (c *Controller) Set(ctx context.Context, active bool) (SetResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx); err != nil {
		return "", err
	}
	r := decide(c.fold, c.pending, active)
	switch r {
	case Cancelled:
		c.pending = nil
	case Queued:
		c.pending = &pending{active: active}
	case Committed:
		if err := c.appendMode(ctx, active, false); err != nil {
			return "", err
		}
		c.pending = nil
	}
	return r, nil
}

// PreStep is the host's hook at every accepted in-turn pre-step (after its
// other listeners accepted the step, before the request is derived): a
// pending selection is appended now. If the append fails the selection
// stays pending for a later pre-step, and the error is returned for the
// host to log; the step goes on.
func (c *Controller) PreStep(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		return nil
	}
	if err := c.refresh(ctx); err != nil {
		return err
	}
	if c.fold.Active == c.pending.active {
		c.pending = nil
		return nil
	}
	if err := c.appendMode(ctx, c.pending.active, c.pending.silent); err != nil {
		return err
	}
	c.pending = nil
	return nil
}

// appendMode appends plan/mode and, for a user selection that differs from
// what the last request header described, one plugin-sourced user/message
// notice. Called with c.mu held, after refresh.
func (c *Controller) appendMode(ctx context.Context, active, silent bool) error {
	seq := uint64(c.fold.Len)
	t := c.now()
	evs := []event.Event{{Seq: seq, Type: EventType, Time: t, Data: mustJSON(map[string]bool{"active": active})}}
	if !silent && c.fold.HeaderMode != nil && *c.fold.HeaderMode != active {
		evs = append(evs, notice(seq+1, t, c.fold, active))
	}
	if err := c.log.Append(ctx, evs...); err != nil {
		return err
	}
	return c.refresh(ctx)
}

func notice(seq uint64, t int64, f Fold, active bool) event.Event {
	text := "Plan mode is now off: carry out the plan."
	if active {
		text = "Plan mode is now on: plan, do not change anything yet."
	}
	msg := map[string]any{
		"id":      fmt.Sprintf("plan-mode-notice-%d", seq),
		"role":    "user",
		"content": []map[string]string{{"type": "text", "text": text}},
		"source":  map[string]string{"kind": "plugin", "plugin": "plan-mode", "form": "notice"},
	}
	data := map[string]any{"message": msg}
	if f.Turn != nil {
		data["turn"] = f.Turn
	}
	if f.Step != nil {
		data["step"] = f.Step
	}
	return event.Event{
		Seq: seq, Type: typeUserMessage, Time: t, Data: mustJSON(data),
		SurfaceOp: json.RawMessage(`"append"`), SourceEventSeqs: []uint64{seq - 1},
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain values are marshalled here
	}
	return b
}

// Section returns the plan:policy prompt section: the configured text
// while plan mode is active (the logged state the current step is built
// from), nothing otherwise.
func (c *Controller) Section(ctx context.Context) (text string, ok bool, err error) {
	st, err := c.Get(ctx)
	if err != nil || !st.Active {
		return "", false, err
	}
	return c.cfg.Section, true, nil
}

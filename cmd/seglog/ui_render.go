package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/seglog/seglog/event"
)

// The web viewer's (seglog ui) view of events: each event becomes a
// uiEvent, a row of a session's timeline that the templates in ui/
// render. Nothing here writes HTML: html/template escapes every string
// of a uiEvent where it is put.

// uiBodyMax is the most bytes of one text (a message, a tool call's
// arguments, a tool result) a timeline row shows; the rest is named by
// its size (seglog cat prints it whole).
const uiBodyMax = 64 << 10

// uiEvent is one row of a session's timeline.
type uiEvent struct {
	Seq   uint64
	Type  string
	Time  string // UTC, to the millisecond
	Kind  string // the row's class: turn, turn-end, step, user, assistant, system, call, result, title, seed, chunk, other
	Label string // a short heading: "turn 3", "ls", "completed"
	Text  string // message text, a tool call's arguments, a tool result's text (at most uiBodyMax bytes)
	More  int    // bytes of Text left out
	Size  int    // bytes of the event's data
	Dur   string // a tool result's time since its call ("" if the call is not in view)
	Calls []uiCall
	// Error marks a failed tool result, an interrupted turn's end or
	// message.
	Error     bool
	Inherited bool // an event of the parent, before a fork's marker
	Closer    bool // not stored: what a resume would append (Inspect's closers)
	Fold      bool // shown folded (tool calls and results, log-only events)
}

// uiCall is a tool call an assistant message asks for.
type uiCall struct {
	ID, Name string
	Size     int // bytes of its arguments
}

// uiRenderer turns a session's events into rows, in order: it keeps the
// time of each tool call seen, for the duration of its result.
type uiRenderer struct {
	inherited uint64           // events before this seq are a fork's parent's
	callTime  map[string]int64 // call id → time of its tool/call (or of the message that asked for it)
}

func newUIRenderer(inherited uint64) *uiRenderer {
	return &uiRenderer{inherited: inherited, callTime: map[string]int64{}}
}

// uiTime formats ms since the epoch as the timeline shows it.
func uiTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000")
}

// uiSize is n bytes, for a person.
func uiSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// uiDuration is d, for a person.
func uiDuration(ms int64) string {
	switch {
	case ms < 0:
		return ""
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// The payload shapes the viewer reads (docs/EVENTS.md); every field is
// optional, and an event whose data does not fit is shown by its type
// and size.
type uiMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Source  struct {
		CallID string `json:"callId"`
	} `json:"source"`
}

type uiData struct {
	Turn        json.RawMessage `json:"turn"`
	Step        json.RawMessage `json:"step"`
	Message     *uiMessage      `json:"message"`
	Content     json.RawMessage `json:"content"` // user/message: the message itself; older logs' assistant blocks
	CallID      string          `json:"callId"`
	Name        string          `json:"name"`
	Arguments   json.RawMessage `json:"arguments"`
	Title       *string         `json:"title"`
	Interrupted bool            `json:"interrupted"`
	Reason      *struct {
		Kind string `json:"kind"`
	} `json:"reason"`
	Error *struct {
		Name string `json:"name"`
		Code string `json:"code"`
	} `json:"error"`
}

type uiBlock struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	ToolCallID string          `json:"toolCallId"`
	IsError    bool            `json:"isError"`
	Content    json.RawMessage `json:"content"`
}

// uiBlocks reads content: a string, or an array of blocks. It returns
// the text of its text (and reasoning) blocks, the tool calls it asks
// for, and its tool results' text and error flag.
func uiBlocks(content json.RawMessage) (text string, calls []uiCall, isError bool) {
	if len(content) == 0 {
		return "", nil, false
	}
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s, nil, false
	}
	var blocks []uiBlock
	if json.Unmarshal(content, &blocks) != nil {
		return "", nil, false
	}
	var parts []string
	for _, b := range blocks {
		switch b.Type {
		case "text", "reasoning":
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		case "tool-call":
			calls = append(calls, uiCall{ID: b.ID, Name: b.Name, Size: len(uiArgs(b.Arguments))})
		case "tool-result":
			t, _, _ := uiBlocks(b.Content)
			parts = append(parts, t)
			isError = isError || b.IsError
		default:
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, "\n"), calls, isError
}

// uiArgs is a tool call's arguments as text: the raw string, or the
// JSON value.
func uiArgs(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// uiNumber is a turn or step number as shown (its JSON, "" if none).
func uiNumber(raw json.RawMessage) string {
	return strings.Trim(string(raw), `"`)
}

// body sets the row's text, cut at uiBodyMax.
func (r *uiEvent) body(s string) {
	if len(s) > uiBodyMax {
		cut := uiBodyMax
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		r.More = len(s) - cut
		s = s[:cut]
	}
	r.Text = s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// row is e as a timeline row.
func (u *uiRenderer) row(e *event.Event) uiEvent {
	r := uiEvent{Seq: e.Seq, Type: e.Type, Time: uiTime(e.Time), Kind: "other", Size: len(e.Data),
		Inherited: e.Seq < u.inherited}
	var d uiData
	ok := json.Unmarshal(e.Data, &d) == nil
	switch {
	case !ok:
		r.Fold = true
	case e.Type == "turn/start":
		r.Kind, r.Label = "turn", "turn "+uiNumber(d.Turn)
	case e.Type == "turn/end":
		r.Kind, r.Label = "turn-end", "end of turn "+uiNumber(d.Turn)
		if d.Reason != nil {
			r.Text = d.Reason.Kind
			r.Error = d.Reason.Kind == "interrupted" || d.Reason.Kind == "error"
		}
	case e.Type == "step/start" || e.Type == "step/end":
		r.Kind, r.Label = "step", strings.TrimPrefix(e.Type, "step/")+" of step "+uiNumber(d.Step)
	case e.Type == "user/message" || e.Type == "assistant/message" || e.Type == "system/message":
		r.Kind = strings.TrimSuffix(e.Type, "/message")
		content := d.Content
		if d.Message != nil {
			content = d.Message.Content
		}
		text, calls, _ := uiBlocks(content)
		r.body(text)
		r.Calls = calls
		for _, c := range calls {
			if _, seen := u.callTime[c.ID]; !seen {
				u.callTime[c.ID] = e.Time
			}
		}
		if d.Interrupted {
			r.Error, r.Label = true, "interrupted"
		}
	case e.Type == "tool/call":
		r.Kind, r.Label, r.Fold = "call", d.Name, true
		u.callTime[d.CallID] = e.Time
		r.body(uiArgs(d.Arguments))
	case e.Type == "tool/result":
		r.Kind, r.Fold = "result", true
		callID := d.CallID
		var text string
		if d.Message != nil {
			var isErr bool
			text, _, isErr = uiBlocks(d.Message.Content)
			r.Error = isErr
			if d.Message.Source.CallID != "" {
				callID = d.Message.Source.CallID
			}
		}
		if d.Error != nil {
			r.Error = true
			r.Label = strings.TrimSpace(d.Error.Name + " " + d.Error.Code)
		}
		r.body(text)
		if t, seen := u.callTime[callID]; seen {
			r.Dur = uiDuration(e.Time - t)
		}
		if r.Label == "" {
			r.Label = callID
		}
	case e.Type == "session/title" && d.Title != nil:
		r.Kind, r.Label = "title", *d.Title
	case e.Type == "session/end-seed":
		r.Kind, r.Label = "seed", "fork point"
	default:
		r.Fold = true
		if strings.HasPrefix(e.Type, "assistant/chunk") {
			r.Kind = "chunk"
		}
		r.body(string(e.Data))
	}
	return r
}

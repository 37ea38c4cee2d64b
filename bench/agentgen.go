package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"unicode"

	"github.com/seglog/seglog/event"
)

// The events of the agent-host workload: turns as an agent host writes
// them in the reference's v3 vocabulary (docs/EVENTS.md), their text cut
// from a Corpus. A turn is
//
//	turn/start, step/start (step 0), user/message,
//	assistant/chunk x n (the streamed deltas), assistant/message (text and 1-3 tool-call blocks),
//	tool/call + tool/result for each call, step/end,
//	step/start (step 1), assistant/chunk x m, assistant/message (the answer), step/end,
//	turn/end
//
// The user's message is a passage of a document, the assistant's text
// another, streamed a few words per assistant/chunk event; its
// assistant/message carries the whole text and the stream it came from
// (the reference's "text-chunks" stream) as the reference's does. The
// tools read a file (a window of its lines, numbered), grep the corpus for
// a word of it, and list a directory. Every turn is a pure function of
// the corpus, the session's number and the turn's number, and keeps the
// v3 surface rules (recovery.CheckSurface).

// AgentSessionID is the ID of session i of the agent-host workload.
func AgentSessionID(i int) string { return fmt.Sprintf("agent-%04d", i) }

// AgentTurn returns turn t of session i, its events numbered from seq.
func AgentTurn(c *Corpus, i, t int, seq uint64) []event.Event {
	g := turnGen{c: c, r: rand.New(rand.NewPCG(uint64(i)+1, uint64(t)+1)), turn: t, seq: seq,
		id:  fmt.Sprintf("%d-%d", i, t),
		now: 1_750_000_000_000 + int64(i)*1_000 + int64(t)*120_000}
	g.add("turn/start", map[string]any{"turn": t}, false)
	g.add("step/start", step{t, 0}, false)
	g.add("user/message", message{Turn: t, Message: msg{ID: "user-" + g.id, Role: "user",
		Content: []any{text{"text", g.prose(80, 700)}}, Source: map[string]any{"kind": "user"}}}, true)

	calls := 1 + g.r.IntN(3)
	blocks := []any{}
	var args []map[string]any
	for k := range calls {
		a := g.toolArgs()
		args = append(args, a)
		blocks = append(blocks, toolCall{"tool-call", g.callID(k), a["tool"].(string), without(a, "tool")})
	}
	g.assistant(0, g.prose(150, 900), blocks)
	for k, a := range args {
		name := a["tool"].(string)
		g.add("tool/call", map[string]any{"turn": t, "step": 0, "callId": g.callID(k), "name": name, "arguments": without(a, "tool")}, false)
		out := g.toolOutput(a)
		g.add("tool/result", message{Turn: t, Message: msg{ID: "result-" + g.callID(k), Role: "user",
			Source:  map[string]any{"kind": "tool", "callId": g.callID(k)},
			Content: []any{toolResult{"tool-result", g.callID(k), false, []any{text{"text", out}}}}}}, true)
	}
	g.add("step/end", step{t, 0}, false)
	g.add("step/start", step{t, 1}, false)
	g.assistant(1, g.prose(200, 1500), nil)
	g.add("step/end", step{t, 1}, false)
	g.add("turn/end", map[string]any{"turn": t, "reason": map[string]any{"kind": "completed"}}, false)
	return g.evs
}

type step struct {
	Turn int `json:"turn"`
	Step int `json:"step"`
}

type message struct {
	Turn    int            `json:"turn"`
	Step    int            `json:"step"`
	Message msg            `json:"message"`
	Stream  []textChunks   `json:"stream,omitempty"`
	Usage   map[string]int `json:"usage,omitempty"`
}

type msg struct {
	ID      string         `json:"id"`
	Role    string         `json:"role"`
	Content []any          `json:"content"`
	Source  map[string]any `json:"source"`
}

type text struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolCall struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

type toolResult struct {
	Type       string `json:"type"`
	ToolCallID string `json:"toolCallId"`
	IsError    bool   `json:"isError"`
	Content    []any  `json:"content"`
}

// textChunks is a piece of a streamed text: its tokens and the
// milliseconds between them.
type textChunks struct {
	Type  string   `json:"type"`
	Time0 int64    `json:"time0"`
	Index int      `json:"index"`
	DT    []int    `json:"dt"`
	Texts []string `json:"texts"`
}

type turnGen struct {
	c    *Corpus
	r    *rand.Rand
	turn int
	seq  uint64
	id   string
	now  int64
	evs  []event.Event
}

func (g *turnGen) callID(k int) string { return fmt.Sprintf("call-%s-%d", g.id, k) }

func (g *turnGen) add(typ string, data any, surface bool) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // the data is ours: maps and structs of strings and numbers
	}
	g.now += 1 + int64(g.r.IntN(40))
	e := event.Event{Seq: g.seq, Type: typ, Time: g.now, Data: b}
	if surface {
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	g.evs = append(g.evs, e)
	g.seq++
}

// assistant streams text as assistant/chunk events of a few tokens each,
// then writes the assistant/message with the text, the blocks and the
// stream.
func (g *turnGen) assistant(stepN int, s string, blocks []any) {
	id := fmt.Sprintf("asst-%s-%d", g.id, stepN)
	tokens := strings.SplitAfter(s, " ")
	all := textChunks{Type: "text-chunks", Time0: g.now + 1}
	for len(tokens) > 0 {
		n := min(len(tokens), 2+g.r.IntN(8))
		c := textChunks{Type: "text-chunks", Time0: g.now + 1, Index: len(all.Texts), Texts: tokens[:n]}
		for range n {
			c.DT = append(c.DT, g.r.IntN(30))
		}
		tokens = tokens[n:]
		all.Texts, all.DT = append(all.Texts, c.Texts...), append(all.DT, c.DT...)
		g.add("assistant/chunk", map[string]any{"turn": g.turn, "step": stepN, "messageId": id, "chunk": c}, false)
	}
	content := append([]any{text{"text", s}}, blocks...)
	g.add("assistant/message", message{Turn: g.turn, Step: stepN,
		Message: msg{ID: id, Role: "assistant", Content: content,
			Source: map[string]any{"kind": "model", "provider": "deepseek", "model": "deepseek-chat"}},
		Stream: []textChunks{all},
		Usage:  map[string]int{"inputTokens": 2000 + g.r.IntN(30000), "outputTokens": len(all.Texts)}}, true)
}

func (g *turnGen) file() *CorpusFile { return &g.c.Files[g.r.IntN(len(g.c.Files))] }

// prose returns a passage of about lo to hi bytes: whole lines of the
// documentation (the .md files, a byte of them picked at random), or of
// any file if the corpus has no document.
func (g *turnGen) prose(lo, hi int) string {
	n := lo + g.r.IntN(hi-lo+1)
	if g.c.docBytes == 0 {
		f := g.file()
		return lines(f.Text, g.r.IntN(len(f.Text)), n)
	}
	off := g.r.IntN(g.c.docBytes)
	for _, i := range g.c.docs {
		f := &g.c.Files[i]
		if off < len(f.Text) {
			return lines(f.Text, off, n)
		}
		off -= len(f.Text)
	}
	panic("bench: offset past the corpus's documents")
}

// lines returns the whole lines of s from the one holding byte off on,
// about n bytes of them (at least one line; wrapping to the start).
func lines(s string, off, n int) string {
	start := strings.LastIndexByte(s[:off], '\n') + 1
	end := start + n
	if end >= len(s) {
		return s[start:]
	}
	if nl := strings.IndexByte(s[end:], '\n'); nl >= 0 {
		end += nl + 1
	} else {
		end = len(s)
	}
	return s[start:end]
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// toolArgs picks a tool and its arguments; "tool" names the tool.
func (g *turnGen) toolArgs() map[string]any {
	f := g.file()
	switch g.r.IntN(4) {
	case 0:
		return map[string]any{"tool": "grep", "pattern": g.word(f), "path": "."}
	case 1:
		return map[string]any{"tool": "list_dir", "path": path.Dir(f.Path)}
	}
	n := strings.Count(f.Text, "\n")
	from := 1 + g.r.IntN(max(n-40, 1))
	return map[string]any{"tool": "read_file", "path": f.Path, "offset": from, "limit": 40 + g.r.IntN(160)}
}

// word returns an identifier-like word of f (at least 4 letters).
func (g *turnGen) word(f *CorpusFile) string {
	for range 16 {
		s := lines(f.Text, g.r.IntN(len(f.Text)), 1)
		ws := strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })
		if len(ws) == 0 {
			continue
		}
		if w := ws[g.r.IntN(len(ws))]; len(w) >= 4 {
			return w
		}
	}
	return "func"
}

func (g *turnGen) toolOutput(a map[string]any) string {
	var b strings.Builder
	switch a["tool"] {
	case "read_file":
		f := g.fileAt(a["path"].(string))
		ls := strings.SplitAfter(f.Text, "\n")
		from := a["offset"].(int) - 1
		for i := from; i < min(from+a["limit"].(int), len(ls)); i++ {
			fmt.Fprintf(&b, "%6d\t%s", i+1, ls[i])
		}
	case "grep":
		pat := a["pattern"].(string)
		start := g.r.IntN(len(g.c.Files))
		hits := 0
		for k := 0; k < min(len(g.c.Files), 64) && hits < 30; k++ {
			f := &g.c.Files[(start+k)%len(g.c.Files)]
			if !strings.Contains(f.Text, pat) {
				continue
			}
			for n, l := range strings.Split(f.Text, "\n") {
				if strings.Contains(l, pat) {
					fmt.Fprintf(&b, "%s:%d:%s\n", f.Path, n+1, l)
					if hits++; hits == 30 {
						break
					}
				}
			}
		}
		if hits == 0 {
			b.WriteString("no matches\n")
		}
	case "list_dir":
		dir := a["path"].(string)
		for i := range g.c.Files {
			if f := &g.c.Files[i]; path.Dir(f.Path) == dir {
				fmt.Fprintf(&b, "%8d  %s\n", len(f.Text), path.Base(f.Path))
			}
		}
	}
	return b.String()
}

func (g *turnGen) fileAt(p string) *CorpusFile {
	for i := range g.c.Files {
		if g.c.Files[i].Path == p {
			return &g.c.Files[i]
		}
	}
	panic("bench: corpus file " + p + " vanished")
}

package testgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/seglog/seglog/event"
)

// AgentLog returns n events of an agent loop (docs/EVENTS.md), seqs 0 to
// n-1, a pure function of seed: turns (data.turn counting up from 0) of
// steps, each step an assistant/message asking for 0 to 3 tool calls,
// most of them started (tool/call) and answered (tool/result), and each
// event's text padded to about pad bytes. Now and then it does what a
// recovery fold must take too: a result for a call not pending, a call
// asked for again, a step/start outside a turn, a turn/end without a
// turn/start, and other event types. Cut
// anywhere, it is a log a crash could leave.
func AgentLog(seed uint64, n, pad int) []event.Event {
	r := rand.New(rand.NewPCG(seed, 47))
	g := agentGen{r: r, pad: pad}
	for len(g.evs) < n {
		g.turn()
	}
	return g.evs[:n]
}

type agentGen struct {
	r     *rand.Rand
	pad   int
	evs   []event.Event
	turnN int
	call  int
}

func (g *agentGen) add(typ string, data string) {
	seq := uint64(len(g.evs))
	if g.pad > 0 {
		var b strings.Builder
		for b.Len() < g.pad {
			b.WriteString(words[g.r.IntN(len(words))])
			b.WriteByte(' ')
		}
		text, _ := json.Marshal(b.String())
		data = strings.TrimSuffix(data, "}")
		if len(data) > 1 {
			data += ","
		}
		data += `"text":` + string(text) + "}"
	}
	e := event.Event{Seq: seq, Type: typ, Time: 1_700_000_000_000 + int64(seq)*7, Data: json.RawMessage(data)}
	if typ == "assistant/message" || typ == "tool/result" || typ == "user/message" {
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	g.evs = append(g.evs, e)
}

func (g *agentGen) turn() {
	t := g.turnN
	g.turnN++
	switch g.r.IntN(40) {
	case 0:
		g.add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"aborted"}}`, t)) // without its start
		return
	case 1:
		g.add("step/start", fmt.Sprintf(`{"turn":%d,"step":0}`, t)) // outside a turn
	}
	g.add("turn/start", fmt.Sprintf(`{"turn":%d}`, t))
	g.add("user/message", fmt.Sprintf(`{"turn":%d,"message":{"id":"u%d","role":"user","content":[{"type":"text","text":"go"}],"source":{"kind":"user"}}}`, t, t))
	steps := 1 + g.r.IntN(4)
	for s := range steps {
		g.add("step/start", fmt.Sprintf(`{"turn":%d,"step":%d}`, t, s))
		var calls []string
		var blocks []string
		for range g.r.IntN(4) {
			g.call++
			id := fmt.Sprintf("call-%d", g.call)
			if g.r.IntN(30) == 0 && g.call > 1 {
				id = fmt.Sprintf("call-%d", g.call-1) // asked for again
			}
			calls = append(calls, id)
			blocks = append(blocks, fmt.Sprintf(`{"type":"tool-call","id":%q,"name":"read","arguments":"{}"}`, id))
		}
		if g.r.IntN(5) == 0 {
			g.add("assistant/chunk", fmt.Sprintf(`{"turn":%d,"step":%d,"chunk":{"type":"text-delta","index":0,"text":"x"}}`, t, s))
		}
		g.add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"a%d-%d","role":"assistant","content":[%s]}}`, t, s, t, s, strings.Join(blocks, ",")))
		for _, id := range calls {
			if g.r.IntN(10) > 0 {
				g.add("tool/call", fmt.Sprintf(`{"turn":%d,"step":%d,"callId":%q,"name":"read","arguments":"{}"}`, t, s, id))
			}
			if g.r.IntN(10) > 0 {
				g.add("tool/result", fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":"r-%s","role":"user","source":{"kind":"tool","callId":%q},"content":[{"type":"tool-result","toolCallId":%q,"content":[]}]}}`, t, s, id, id, id))
			}
		}
		if g.r.IntN(25) == 0 {
			g.add("tool/result", fmt.Sprintf(`{"turn":%d,"step":%d,"callId":"plugin-%d"}`, t, s, g.call)) // for no pending call
		}
		if g.r.IntN(15) > 0 {
			g.add("step/end", fmt.Sprintf(`{"turn":%d,"step":%d}`, t, s))
		}
	}
	if g.r.IntN(20) > 0 {
		g.add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, t))
	}
}

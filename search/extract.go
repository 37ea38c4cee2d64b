package search

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/seglog/seglog/event"
)

// Roles of the indexed text (Hit.Role, Query.Roles).
const (
	RoleUser      = "user"      // user/message
	RoleAssistant = "assistant" // assistant/message: its text blocks
	RoleSystem    = "system"    // system/message
	RoleToolCall  = "tool-call" // tool/call: the tool's name and arguments
	RoleTool      = "tool"      // tool/result: a prefix of the output
)

// DefaultResultPrefix is the bytes of a tool result's text that are
// indexed (Options.ResultPrefix): a tool's output can be megabytes of a
// file or a build log, whose words past the first few KiB are rarely what
// someone searches for.
const DefaultResultPrefix = 4096

// Doc is what an event contributes to the index: its role and its text.
type Doc struct {
	Role string
	Text string
}

// An Extractor returns the text of an event of a host's own type (and
// false if the event has none). Register it in Options.Extractors under
// the type (or a family, "acme/*").
type Extractor func(e event.Event) (Doc, bool)

type textBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Content   json.RawMessage `json:"content"`
}

type msgData struct {
	Message struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	Content json.RawMessage `json:"content"` // older logs
	Text    string          `json:"text"`
}

// contentText joins the text of a message's content: a string, or blocks
// whose text (and, in tool-result blocks, whose content) it takes.
func contentText(raw json.RawMessage, b *strings.Builder, depth int) {
	if len(raw) == 0 || depth > 3 {
		return
	}
	// (Unmarshal scans its whole input before it decodes: the first
	// byte picks the one decode that can succeed.)
	switch t := bytes.TrimLeft(raw, " \t\r\n"); {
	case len(t) == 0:
		return
	case t[0] == '"':
		var s string
		if json.Unmarshal(t, &s) == nil {
			add(b, s)
		}
		return
	case t[0] != '[':
		return
	}
	var blocks []textBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return
	}
	for _, bl := range blocks {
		switch bl.Type {
		case "text", "":
			add(b, bl.Text)
		case "tool-result":
			contentText(bl.Content, b, depth+1)
		}
	}
}

func add(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(s)
}

// DocOf returns what the index takes of e (and false if nothing), with
// tool results cut to prefix bytes (0: DefaultResultPrefix) and no host
// extractors: for tools and benchmarks that index the same text elsewhere.
func DocOf(e event.Event, prefix int) (Doc, bool) {
	if prefix == 0 {
		prefix = DefaultResultPrefix
	}
	return extractor{prefix: prefix}.doc(e)
}

// extractor returns the Doc of e under the catalog of docs/EVENTS.md (and
// the host's extractors): user, assistant and system message text, tool
// calls' names and arguments, tool results' text cut to prefix bytes.
// Plan-mode, bookkeeping and streaming events (assistant/chunk repeats
// its assistant/message) give none.
type extractor struct {
	prefix int
	host   map[string]Extractor
}

func (x extractor) doc(e event.Event) (Doc, bool) {
	switch e.Type {
	case "user/message", "assistant/message", "system/message", "tool/result":
		var m msgData
		if json.Unmarshal(e.Data, &m) != nil {
			return Doc{}, false
		}
		var b strings.Builder
		contentText(m.Message.Content, &b, 0)
		contentText(m.Content, &b, 0)
		add(&b, m.Text)
		role := map[string]string{"user/message": RoleUser, "assistant/message": RoleAssistant,
			"system/message": RoleSystem, "tool/result": RoleTool}[e.Type]
		t := b.String()
		if e.Type == "tool/result" {
			t = cut(t, x.prefix)
		}
		return Doc{Role: role, Text: t}, t != ""
	case "tool/call":
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(e.Data, &c) != nil {
			return Doc{}, false
		}
		var b strings.Builder
		add(&b, c.Name)
		argText(c.Arguments, &b)
		return Doc{Role: RoleToolCall, Text: cut(b.String(), x.prefix)}, b.Len() > 0
	}
	if f := x.hostFor(e.Type); f != nil {
		d, ok := f(e)
		return d, ok && d.Text != ""
	}
	return Doc{}, false
}

func (x extractor) hostFor(typ string) Extractor {
	if f, ok := x.host[typ]; ok {
		return f
	}
	if i := strings.LastIndexByte(typ, '/'); i >= 0 {
		return x.host[typ[:i]+"/*"]
	}
	return nil
}

// argText adds the string values of a tool call's arguments (keys in
// order), the words a person searches for: a path, a pattern, a command.
func argText(raw json.RawMessage, b *strings.Builder) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			add(b, v)
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
}

// cut returns s's first n bytes, not splitting a rune.
func cut(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

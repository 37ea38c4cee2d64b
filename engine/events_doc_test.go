package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// eventsDoc is docs/EVENTS.md.
func eventsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/EVENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section is the text of doc from the heading head to the next heading
// of the same or a higher level.
func section(t *testing.T, doc, head string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+head+"\n")
	if i < 0 {
		t.Fatalf("docs/EVENTS.md has no %q", head)
	}
	rest := doc[i+len(head)+2:]
	level := strings.Repeat("#", strings.Index(head, " "))
	for j := 0; j < len(rest); {
		nl := strings.Index(rest[j:], "\n#")
		if nl < 0 {
			break
		}
		k := j + nl + 1
		h := rest[k:]
		if n := strings.Index(h, " "); n > 0 && n <= len(level) && strings.Trim(h[:n], "#") == "" {
			return rest[:k]
		}
		j = k
	}
	return rest
}

// minimalTurn is the events of the jsonl block of the page's "A minimal
// turn".
func minimalTurn(t *testing.T, doc string) []event.Event {
	t.Helper()
	sec := section(t, doc, "### A minimal turn")
	start := strings.Index(sec, "```jsonl\n")
	end := strings.Index(sec[start+1:], "\n```")
	if start < 0 || end < 0 {
		t.Fatal(`"A minimal turn" has no jsonl block`)
	}
	var evs []event.Event
	sc := bufio.NewScanner(strings.NewReader(sec[start+len("```jsonl\n") : start+1+end+1]))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e event.Event
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("docs/EVENTS.md, minimal turn: %v in\n%s", err, line)
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		t.Fatal("the minimal turn has no events")
	}
	return evs
}

// The minimal turn of docs/EVENTS.md is what it says: appended to a real
// store with the surface rules on, through the public API, it is
// accepted, reads back as written, is balanced, and titles the session;
// and it holds every type the page's host table shows in it.
func TestEventsDocMinimalTurn(t *testing.T) {
	ctx := context.Background()
	doc := eventsDoc(t)
	evs := minimalTurn(t, doc)
	db, err := openStore(t, t.TempDir(), &Options{SurfaceRules: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "doc-turn", CreatedAt: 1700000000000})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatalf("appending docs/EVENTS.md's minimal turn with SurfaceRules: %v", err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "doc-turn", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("read back (-doc +stored):\n%s", diff)
	}
	if closers, err := recovery.InterruptedTurnClosers(got); err != nil || len(closers) != 0 {
		t.Errorf("the minimal turn is not balanced: closers %v, %v", closers, err)
	}
	if err := recovery.CheckSurface(got); err != nil {
		t.Errorf("the minimal turn breaks the surface rules: %v", err)
	}
	snap, err := db.Stat(ctx, "doc-turn")
	if err != nil || snap.Title == "" || !strings.Contains(doc, `"title":"`+snap.Title+`"`) {
		t.Errorf("Stat of the minimal turn: title %q, %v", snap.Title, err)
	}

	// Each row of the host table that points at seqs of the turn points
	// at events of its type.
	table := section(t, doc, "### The types a host writes")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|.*\\| seqs? ([0-9, ]+)[^|]*\\|[^|]*\\|$")
	seen := 0
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		for _, s := range strings.Split(m[2], ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			var seq int
			if err := json.Unmarshal([]byte(s), &seq); err != nil || seq >= len(evs) || evs[seq].Type != m[1] {
				t.Errorf("host table: %s at seq %s of the turn, which is not one", m[1], s)
				continue
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("the host table points at no seq of the turn")
	}
}

// docTypes are the event types (and families) docs/EVENTS.md's host
// section names in backquotes: the table's first column and the list of
// the host's own.
func docTypes(t *testing.T, doc string) []string {
	t.Helper()
	sec := section(t, doc, "## For a host: what to write")
	table := section(t, sec, "### The types a host writes")
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		out = append(out, m[1])
	}
	i := strings.Index(table, "They\nare:")
	if i < 0 {
		i = strings.Index(table, "They are:")
	}
	if i < 0 {
		t.Fatal(`the host section has no list of the other types ("They are:")`)
	}
	list := table[i:]
	list = list[:strings.Index(list, "(A test")]
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(list, -1) {
		out = append(out, m[1])
	}
	return out
}

// docs/EVENTS.md's host section names every type of the default catalog,
// and names no type outside it.
func TestEventsDocCoversTheCatalog(t *testing.T) {
	doc := eventsDoc(t)
	named := docTypes(t, doc)
	cat := event.NewCatalog()
	for _, typ := range named {
		if strings.HasSuffix(typ, "/*") {
			if !slices.Contains(cat.Types(), typ) {
				t.Errorf("docs/EVENTS.md names the family %s, which the catalog does not have", typ)
			}
			continue
		}
		if err := cat.Check(&event.Event{Type: typ, Data: json.RawMessage(`{}`)}); err != nil {
			t.Errorf("docs/EVENTS.md names %s: %v", typ, err)
		}
	}
	for _, typ := range cat.Types() {
		if !slices.Contains(named, typ) {
			t.Errorf("the catalog's %s is not in docs/EVENTS.md's host section", typ)
		}
	}
}

package search_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// msgEvent is a surface event of type typ whose message says text.
func msgEvent(seq uint64, typ, text string) event.Event {
	role := map[string]string{"user/message": "user", "assistant/message": "assistant", "system/message": "system", "tool/result": "user"}[typ]
	content := []any{map[string]any{"type": "text", "text": text}}
	if typ == "tool/result" {
		content = []any{map[string]any{"type": "tool-result", "toolCallId": "c", "isError": false, "content": content}}
	}
	d, _ := json.Marshal(map[string]any{"turn": 0, "step": 0, "message": map[string]any{"id": fmt.Sprint(seq), "role": role, "content": content}})
	return event.Event{Seq: seq, Type: typ, Time: 1_750_000_000_000 + int64(seq)*1000, Data: d}
}

func plain(seq uint64, typ string, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: 1_750_000_000_000 + int64(seq)*1000, Data: json.RawMessage(data)}
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	dir string
	db  *engine.DB
	st  store.Store
	ix  *search.Index
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: context.Background(), dir: dir, db: db, st: store.Wrap[*engine.Handle](db)}
	t.Cleanup(func() { db.Close() })
	f.ix = f.open()
	return f
}

func (f *fixture) open() *search.Index {
	f.t.Helper()
	ix, err := search.Open(f.st, filepath.Join(f.dir, search.DirName), search.Options{Fresh: -1})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { ix.Close() })
	return ix
}

// session writes session id with texts, alternating user and assistant
// messages.
func (f *fixture) session(id, cwd string, texts ...string) {
	f.t.Helper()
	h, err := f.st.Create(f.ctx, store.Header{ID: id, CreatedAt: 1_750_000_000_000, Cwd: cwd})
	if err != nil {
		f.t.Fatal(err)
	}
	defer h.Close()
	var evs []event.Event
	for i, s := range texts {
		typ := "user/message"
		if i%2 == 1 {
			typ = "assistant/message"
		}
		evs = append(evs, msgEvent(uint64(i), typ, s))
	}
	if err := h.Append(f.ctx, evs...); err != nil {
		f.t.Fatal(err)
	}
	if err := h.Flush(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) search(q search.Query) search.Result {
	f.t.Helper()
	r, err := f.ix.Search(f.ctx, q)
	if err != nil {
		f.t.Fatalf("search %q: %v", q.Text, err)
	}
	return r
}

// ids lists the sessions and seqs of r: "id:seq,seq id:seq".
func ids(r search.Result) string {
	var out []string
	for _, s := range r.Sessions {
		var seqs []string
		for _, h := range s.Hits {
			seqs = append(seqs, fmt.Sprint(h.Seq))
		}
		out = append(out, s.ID+":"+strings.Join(seqs, ","))
	}
	return strings.Join(out, " ")
}

func TestQueries(t *testing.T) {
	f := newFixture(t)
	f.session("a", "/w/a", "we decided to use SQLite for the index", "Okay, the café agrees: FTS5 with BM25")
	f.session("b", "/w/b", "the deploy failed on Tuesday", "rolling back the deployment now")
	f.session("c", "/w/a", "検索エンジンの設計について", "Indexing the segments is off the write path")
	for _, c := range []struct {
		q    search.Query
		want string
	}{
		{search.Query{Text: "sqlite index", Order: search.Oldest}, "a:0"},
		{search.Query{Text: "SQLITE"}, "a:0"},
		{search.Query{Text: "cafe"}, "a:1"},                                      // diacritics folded
		{search.Query{Text: `"use SQLite"`}, "a:0"},                              // phrase
		{search.Query{Text: `"SQLite use"`}, ""},                                 // not a phrase of the text
		{search.Query{Text: "deploy*", Order: search.Oldest}, "b:0,1"},           // prefix
		{search.Query{Text: "tuesday OR bm25", Order: search.Oldest}, "b:0 a:1"}, // OR
		{search.Query{Text: "deploy* -tuesday"}, "b:1"},                          // exclusion
		{search.Query{Text: "deploy* NOT tuesday"}, "b:1"},
		{search.Query{Text: "エンジン"}, "c:0"},                   // CJK through trigrams
		{search.Query{Text: "ploym", Substring: true}, "b:1"}, // substring
		{search.Query{Text: "segments", Cwd: "/w/b"}, ""},     // cwd filter
		{search.Query{Text: "segments", Cwd: "/w/a"}, "c:1"},
		{search.Query{Text: "the", Session: "b", Order: search.Oldest}, "b:0,1"}, // session prefix
		{search.Query{Text: "the", Roles: []string{"assistant"}, Session: "b"}, "b:1"},
		{search.Query{Text: "deploy*", Since: 1_750_000_001_000, Order: search.Oldest}, "b:1"},
		{search.Query{Text: "deploy*", Until: 1_750_000_001_000, Order: search.Oldest}, "b:0"},
	} {
		if got := ids(f.search(c.q)); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.q, got, c.want)
		}
	}
	r := f.search(search.Query{Text: "sqlite"})
	if s := r.Sessions[0].Hits[0].Snippet; !strings.Contains(s, "«SQLite»") {
		t.Errorf("snippet %q does not mark the term", s)
	}
	r = f.search(search.Query{Text: "ploym", Substring: true})
	if s := r.Sessions[0].Hits[0].Snippet; !strings.Contains(s, "«ploym»") {
		t.Errorf("substring snippet %q does not mark the term", s)
	}
	h := r.Sessions[0]
	if h.Cwd != "/w/b" || h.Hits[0].Role != "assistant" || h.Hits[0].Type != "assistant/message" || h.Hits[0].Time != 1_750_000_001_000 {
		t.Errorf("session %+v", h)
	}
}

func TestWhatIsIndexed(t *testing.T) {
	f := newFixture(t)
	h, err := f.st.Create(f.ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("lorem ", 2000) + "needleatend"
	evs := []event.Event{
		plain(0, "turn/start", `{"turn":0}`),
		plain(1, "step/start", `{"turn":0,"step":0}`),
		msgEvent(2, "system/message", "systemword"),
		msgEvent(3, "user/message", "userword"),
		plain(4, "assistant/chunk", `{"turn":0,"step":0,"text":"chunkword"}`),
		plain(5, "tool/call", `{"turn":0,"step":0,"callId":"c","name":"grep","arguments":{"pattern":"patternword","path":"/src"}}`),
		msgEvent(6, "tool/result", "resultword "+big),
		plain(7, "plan/mode", `{"mode":"planword"}`),
		plain(8, "step/end", `{"turn":0,"step":0}`),
		// Content as a string, the older logs' top-level content and
		// text, a tool result's content as a string, and content that
		// is neither (a number: nothing).
		plain(9, "user/message", `{"turn":0,"message":{"role":"user","content": "stringword"}}`),
		plain(10, "assistant/message", `{"turn":0,"content":[{"type":"text","text":"oldword"}]}`),
		plain(11, "system/message", `{"turn":0,"text":"textword"}`),
		plain(12, "tool/result", `{"turn":0,"message":{"role":"user","content":[{"type":"tool-result","content":"nestedword"}]}}`),
		plain(13, "user/message", `{"turn":0,"message":{"role":"user","content":7}}`),
	}
	if err := h.Append(f.ctx, evs...); err != nil {
		t.Fatal(err)
	}
	h.Close()
	all := []string{"*"}
	for w, want := range map[string]string{
		"systemword": "s:2", "userword": "s:3", "chunkword": "", "grep": "s:5", "patternword": "s:5",
		"resultword": "s:6", "needleatend": "", "planword": "",
		"stringword": "s:9", "oldword": "s:10", "textword": "s:11", "nestedword": "s:12", "7": "",
	} {
		if got := ids(f.search(search.Query{Text: w, Roles: all})); got != want {
			t.Errorf("%s: got %q, want %q", w, got, want)
		}
	}
	// The default roles: user and assistant text.
	if got := ids(f.search(search.Query{Text: "systemword"})); got != "" {
		t.Errorf("default roles found a system message: %q", got)
	}
}

func TestBadQueries(t *testing.T) {
	f := newFixture(t)
	f.session("a", "", "hello world")
	for _, c := range []struct{ q, problem string }{
		{`"unclosed`, "unclosed quote"},
		{"NOT", "NOT must be followed"},
		{"hello NOT", "NOT must be followed"},
		{"OR hello", "OR must stand between"},
		{"-hello", "only excluded terms"},
		{"", "no word or phrase"},
		{"   ", "no word or phrase"},
		{strings.Repeat("x", 100<<10), "longer than"},
		{"hel\x00lo", "NUL"},
		{"\xff", "UTF-8"},
		{"*", "lone '*'"},
		{"!!!", "no letter or digit"},
		{"検索", "at least 3 characters"},
	} {
		_, err := f.ix.Search(f.ctx, search.Query{Text: c.q})
		var qe *search.QueryError
		if !errors.As(err, &qe) || !errors.Is(err, search.ErrQuery) || !strings.Contains(err.Error(), c.problem) {
			t.Errorf("%.20q: got %v, want a QueryError saying %q", c.q, err, c.problem)
		}
	}
}

func TestFollowsTheStore(t *testing.T) {
	f := newFixture(t)
	f.session("a", "", "alpha one")
	f.session("b", "", "alpha two")
	if got := ids(f.search(search.Query{Text: "alpha", Order: search.Oldest})); got != "a:0 b:0" {
		t.Fatalf("got %q", got)
	}
	// Growth of a session another handle writes, and a delete.
	h, err := f.st.Open(f.ctx, "a", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(f.ctx, msgEvent(1, "assistant/message", "alpha grows")); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(f.ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if got := ids(f.search(search.Query{Text: "alpha", Order: search.Oldest})); got != "a:0,1 b:0" {
		t.Fatalf("after growth: got %q", got)
	}
	if err := f.st.Delete(f.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// An index that has not caught up (a long Fresh) still hides the
	// deleted session.
	stale, err := search.Open(f.st, filepath.Join(f.dir, search.DirName), search.Options{Fresh: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	r, err := stale.Search(f.ctx, search.Query{Text: "alpha", Order: search.Oldest})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(r); got != "a:0,1" {
		t.Fatalf("stale index after delete: got %q", got)
	}
	// Created again: the old incarnation's text is gone.
	f.session("b", "", "beta only")
	if got := ids(f.search(search.Query{Text: "alpha", Order: search.Oldest})); got != "a:0,1" {
		t.Fatalf("after re-create: got %q", got)
	}
	if got := ids(f.search(search.Query{Text: "beta"})); got != "b:0" {
		t.Fatalf("new incarnation: got %q", got)
	}
}

func TestForks(t *testing.T) {
	f := newFixture(t)
	f.session("p", "", "shared gamma", "shared delta", "parent only epsilon")
	h, err := f.st.Fork(f.ctx, "p", 2, store.Header{ID: "k", CreatedAt: 1_750_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(f.ctx, msgEvent(3, "user/message", "fork own gamma")); err != nil {
		t.Fatal(err)
	}
	h.Close()
	g, err := f.st.Fork(f.ctx, "k", 4, store.Header{ID: "kk", CreatedAt: 1_750_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if got := ids(f.search(search.Query{Text: "gamma", Order: search.Oldest})); got != "p:0 k:3" {
		t.Errorf("own events: got %q", got)
	}
	if got := ids(f.search(search.Query{Text: "gamma", Order: search.Oldest, Inherited: true})); got != "p:0 k:0,3 kk:0,3" {
		t.Errorf("inherited: got %q", got)
	}
	if got := ids(f.search(search.Query{Text: "epsilon", Inherited: true})); got != "p:2" {
		t.Errorf("past the cut: got %q", got)
	}
	var n int
	if err := countDocs(f, &n); err != nil || n != 4 {
		t.Errorf("docs indexed: %d (%v), want 4: an inherited event is indexed once", n, err)
	}
}

func TestContextAndPages(t *testing.T) {
	f := newFixture(t)
	for i := range 25 {
		f.session(fmt.Sprintf("s%02d", i), "", "before", "topic zeta here", "after")
	}
	r := f.search(search.Query{Text: "zeta", Context: 1, Limit: 10, Order: search.Oldest})
	hit := r.Sessions[0].Hits[0]
	if len(hit.Before) != 1 || hit.Before[0].Seq != 0 || len(hit.After) != 1 || hit.After[0].Seq != 2 {
		t.Fatalf("context: %+v", hit)
	}
	var seen []string
	q := search.Query{Text: "zeta", Limit: 10, Order: search.Oldest}
	for {
		r := f.search(q)
		for _, s := range r.Sessions {
			seen = append(seen, s.ID)
		}
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	if len(seen) != 25 || seen[0] != "s00" || seen[24] != "s24" {
		t.Fatalf("pages: %v", seen)
	}
}

func TestDamagedIndexIsRebuilt(t *testing.T) {
	f := newFixture(t)
	f.session("a", "", "kappa")
	f.search(search.Query{Text: "kappa"})
	f.ix.Close()
	p := filepath.Join(f.dir, search.DirName, search.FileName)
	if err := writeFile(p, []byte(strings.Repeat("garbage!", 1024))); err != nil {
		t.Fatal(err)
	}
	removeFile(p + "-wal")
	removeFile(p + "-shm")
	f.ix = f.open()
	if got := ids(f.search(search.Query{Text: "kappa"})); got != "a:0" {
		t.Fatalf("after damage: %q", got)
	}
}

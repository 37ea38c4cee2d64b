package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// turnSaying is enginetest.OneTurn (seqs 0..5, a closed turn) whose user
// message says text, its events at times from t0 on.
func turnSaying(text string, t0 int64) []event.Event {
	evs := enginetest.OneTurn()
	for i := range evs {
		evs[i].Time = t0 + int64(i)
		evs[i].Data = json.RawMessage(strings.Replace(string(evs[i].Data), `"text":"hello"`, fmt.Sprintf(`"text":%q`, text), 1))
	}
	return evs
}

// mcpHost is a host writing a store: a DB of this process (its locks are
// those of another process, for the server's read-only DB).
func mcpHost(t *testing.T, dir string) *engine.DB {
	t.Helper()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// hostSession creates session id with evs, flushed, and returns its
// write handle (closed at the test's end).
func hostSession(t *testing.T, db *engine.DB, h store.Header, evs []event.Event) *engine.Handle {
	t.Helper()
	ctx := context.Background()
	s, err := db.Create(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// mcpInProcess connects an SDK client to the server of the store in dir
// over the in-memory transport.
func mcpInProcess(t *testing.T, dir string, maxBytes int) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	s, err := openMCP(dir, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		s.Close()
	})
	return cs
}

// callTool calls a tool and returns its text and whether it is a tool
// error; a protocol error fails the test.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s %v: %d contents", name, args, len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s %v: content %T", name, args, res.Content[0])
	}
	return tc.Text, res.IsError
}

// callOK calls a tool that must succeed and decodes its JSON into out.
func callOK[T any](t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) T {
	t.Helper()
	text, isErr := callTool(t, cs, name, args)
	if isErr {
		t.Fatalf("%s %v: tool error: %s", name, args, text)
	}
	var out T
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, text)
	}
	return out
}

func ids(ss []listSession) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

// checkLiveStore runs the three tools through cs over the store in dir
// that db (a live host) writes: alpha (a closed turn saying "sqlite write
// path", cwd /a) and beta (an open turn a live writer holds, cwd /b),
// then grows alpha and creates gamma and checks that the tools see both.
//
// With busy, the store also holds session "busy", which a host grows all
// along with events of time 1 (so it is listed last).
func checkLiveStore(t *testing.T, cs *mcp.ClientSession, db *engine.DB, alpha *engine.Handle, busy bool) {
	t.Helper()
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if !tl.Annotations.ReadOnlyHint || !strings.Contains(tl.Description, "at most 65536 bytes") {
			t.Errorf("tool %s: read-only %v, description %q", tl.Name, tl.Annotations.ReadOnlyHint, tl.Description)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"session_read", "session_search", "sessions_list"}) {
		t.Fatalf("tools %v", names)
	}

	// Most recently updated first; prefix, cwd and pages.
	also := func(want ...string) []string {
		if busy {
			want = append(want, "busy")
			if want[0] == "alpha" {
				slices.Sort(want)
			}
		}
		return want
	}
	l := callOK[listOut](t, cs, "sessions_list", nil)
	if got := ids(l.Sessions); !slices.Equal(got, also("beta", "alpha")) || l.Next != "" || l.Cut != "" {
		t.Errorf("sessions_list: %v next %q cut %q", got, l.Next, l.Cut)
	}
	if l.Sessions[1].Events != 6 || l.Sessions[1].Cwd != "/a" {
		t.Errorf("alpha listed as %+v", l.Sessions[1])
	}
	if l = callOK[listOut](t, cs, "sessions_list", map[string]any{"prefix": "al"}); !slices.Equal(ids(l.Sessions), []string{"alpha"}) {
		t.Errorf("prefix al: %v", ids(l.Sessions))
	}
	if l = callOK[listOut](t, cs, "sessions_list", map[string]any{"cwd": "/b"}); !slices.Equal(ids(l.Sessions), []string{"beta"}) {
		t.Errorf("cwd /b: %v", ids(l.Sessions))
	}
	l = callOK[listOut](t, cs, "sessions_list", map[string]any{"limit": 1})
	l2 := callOK[listOut](t, cs, "sessions_list", map[string]any{"limit": 1, "cursor": l.Next})
	if !slices.Equal(ids(l.Sessions), []string{"beta"}) || !slices.Equal(ids(l2.Sessions), []string{"alpha"}) || (l2.Next != "") != busy {
		t.Errorf("pages of 1: %v (next %q), %v (next %q)", ids(l.Sessions), l.Next, ids(l2.Sessions), l2.Next)
	}
	if l = callOK[listOut](t, cs, "sessions_list", map[string]any{"order": "id"}); !slices.Equal(ids(l.Sessions), also("alpha", "beta")) {
		t.Errorf("order id: %v", ids(l.Sessions))
	}

	// The balanced view of beta: 3 stored events, 2 closers, held.
	r := callOK[readOut](t, cs, "session_read", map[string]any{"id": "beta"})
	if len(r.Events) != 5 || r.ClosersFrom == nil || *r.ClosersFrom != 3 || !r.End || r.Next != "5" ||
		!strings.Contains(r.HeldBy, fmt.Sprintf("process %d", os.Getpid())) || !strings.Contains(r.Turn, "turn 0 is open") {
		t.Errorf("session_read beta: %s", mustJSON(r))
	}
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "beta", "from": 1, "limit": 2})
	if len(r.Events) != 2 || r.ClosersFrom != nil || r.End || r.Next != "3" {
		t.Errorf("session_read beta from 1, 2 events: %s", mustJSON(r))
	}
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "beta", "from": 1, "limit": 3})
	if len(r.Events) != 3 || r.ClosersFrom == nil || *r.ClosersFrom != 3 || r.End || r.Next != "4" {
		t.Errorf("session_read beta from 1, 3 events (one closer): %s", mustJSON(r))
	}
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "beta", "cursor": "4"})
	if len(r.Events) != 1 || r.ClosersFrom == nil || *r.ClosersFrom != 4 || !r.End || r.Next != "5" {
		t.Errorf("session_read beta from the second closer: %s", mustJSON(r))
	}
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "beta", "cursor": "3"})
	if len(r.Events) != 2 || r.ClosersFrom == nil || *r.ClosersFrom != 3 || !r.End {
		t.Errorf("session_read beta from the closers: %s", mustJSON(r))
	}
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "alpha"})
	if len(r.Events) != 6 || r.ClosersFrom != nil || !r.End || r.HeldBy == "" || r.Turn != "" || r.Next != "6" {
		t.Errorf("session_read alpha: %s", mustJSON(r))
	}

	s := callOK[searchOut](t, cs, "session_search", map[string]any{"query": "sqlite path", "context": 1})
	if len(s.Sessions) != 1 || s.Sessions[0].ID != "alpha" || len(s.Sessions[0].Hits) != 1 ||
		!strings.Contains(s.Sessions[0].Hits[0].Snippet, "«sqlite»") || len(s.Sessions[0].Hits[0].Before) != 1 || len(s.Sessions[0].Hits[0].After) != 1 {
		t.Errorf("session_search sqlite: %s", mustJSON(s))
	}

	// The host writes on: the server sees what it flushed.
	turn2 := enginetest.Turn2()
	for i := range turn2 {
		turn2[i].Time = 2500
	}
	if err := alpha.Append(ctx, turn2...); err != nil {
		t.Fatal(err)
	}
	if err := alpha.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	hostSession(t, db, store.Header{ID: "gamma", CreatedAt: 3000, Cwd: "/a"}, turnSaying("zebra crossing", 3000))
	r = callOK[readOut](t, cs, "session_read", map[string]any{"id": "alpha", "cursor": "6"})
	if len(r.Events) != 2 || !r.End || r.Next != "8" || r.ClosersFrom != nil {
		t.Errorf("session_read alpha from 6 after the host appended a turn: %s", mustJSON(r))
	}
	if l = callOK[listOut](t, cs, "sessions_list", nil); !slices.Equal(ids(l.Sessions), also("gamma", "alpha", "beta")) {
		t.Errorf("sessions_list after the host created gamma: %v", ids(l.Sessions))
	}
	if s = callOK[searchOut](t, cs, "session_search", map[string]any{"query": "zebra"}); len(s.Sessions) != 1 || s.Sessions[0].ID != "gamma" {
		t.Errorf("session_search zebra, in gamma the host created: %s", mustJSON(s))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// liveStore makes the store checkLiveStore reads: the host db writing
// alpha and holding beta, its turn open.
func liveStore(t *testing.T, dir string) (*engine.DB, *engine.Handle) {
	db := mcpHost(t, dir)
	alpha := hostSession(t, db, store.Header{ID: "alpha", CreatedAt: 1000, Cwd: "/a"}, turnSaying("the sqlite write path", 1000))
	hostSession(t, db, store.Header{ID: "beta", CreatedAt: 2000, Cwd: "/b"}, turnSaying("something else", 2000)[:3])
	return db, alpha
}

// TestMCPOnALiveStore: the three tools through the SDK's client, in
// process, on a store a host writes meanwhile.
func TestMCPOnALiveStore(t *testing.T) {
	dir := t.TempDir()
	db, alpha := liveStore(t, dir)
	checkLiveStore(t, mcpInProcess(t, dir, mcpDefaultBytes), db, alpha, false)
}

// TestMCPBadArguments: each wrong argument is a tool error naming it; the
// store is not written.
func TestMCPBadArguments(t *testing.T) {
	dir := t.TempDir()
	liveStore(t, dir)
	cs := mcpInProcess(t, dir, mcpDefaultBytes)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"session_read", map[string]any{"id": "nope"}, `session "nope" not found`},
		{"session_read", map[string]any{}, `missing properties: ["id"]`},
		{"session_read", map[string]any{"id": "alpha", "cursor": "x7"}, `cursor "x7": not one session_read returned`},
		{"session_read", map[string]any{"id": "alpha", "cursor": "2:999999"}, `cursor "2:999999": no such piece`},
		{"session_read", map[string]any{"id": "alpha", "limit": -1}, "limit -1: must not be negative"},
		{"session_read", map[string]any{"id": "alpha", "from": -3}, "from -3: a seq is not negative"},
		{"session_read", map[string]any{"id": "alpha", "from": 40}, `from 40: session "alpha" has 6 events`},
		{"sessions_list", map[string]any{"limit": -5}, "limit -5: must not be negative"},
		{"sessions_list", map[string]any{"cursor": "garbage"}, `cursor "garbage": not the next of a sessions_list page`},
		{"sessions_list", map[string]any{"order": "size"}, `order "size": updated or id`},
		{"session_search", map[string]any{"query": `"unclosed`}, "unclosed"},
		{"session_search", map[string]any{"query": "NOT"}, "NOT"},
		{"session_search", map[string]any{"query": ""}, "query: missing"},
		{"session_search", map[string]any{"query": "sqlite", "cursor": "abc"}, `cursor "abc": not the next of a session_search page`},
		{"session_search", map[string]any{"query": "sqlite", "limit": -2}, "limit -2: must not be negative"},
		{"session_search", map[string]any{"query": "sqlite", "since": "yesterday"}, `since "yesterday": not RFC 3339`},
		{"session_search", map[string]any{"query": "sqlite", "order": "best"}, `order "best"`},
	} {
		text, isErr := callTool(t, cs, c.tool, c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: error %v, %q; want an error saying %q", c.tool, c.args, isErr, text, c.want)
		}
	}
	// A wrong type is refused by the input schema, as a tool error too.
	if text, isErr := callTool(t, cs, "session_read", map[string]any{"id": "alpha", "limit": "ten"}); !isErr || !strings.Contains(text, "limit") {
		t.Errorf("session_read limit \"ten\": error %v, %q", isErr, text)
	}
}

// TestMCPCutsLargeResults: results stay under the bound, say what they
// left out, and reading on by their cursors gives everything once, in
// order: a long session, an event larger than a result, a long list, a
// search with much context.
func TestMCPCutsLargeResults(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := mcpHost(t, dir)
	const bound = mcpMinBytes
	long := testgen.Events(0, 300, 400)
	big := testgen.Event(300, 50_000) // larger than a result: comes in pieces
	long = append(long, big, testgen.Event(301, 100))
	hostSession(t, db, store.Header{ID: "long", CreatedAt: 1}, long)
	for i := range 150 {
		title := event.Event{Seq: 6, Type: "session/title", Time: int64(10 + i), Data: json.RawMessage(fmt.Sprintf(`{"title":%q}`, strings.Repeat("t", 500)))}
		hostSession(t, db, store.Header{ID: fmt.Sprintf("s%03d", i), CreatedAt: int64(10 + i), Cwd: strings.Repeat("/d", 300)},
			append(turnSaying("needle in a haystack of words", int64(10+i)), title))
	}
	cs := mcpInProcess(t, dir, bound)

	// session_read: every event once, in order; the big one in pieces.
	var got []json.RawMessage
	var pieces strings.Builder
	cursor, calls := "", 0
	for {
		args := map[string]any{"id": "long", "limit": 500}
		if cursor != "" {
			args["cursor"] = cursor
		}
		text, isErr := callTool(t, cs, "session_read", args)
		if isErr || len(text) > bound {
			t.Fatalf("session_read %v: error %v, %d bytes (bound %d)", args, isErr, len(text), bound)
		}
		var r readOut
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			t.Fatal(err)
		}
		calls++
		if r.ClosersFrom != nil && (*r.ClosersFrom != uint64(len(long)) || !r.End) {
			t.Fatalf("closers from %d, the log holds %d", *r.ClosersFrom, len(long))
		}
		got = append(got, r.Events...)
		if r.Part != nil {
			if r.Part.Seq != 300 || r.Part.Offset != pieces.Len() || !strings.Contains(r.Cut, "event 300 is") {
				t.Fatalf("part %+v after %d bytes; cut %q", r.Part, pieces.Len(), r.Cut)
			}
			pieces.WriteString(r.Part.Text)
			if pieces.Len() == r.Part.Total {
				got = append(got, json.RawMessage(pieces.String()))
			}
		} else if !r.End && (!strings.Contains(r.Cut, "left out to keep the result under 16384 bytes") || !strings.Contains(r.Cut, fmt.Sprintf("cursor %q", r.Next))) {
			t.Fatalf("a result cut without a marker: next %q cut %q", r.Next, r.Cut)
		}
		if r.End {
			break
		}
		cursor = r.Next
	}
	// The log ends in an open turn (testgen's turn/start): its closers follow.
	if len(got) <= len(long) {
		t.Fatalf("read %d events in %d calls, the session holds %d and an open turn", len(got), calls, len(long))
	}
	for i := range long {
		want, _ := json.Marshal(&long[i])
		if string(got[i]) != string(want) {
			t.Fatalf("event %d read back as %.200s, stored %.200s", i, got[i], want)
		}
	}
	if calls < 10 {
		t.Errorf("%d calls read %d bytes under a bound of %d", calls, testgen.Size(long), bound)
	}

	// sessions_list: each session once.
	seen := map[string]int{}
	cursor = ""
	for {
		args := map[string]any{"limit": 200}
		if cursor != "" {
			args["cursor"] = cursor
		}
		text, isErr := callTool(t, cs, "sessions_list", args)
		if isErr || len(text) > bound {
			t.Fatalf("sessions_list %v: error %v, %d bytes", args, isErr, len(text))
		}
		var l listOut
		json.Unmarshal([]byte(text), &l)
		for _, s := range l.Sessions {
			seen[s.ID]++
			if s.ID != "long" && (s.Title != strings.Repeat("t", mcpTextCut)+"…" || len(s.Cwd) > mcpTextCut+len("…")) {
				t.Fatalf("%s: title %q, cwd of %d bytes", s.ID, s.Title, len(s.Cwd))
			}
		}
		if l.Next == "" {
			break
		}
		if !strings.Contains(l.Cut, "sessions of this page left out") {
			t.Fatalf("a page of 200 cut without a marker: %q", l.Cut)
		}
		cursor = l.Next
	}
	if len(seen) != 151 {
		t.Errorf("listed %d sessions, want 151", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", id, n)
		}
	}

	// session_search: pages under the bound, each hit session once.
	found := map[string]int{}
	cursor = ""
	for {
		args := map[string]any{"query": "needle", "limit": 20, "per_session": 10, "context": 3}
		if cursor != "" {
			args["cursor"] = cursor
		}
		text, isErr := callTool(t, cs, "session_search", args)
		if isErr || len(text) > bound {
			t.Fatalf("session_search %v: error %v, %d bytes", args, isErr, len(text))
		}
		var s searchOut
		json.Unmarshal([]byte(text), &s)
		for _, ss := range s.Sessions {
			found[ss.ID]++
			for _, h := range ss.Hits {
				for _, c := range append(h.Before, h.After...) {
					if len(c.Excerpt) > mcpExcerpt+len("…") {
						t.Fatalf("context excerpt of %d bytes", len(c.Excerpt))
					}
				}
			}
		}
		if s.Next == "" {
			break
		}
		if s.Cut != "" && !strings.Contains(s.Cut, fmt.Sprintf("cursor %q", s.Next)) {
			t.Fatalf("search cut %q, next %q", s.Cut, s.Next)
		}
		cursor = s.Next
	}
	if len(found) != 150 {
		t.Errorf("search found %d sessions, want 150", len(found))
	}
	for id, n := range found {
		if n != 1 {
			t.Errorf("%s found on %d pages", id, n)
		}
	}
	_ = ctx
}

var (
	seglogBin     string
	seglogBinErr  error
	seglogBinOnce sync.Once
)

// builtSeglog builds the seglog binary once per test run.
func builtSeglog(t *testing.T) string {
	t.Helper()
	seglogBinOnce.Do(func() {
		d, err := os.MkdirTemp("", "seglog-bin")
		if err != nil {
			seglogBinErr = err
			return
		}
		seglogBin = filepath.Join(d, "seglog")
		out, err := exec.Command("go", "build", "-o", seglogBin, ".").CombinedOutput()
		if err != nil {
			seglogBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if seglogBinErr != nil {
		t.Fatal(seglogBinErr)
	}
	return seglogBin
}

// TestMCPBinaryOverStdio: the built seglog mcp, a process of its own,
// serves the SDK's client over stdio while this process, the host,
// writes the store; another host session grows all along.
func TestMCPBinaryOverStdio(t *testing.T) {
	bin := builtSeglog(t)
	dir := t.TempDir()
	db, alpha := liveStore(t, dir)
	early := func(seq uint64) event.Event { e := testgen.Event(seq, 100); e.Time = 1; return e }
	busy := hostSession(t, db, store.Header{ID: "busy", CreatedAt: 1}, []event.Event{early(0)})
	ctx, cancel := context.WithCancel(context.Background())
	wrote := make(chan error, 1)
	go func() { // a host session appending while the client reads
		var err error
		for seq := uint64(1); ctx.Err() == nil && err == nil; seq++ {
			if err = busy.Append(ctx, early(seq)); err == nil {
				err = busy.Flush(ctx)
			}
		}
		if ctx.Err() != nil {
			err = nil
		}
		wrote <- err
	}()
	cmd := exec.Command(bin, "mcp", "--dir", dir)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLiveStore(t, cs, db, alpha, true)
	r := callOK[readOut](t, cs, "session_read", map[string]any{"id": "busy", "limit": 500})
	if len(r.Events) == 0 || r.End && len(r.Events) == 500 {
		t.Errorf("session_read busy: %d events", len(r.Events))
	}
	cancel()
	if err := <-wrote; err != nil {
		t.Fatalf("the host's appends: %v", err)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("closing the client: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Errorf("seglog mcp did not exit 0 once its stdin closed: %v", cmd.ProcessState)
	}
}

// TestMCPHTTP: --http serves streamable HTTP on a loopback address the
// client reaches; any other address is refused with the reason.
func TestMCPHTTP(t *testing.T) {
	bin := builtSeglog(t)
	dir := t.TempDir()
	liveStore(t, dir)
	cmd := exec.Command(bin, "mcp", "--dir", dir, "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("seglog mcp --http after an interrupt: %v", err)
		}
	}()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_, url, ok := strings.Cut(strings.TrimSpace(line), " on ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("seglog mcp --http said %q", line)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if l := callOK[listOut](t, cs, "sessions_list", nil); !slices.Equal(ids(l.Sessions), []string{"beta", "alpha"}) {
		t.Errorf("sessions_list over HTTP: %v", ids(l.Sessions))
	}

	// Refused before the store is opened: in a directory with no store,
	// an address let through would exit 1 (no store), never serve.
	empty := t.TempDir()
	for _, addr := range []string{"0.0.0.0:8765", ":8765", "192.0.2.1:8765"} {
		out, code := cli(t, "mcp", "--dir", empty, "--http", addr)
		if code != exitUsage || !strings.Contains(out, "not a loopback address: the MCP server has no authentication") || !strings.Contains(out, "--allow-remote") {
			t.Errorf("mcp --http %s: exit %d: %s", addr, code, out)
		}
	}
	if out, code := cli(t, "mcp", "--dir", empty, "--max-bytes", "100"); code != exitUsage || !strings.Contains(out, "--max-bytes 100: at least 16384") {
		t.Errorf("mcp --max-bytes 100: exit %d: %s", code, out)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// The web viewer's handlers (seglog ui) over plain HTTP: escaping, the
// token, the loopback check, unknown sessions and bad parameters, the
// two event streams. ui_browser_test.go drives the same pages in
// Chromium.

const uiXSS = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

// uiEv is an event of the tests' sessions.
func uiEv(seq uint64, typ string, ms int64, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: 1_700_000_000_000 + ms, Data: json.RawMessage(data)}
}

// uiUserMessage is a user/message whose text is text.
func uiUserMessage(seq uint64, ms int64, text string) event.Event {
	b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("u-%d", seq), "role": "user",
		"content": []any{map[string]string{"type": "text", "text": text}}, "source": map[string]string{"kind": "user"}})
	return uiEv(seq, "user/message", ms, string(b))
}

// uiTurn is a turn of two steps: the user's text, a tool call answered
// after 350 ms with an error, the assistant's answer; then, if open, a
// second turn whose call has no result.
func uiTurn(text string, open bool) []event.Event {
	evs := []event.Event{
		uiEv(0, "turn/start", 0, `{"turn":0}`),
		uiEv(1, "step/start", 1, `{"turn":0,"step":0}`),
		uiUserMessage(2, 2, text),
		uiEv(3, "assistant/message", 3, `{"turn":0,"step":0,"message":{"id":"a-0","role":"assistant","content":[{"type":"tool-call","id":"call-1","name":"ls","arguments":"{\"path\":\".\"}"}]}}`),
		uiEv(4, "tool/call", 10, `{"turn":0,"step":0,"callId":"call-1","name":"ls","arguments":"{\"path\":\".\"}"}`),
		uiEv(5, "tool/result", 360, `{"turn":0,"step":0,"message":{"id":"r-0","role":"user","source":{"kind":"tool","callId":"call-1"},"content":[{"type":"tool-result","toolCallId":"call-1","isError":true,"content":[{"type":"text","text":"permission denied"}]}]},"error":{"name":"ToolError","code":"EACCES"}}`),
		uiEv(6, "step/end", 361, `{"turn":0,"step":0}`),
		uiEv(7, "step/start", 362, `{"turn":0,"step":1}`),
		uiEv(8, "assistant/message", 400, `{"turn":0,"step":1,"message":{"id":"a-1","role":"assistant","content":[{"type":"text","text":"The giraffe ate the file."}]}}`),
		uiEv(9, "step/end", 401, `{"turn":0,"step":1}`),
		uiEv(10, "session/title", 402, `{"title":"Giraffes <b>and</b> files"}`),
		uiEv(11, "turn/end", 403, `{"turn":0,"reason":{"kind":"completed"}}`),
	}
	if open {
		evs = append(evs,
			uiEv(12, "turn/start", 500, `{"turn":1}`),
			uiEv(13, "step/start", 501, `{"turn":1,"step":0}`),
			uiEv(14, "assistant/message", 502, `{"turn":1,"step":0,"message":{"id":"a-2","role":"assistant","content":[{"type":"tool-call","id":"call-2","name":"rm","arguments":"{}"}]}}`),
			uiEv(15, "tool/call", 503, `{"turn":1,"step":0,"callId":"call-2","name":"rm","arguments":"{}"}`),
		)
	}
	return evs
}

// uiFixture is a store a host (a DB of this process, another process
// for the store's locks) has open: session "s1" (a finished turn and
// an interrupted one, no writer), "f1" (a fork of s1 at 12 events) and
// "live", which the host holds; and the viewer over it, read-only.
type uiFixture struct {
	dir  string
	host *engine.DB
	live store.Handle
	srv  *uiServer
}

func newUIFixture(t *testing.T, token string) *uiFixture {
	t.Helper()
	ctx := context.Background()
	f := &uiFixture{dir: t.TempDir()}
	var err error
	if f.host, err = enginetest.OpenStore(t, f.dir, &engine.Options{CompactInterval: -1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.host.Close() })
	h, err := f.host.Create(ctx, store.Header{ID: "s1", CreatedAt: 1_700_000_000_000, Cwd: "/work/zoo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, uiTurn(uiXSS+" where is the zebra?", true)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	fh, err := f.host.Fork(ctx, "s1", 12, store.Header{ID: "f1", CreatedAt: 1_700_000_001_000})
	if err != nil {
		t.Fatal(err)
	}
	fh.Close()
	lh, err := f.host.Create(ctx, store.Header{ID: "live", CreatedAt: 1_700_000_002_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lh.Close() })
	if err := lh.Append(ctx, uiEv(0, "turn/start", 0, `{"turn":0}`), uiEv(1, "step/start", 1, `{"turn":0,"step":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := lh.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.live = lh
	db, err := openRO(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = newUIServer(db, f.dir, token)
	t.Cleanup(func() { f.srv.close(); db.Close() })
	return f
}

// get serves one request and returns the status and body.
func (f *uiFixture) get(t *testing.T, target string, mod ...func(*http.Request)) (int, string, *http.Response) {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.Host = "127.0.0.1:7480"
	for _, m := range mod {
		m(r)
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Result()
}

func TestUISessionPageEscapesAndMarks(t *testing.T) {
	f := newUIFixture(t, "")
	code, body, res := f.get(t, "/session?id=s1")
	if code != 200 {
		t.Fatalf("GET /session?id=s1: %d\n%s", code, body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("no Content-Security-Policy limiting scripts: %q", csp)
	}
	// The session's text is text: no tag of it reaches the page.
	for _, bad := range []string{"<script>window", "<img src=x", "<b>and</b>"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{
		"&lt;script&gt;window.__xss=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.__xss=2&#34;&gt; where is the zebra?",
		"Giraffes &lt;b&gt;and&lt;/b&gt; files", // the title
		"The giraffe ate the file.",
		`<b class="label">turn 0</b>`, `<b class="label">turn 1</b>`,
		`class="dur">350 ms<`,   // the call's time to its result
		`class="ev result err"`, // the failed result
		"ToolError EACCES", "permission denied",
		`asks for <b>ls</b>`,
		"interrupted turn: no writer holds the session", // the closers of turn 1
		"TOOL_OUTCOME_UNKNOWN", `class="ev turn-end err closer"`,
		`data-from="16"`, // the stream follows from the end
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func TestUIForkAndLiveWriter(t *testing.T) {
	f := newUIFixture(t, "")
	code, body, _ := f.get(t, "/session?id=f1")
	if code != 200 || !strings.Contains(body, `fork of <a class="parent" href="/session?id=s1">s1</a> at 12 events`) ||
		!strings.Contains(body, `class="ev turn inherited"`) || !strings.Contains(body, "fork point") {
		t.Errorf("fork page: %d, no link to its parent, inherited events or fork point:\n%s", code, body)
	}
	code, body, _ = f.get(t, "/")
	if code != 200 || !strings.Contains(body, `fork of <a href="/session?id=s1">s1</a>`) {
		t.Errorf("the list does not link f1 to its parent: %d\n%s", code, body)
	}
	// live: the host holds it; its open turn is in progress, not interrupted.
	code, body, _ = f.get(t, "/session?id=live")
	if code != 200 || !strings.Contains(body, "turn in progress") || strings.Contains(body, "interrupted turn") {
		t.Errorf("a session a writer holds: %d\n%s", code, body)
	}
}

func TestUIListFiltersAndPages(t *testing.T) {
	f := newUIFixture(t, "")
	code, body, _ := f.get(t, "/")
	if code != 200 {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	// Most recently updated first (the time of the last event): f1 (its
	// fork marker's time is now), s1, live.
	il, i1, is := strings.Index(body, `data-id="live"`), strings.Index(body, `data-id="f1"`), strings.Index(body, `data-id="s1"`)
	if il < 0 || i1 < 0 || is < 0 || !(i1 < is && is < il) {
		t.Errorf("the list is not f1, s1, live (%d %d %d):\n%s", i1, is, il, body)
	}
	if strings.Contains(body, "<b>and</b>") || !strings.Contains(body, "Giraffes &lt;b&gt;and&lt;/b&gt; files") {
		t.Errorf("the title is not escaped in the list")
	}
	_, body, _ = f.get(t, "/?cwd=/work/zoo")
	if !strings.Contains(body, `data-id="s1"`) || strings.Contains(body, `data-id="live"`) {
		t.Errorf("cwd filter:\n%s", body)
	}
	_, body, _ = f.get(t, "/?prefix=f")
	if !strings.Contains(body, `data-id="f1"`) || strings.Contains(body, `data-id="s1"`) {
		t.Errorf("prefix filter:\n%s", body)
	}
	_, body, _ = f.get(t, "/?limit=2")
	if strings.Count(body, `<tr class="session"`) != 2 || !strings.Contains(body, `class="next"`) {
		t.Fatalf("limit=2: not 2 rows and a next page:\n%s", body)
	}
	next := body[strings.Index(body, `class="next" href="`)+len(`class="next" href="`):]
	next = strings.ReplaceAll(next[:strings.Index(next, `"`)], "&amp;", "&")
	_, body, _ = f.get(t, next)
	if strings.Count(body, `<tr class="session"`) != 1 || !strings.Contains(body, `data-id="live"`) {
		t.Errorf("the next page (%s) is not live alone:\n%s", next, body)
	}
	// The partial (the rows the page reloads on a change) is the table alone.
	_, body, _ = f.get(t, "/?partial=1")
	if strings.Contains(body, "<html") || !strings.Contains(body, `data-id="s1"`) {
		t.Errorf("partial=1:\n%s", body)
	}
}

func TestUISearch(t *testing.T) {
	f := newUIFixture(t, "")
	code, body, _ := f.get(t, "/?q=zebra")
	if code != 200 || !strings.Contains(body, `href="/session?id=s1"`) || !strings.Contains(body, "<mark>zebra</mark>") {
		t.Fatalf("search zebra: %d\n%s", code, body)
	}
	if strings.Contains(body, "<script>window") {
		t.Errorf("a snippet is not escaped:\n%s", body)
	}
	// f1 inherits the hit but has no event of its own that matches.
	if strings.Contains(body, `href="/session?id=f1"`) {
		t.Errorf("the fork's inherited hit is reported as its own:\n%s", body)
	}
	if _, body, _ := f.get(t, "/?q=okapi"); !strings.Contains(body, "0 sessions with hits") {
		t.Errorf("search okapi:\n%s", body)
	}
}

func TestUIErrors(t *testing.T) {
	f := newUIFixture(t, "")
	for target, want := range map[string]int{
		"/session?id=nope":               404,
		"/session/events?id=nope":        404,
		"/session":                       400,
		"/session?id=s1&from=-1":         400,
		"/session?id=s1&from=x":          400,
		"/session/events?id=s1&from=abc": 400,
		"/session/events":                400,
		"/?limit=0":                      400,
		"/?limit=1001":                   400,
		"/?limit=ten":                    400,
		"/?after=garbage":                400, // not an <updatedAt>:<id> cursor
		"/?q=%22unclosed":                400, // a malformed query
		"/nothing-here":                  404,
		"/static/app.js":                 200,
		"/static/style.css":              200,
	} {
		code, body, _ := f.get(t, target)
		if code != want {
			t.Errorf("GET %s: %d, want %d\n%s", target, code, want, body)
		}
		if want == 400 && !strings.Contains(body, "parameter") && !strings.Contains(body, "query") && !strings.Contains(body, "cursor") && !strings.Contains(body, "ID") {
			t.Errorf("GET %s: 400 without saying what is wrong:\n%s", target, body)
		}
	}
	// A session ID is escaped in the error page too.
	_, body, _ := f.get(t, "/session?id="+url.QueryEscape("<i>x</i>"))
	if strings.Contains(body, "<i>x</i>") {
		t.Errorf("the unknown ID is not escaped:\n%s", body)
	}
}

func TestUIToken(t *testing.T) {
	f := newUIFixture(t, "s3cret")
	for _, target := range []string{"/", "/session?id=s1", "/session/events?id=s1", "/changes", "/static/app.js", "/?token=wrong"} {
		if code, body, _ := f.get(t, target); code != 401 || !strings.Contains(body, "token") {
			t.Errorf("GET %s without the token: %d\n%s", target, code, body)
		}
	}
	code, body, res := f.get(t, "/?token=s3cret")
	if code != 200 || !strings.Contains(body, `data-id="s1"`) {
		t.Fatalf("GET /?token=s3cret: %d\n%s", code, body)
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == uiTokenCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("no HttpOnly, SameSite=Strict token cookie: %v", res.Cookies())
	}
	if code, _, _ := f.get(t, "/session?id=s1", func(r *http.Request) { r.AddCookie(cookie) }); code != 200 {
		t.Errorf("with the cookie: %d", code)
	}
	if code, _, _ := f.get(t, "/session?id=s1", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }); code != 200 {
		t.Errorf("with the bearer token: %d", code)
	}
	if code, _, _ := f.get(t, "/session?id=s1", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cre") }); code != 401 {
		t.Errorf("with a wrong bearer token: %d", code)
	}
	// With a token, any Host is served (the viewer listens beyond loopback).
	if code, _, _ := f.get(t, "/?token=s3cret", func(r *http.Request) { r.Host = "viewer.example:7480" }); code != 200 {
		t.Errorf("with the token, another host name: %d", code)
	}
}

// Without a token, only requests that name a loopback host are served:
// a page of another site cannot reach the viewer through a DNS name
// that points at 127.0.0.1.
func TestUILoopbackOnly(t *testing.T) {
	f := newUIFixture(t, "")
	for host, want := range map[string]int{"127.0.0.1:7480": 200, "localhost:7480": 200, "[::1]:7480": 200, "localhost": 200,
		"evil.example:7480": 403, "10.0.0.5:7480": 403} {
		if code, body, _ := f.get(t, "/", func(r *http.Request) { r.Host = host }); code != want {
			t.Errorf("Host %s: %d, want %d\n%s", host, code, want, body)
		}
	}
}

// runUI: an address other than loopback gets a token, printed in the
// URL; a bad address is a usage error.
func TestUICommand(t *testing.T) {
	f := newUIFixture(t, "")
	if out, code := cli(t, "ui", "--dir", f.dir, "--addr", "nonsense"); code != 2 || !strings.Contains(out, `bad --addr "nonsense"`) {
		t.Errorf("ui --addr nonsense: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "ui", "--dir", t.TempDir(), "--addr", "127.0.0.1:0"); code != 1 {
		t.Errorf("ui on a directory without a store: exit %d\n%s", code, out)
	}
	for addr, wantToken := range map[string]bool{"127.0.0.1:0": false, "0.0.0.0:0": true} {
		ctx, cancel := context.WithCancel(context.Background())
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() { done <- runUI(ctx, out, f.dir, addr, "") }()
		var line string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if line = out.String(); strings.Contains(line, "\n") {
				break
			}
		}
		u, err := url.Parse(strings.TrimSpace(line[strings.Index(line, "http://"):]))
		if err != nil {
			t.Fatalf("ui on %s printed %q", addr, line)
		}
		if got := u.Query().Get("token") != ""; got != wantToken {
			t.Errorf("ui on %s: token in the URL %v, want %v: %s", addr, got, wantToken, line)
		}
		// The URL printed is the way in.
		if wantToken {
			u.Host = strings.Replace(u.Host, "0.0.0.0", "127.0.0.1", 1)
		}
		res, err := http.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), `data-id="s1"`) {
			t.Errorf("GET %s: %d\n%s", u, res.StatusCode, b)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ui on %s ended with %v", addr, err)
		}
	}
}

// sseReader reads server-sent events from a response body.
type sseReader struct {
	sc *bufio.Scanner
}

// next returns the next event's name and data.
func (r *sseReader) next() (string, string, error) {
	var name string
	var data []string
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if name != "" || data != nil {
				return name, strings.Join(data, "\n"), nil
			}
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	if err := r.sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", io.EOF
}

// stream opens an event stream of the viewer (a real server: the
// recorder does not stream).
func (f *uiFixture) stream(t *testing.T, ctx context.Context, target string) *sseReader {
	t.Helper()
	ts := httptest.NewServer(f.srv)
	t.Cleanup(ts.Close)
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+target, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", target, res.StatusCode, res.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	return &sseReader{sc: sc}
}

// The session stream sends the events from ?from= on, then each event
// the host flushes, as escaped timeline rows; a deleted session ends it
// with "gone".
func TestUISessionStream(t *testing.T) {
	f := newUIFixture(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, it does not block the run
	defer cancel()
	sr := f.stream(t, ctx, "/session/events?id=live&from=1")
	name, data, err := sr.next()
	if err != nil || name != "event" || !strings.Contains(data, `id="e1"`) || !strings.Contains(data, "start of step 0") {
		t.Fatalf("first event: %q %q %v", name, data, err)
	}
	if err := f.live.Append(ctx, uiUserMessage(2, 5, "<script>alert(1)</script>")); err != nil {
		t.Fatal(err)
	}
	if err := f.live.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	name, data, err = sr.next()
	if err != nil || name != "event" || !strings.Contains(data, `id="e2"`) ||
		!strings.Contains(data, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(data, "<script>") {
		t.Fatalf("the flushed event: %q %q %v", name, data, err)
	}
	// A result's duration counts from its call before ?from=.
	sr = f.stream(t, ctx, "/session/events?id=s1&from=5")
	if _, data, err = sr.next(); err != nil || !strings.Contains(data, "350 ms") {
		t.Errorf("the result streamed after its call: %q %v", data, err)
	}
	sr = f.stream(t, ctx, "/session/events?id=f1&from=13")
	if err := f.host.Delete(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	if name, data, err = sr.next(); name != "gone" || !strings.Contains(data, "not found") {
		t.Errorf("after the delete: %q %q %v", name, data, err)
	}
}

// The change stream sends the changes after it began: a session created
// then, and appends.
func TestUIChangeStream(t *testing.T) {
	f := newUIFixture(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sr := f.stream(t, ctx, "/changes")
	h, err := f.host.Create(ctx, store.Header{ID: "new-one"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	name, data, err := sr.next()
	if err != nil || name != "change" || data != `{"kind":"create","session":"new-one"}` {
		t.Fatalf("first change: %q %q %v (the changes before the stream began are not sent)", name, data, err)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// The web viewer in a real browser: headless Chromium (Debian's
// chromium package) driven by chromedp, on a store that a host process
// writes while the pages are open.
//
// Environment:
//
//	SEGLOG_UI_BROWSER=1     Chromium must be there: the test fails instead of skipping (.ci/run sets it)
//	SEGLOG_CHROMIUM=PATH    the browser (default: chromium on $PATH, else /usr/bin/chromium)
//	SEGLOG_UI_ARTIFACTS=DIR where the screenshots go (default: the test's temporary directory)
//	SEGLOG_UI_DOCS_PNG=PATH also save the session page's screenshot (after the live event) there (docs/ui.png is made so)
const (
	uiBrowserEnv   = "SEGLOG_UI_BROWSER"
	uiChromiumEnv  = "SEGLOG_CHROMIUM"
	uiArtifactsEnv = "SEGLOG_UI_ARTIFACTS"
	uiDocsPNGEnv   = "SEGLOG_UI_DOCS_PNG"
	// uiHostEnv names the store TestUIHostProcess writes, in the child.
	uiHostEnv = "SEGLOG_UI_TEST_HOST"
)

// uiChromium is the browser's path, or "" if there is none.
func uiChromium() string {
	if p := os.Getenv(uiChromiumEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// TestUIHostProcess is the host of TestUIInChromium: this test binary
// started again with SEGLOG_UI_TEST_HOST=DIR (run alone, it does
// nothing). It writes two sessions into DIR, holds a turn of
// alpha-session open, says "ready", then for each line "append ID TEXT"
// of stdin appends a user/message of TEXT to session ID (created first
// if new), flushes it and says "ok".
func TestUIHostProcess(t *testing.T) {
	dir := os.Getenv(uiHostEnv)
	if dir == "" {
		return
	}
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	handles := map[string]store.Handle{}
	defer func() {
		for _, h := range handles {
			h.Close()
		}
	}()
	now := time.Now().UnixMilli() - 1_700_000_000_000
	for _, s := range []struct {
		id, cwd, text string
	}{{"beta-session", "/work/other", "list the files"}, {"alpha-session", "/work/zoo", uiXSS + " where does the zebra sleep?"}} {
		h, err := db.Create(ctx, store.Header{ID: s.id, Cwd: s.cwd})
		if err != nil {
			t.Fatal(err)
		}
		handles[s.id] = h
		evs := uiTurn(s.text, false)
		for i := range evs {
			evs[i].Time += now
		}
		if s.id == "alpha-session" { // a second turn, in progress
			evs = append(evs, uiEv(12, "turn/start", now+500, `{"turn":1}`), uiEv(13, "step/start", now+501, `{"turn":1,"step":0}`))
		}
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, rest, _ := strings.Cut(sc.Text(), " ")
		id, text, _ := strings.Cut(rest, " ")
		if cmd != "append" {
			t.Fatalf("host: unknown command %q", sc.Text())
		}
		h := handles[id]
		if h == nil {
			if h, err = db.Create(ctx, store.Header{ID: id, Cwd: "/work/new"}); err != nil {
				t.Fatal(err)
			}
			handles[id] = h
		}
		if err := h.Append(ctx, uiUserMessage(h.Len(), time.Now().UnixMilli()-1_700_000_000_000, text)); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		fmt.Println("ok")
	}
}

// uiHost is the host process of a browser test.
type uiHost struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

// startUIHost starts TestUIHostProcess on dir and waits for its "ready".
func startUIHost(t *testing.T, dir string) *uiHost {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestUIHostProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), uiHostEnv+"="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the host process: %v", err)
		}
	})
	h := &uiHost{t: t, in: in, out: bufio.NewScanner(out)}
	h.expect("ready")
	return h
}

// expect reads the host's next line, which must be want (its test
// output, PASS and ok, follow at its end).
func (h *uiHost) expect(want string) {
	h.t.Helper()
	if !h.out.Scan() || h.out.Text() != want {
		h.t.Fatalf("the host process said %q (%v), want %q", h.out.Text(), h.out.Err(), want)
	}
}

// append has the host append a user/message of text to session id and
// flush it; it returns once the host has flushed.
func (h *uiHost) append(id, text string) {
	h.t.Helper()
	if _, err := fmt.Fprintf(h.in, "append %s %s\n", id, text); err != nil {
		h.t.Fatal(err)
	}
	h.expect("ok")
}

// TestUIInChromium: the list shows the host's sessions and a session it
// creates while the list is open; a click opens one, whose content is
// text (its <script> never runs); an event the host flushes appears in
// the open page within a second; the search box finds a word. A
// screenshot of each page is saved.
func TestUIInChromium(t *testing.T) {
	chromium := uiChromium()
	if chromium == "" {
		if os.Getenv(uiBrowserEnv) == "1" {
			t.Fatalf("%s=1 but no Chromium: not on $PATH, not /usr/bin/chromium, %s unset (apt-get install chromium)", uiBrowserEnv, uiChromiumEnv)
		}
		t.Skipf("no Chromium (apt-get install chromium, or %s=PATH); %s=1 makes this a failure", uiChromiumEnv, uiBrowserEnv)
	}
	artifacts := os.Getenv(uiArtifactsEnv)
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	host := startUIHost(t, dir)
	db, err := openRO(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := newUIServer(db, dir, "")
	ts := httptest.NewServer(srv)
	defer func() { ts.Close(); srv.close(); db.Close() }()

	root, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang fails the test, it does not block the run
	defer cancel()
	actx, cancel := chromedp.NewExecAllocator(root,
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(artifacts, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		return png
	}
	eval := func(what, js string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil || !ok {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v (%s is %v)\npage:\n%s", what, err, js, ok, text)
		}
	}
	// poll waits until js is true, for at most d (in the page: no sleep).
	poll := func(what, js string, d time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(d))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: not within %v: %v\npage:\n%s", what, d, err, text)
		}
		return time.Since(start)
	}

	// The list: the host's two sessions, then one it creates meanwhile.
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr.session[data-id="beta-session"]`))); err != nil {
		t.Fatal(err)
	}
	eval("the list shows alpha-session", `!!document.querySelector('tr.session[data-id="alpha-session"] a.sid')`)
	poll("the list follows the store", `document.body.dataset.live === "1"`, 10*time.Second)
	host.append("gamma-session", "a new session")
	took := poll("the new session in the list", `!!document.querySelector('tr.session[data-id="gamma-session"]')`, 5*time.Second)
	t.Logf("a session created by the host appeared in the open list %v after its flush", took)
	shot("list.png")

	// A click opens alpha-session: its text is text.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a.sid[href="/session?id=alpha-session"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`))); err != nil {
		t.Fatal(err)
	}
	eval("the session page", `location.search === "?id=alpha-session" && document.querySelector("h1").innerText.includes("alpha-session")`)
	eval("the <script> of the session is shown as text", `document.getElementById("timeline").innerText.includes('<script>window.__xss=1</script>')`)
	eval("no markup of the session's content is a node", `document.querySelectorAll('#timeline script, #timeline img').length === 0 && window.__xss === undefined`)
	eval("the turn in progress", `document.querySelector(".live").innerText.includes("turn in progress")`)
	eval("the failed tool result, folded, with its duration", `(() => { const r = document.querySelector("li.ev.result.err details"); return !!r && !r.open && r.querySelector(".dur").innerText === "350 ms"; })()`)
	poll("the session follows the store", `document.body.dataset.live === "1"`, 10*time.Second)
	shot("session.png")

	// A new event appears within a second of the host's flush.
	host.append("alpha-session", `zebra-live-42 <script>window.__xss=3</script>`)
	took = poll("the host's new event in the open session", `document.getElementById("timeline").innerText.includes("zebra-live-42 <script>window.__xss=3</script>")`, time.Second)
	t.Logf("an event flushed by the host appeared in the open session %v after its flush", took)
	eval("the new event is text, counted", `window.__xss === undefined && document.getElementById("count").innerText === "15" && document.querySelectorAll('#timeline script').length === 0`)
	png := shot("session-live.png")

	// The search box finds a word.
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#q`)),
		chromedp.SendKeys(chromedp.CSS(`#q`), "zebra"), chromedp.Submit(chromedp.CSS(`#q`)),
		chromedp.WaitVisible(chromedp.CSS(`.found-session`))); err != nil {
		t.Fatal(err)
	}
	eval("the search finds zebra in alpha-session alone", `(() => { const f = document.querySelectorAll(".found-session"); return f.length === 1 && f[0].querySelector("a.sid").innerText === "alpha-session" && f[0].querySelector("mark").innerText === "zebra"; })()`)
	shot("search.png")
	t.Logf("screenshots in %s", artifacts)
	if p := os.Getenv(uiDocsPNGEnv); p != "" {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

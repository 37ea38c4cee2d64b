package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// seglog ui: the web viewer (issue 49, part 2). A read-only HTTP server
// over the store in --dir (opened as seglog ls and tail open it, beside
// a live host): the session list, a session's timeline, and server-sent
// events that follow the store (the change feed) and a session (Wait).
// Pages are html/template's, so every piece of session content is
// escaped; the script and style are embedded (ui/), and the
// Content-Security-Policy lets the page run nothing else.

//go:embed ui
var uiFiles embed.FS

var uiTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"size": func(n any) string {
		switch n := n.(type) {
		case int:
			return uiSize(int64(n))
		case int64:
			return uiSize(n)
		case uint64:
			return uiSize(int64(n))
		}
		return fmt.Sprint(n)
	},
	"time": uiTime,
}).ParseFS(uiFiles, "ui/*.html"))

// uiTokenCookie carries the token once a request gave it as ?token=.
const uiTokenCookie = "seglog_token"

// Errors of seglog ui's command line.
var (
	// ErrUIAddress: --addr is not HOST:PORT.
	ErrUIAddress = errors.New("ui: bad --addr")
)

func newUICmd(w io.Writer, dir *string) *cobra.Command {
	var addr, token string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "serve a read-only web viewer of the store: the sessions, each as a timeline, followed live",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runUI(ctx, w, *dir, addr, token)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:7480", "the address to listen on (HOST:PORT; port 0 picks one); other than loopback, a token is required")
	cmd.Flags().StringVar(&token, "token", "", "the token every request must carry (default: none on loopback, a random one printed otherwise; $SEGLOG_UI_TOKEN)")
	return cmd
}

// uiLoopback reports whether host (of a listen address or a request's
// Host) is a loopback name or address.
func uiLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runUI serves the viewer until ctx ends. It prints the URL to open
// (with the token, if one is required).
func runUI(ctx context.Context, w io.Writer, dir, addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Errorf("%w %q: %v (want HOST:PORT, e.g. 127.0.0.1:7480)", ErrUIAddress, addr, err)}
	}
	if token == "" {
		token = os.Getenv("SEGLOG_UI_TOKEN")
	}
	if token == "" && !uiLoopback(host) {
		b := make([]byte, 16)
		rand.Read(b)
		token = hex.EncodeToString(b)
	}
	db, err := openRO(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	srv := newUIServer(db, dir, token)
	defer srv.close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	u := url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/"}
	if token != "" {
		u.RawQuery = "token=" + url.QueryEscape(token)
	}
	fmt.Fprintf(w, "seglog ui: serving %s (read-only) at %s\n", dir, u.String())
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return nil
}

// uiServer is the viewer's handler over one store.
type uiServer struct {
	st    store.Store
	dir   string // the store's directory: the search index is in dir/search
	token string // "" : none required (loopback only)
	mux   *http.ServeMux

	mu  sync.Mutex
	idx *search.Index // opened by the first search
}

func newUIServer(db *engine.DB, dir, token string) *uiServer {
	s := &uiServer{st: store.Wrap[*engine.Handle](db), dir: dir, token: token, mux: http.NewServeMux()}
	static, _ := fs.Sub(uiFiles, "ui")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.list)
	s.mux.HandleFunc("GET /session", s.session)
	s.mux.HandleFunc("GET /session/events", s.sessionEvents)
	s.mux.HandleFunc("GET /changes", s.changes)
	return s
}

func (s *uiServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idx != nil {
		s.idx.Close()
	}
}

// ServeHTTP checks the request's right to the viewer, then serves it.
// With a token, every request carries it (?token=, which sets a cookie
// for the links and event streams that follow, the cookie, or an
// Authorization: Bearer header). Without one (loopback), the request
// must name a loopback host (no page of another site reaches the viewer
// by a DNS name it points at 127.0.0.1).
func (s *uiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if s.token != "" {
		given := r.URL.Query().Get("token")
		if given != "" && s.tokenOK(given) {
			http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		} else {
			if c, err := r.Cookie(uiTokenCookie); err == nil {
				given = c.Value
			} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				given = b
			}
			if !s.tokenOK(given) {
				http.Error(w, "seglog ui: this viewer needs its token (the URL seglog ui printed: ?token=...)", http.StatusUnauthorized)
				return
			}
		}
	} else {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if !uiLoopback(strings.Trim(host, "[]")) {
			http.Error(w, fmt.Sprintf("seglog ui: host %q is not loopback (serve with --token to be reached by other names)", r.Host), http.StatusForbidden)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

func (s *uiServer) tokenOK(given string) bool {
	return given != "" && subtle.ConstantTimeCompare([]byte(given), []byte(s.token)) == 1
}

// render writes template name with data, or a 500 if it fails (before
// anything is written: the page is rendered into a buffer).
func (s *uiServer) render(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "seglog ui: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// uiError is an error page's data.
type uiError struct {
	Title, Message string
}

func (s *uiServer) fail(w http.ResponseWriter, code int, err error) {
	s.render(w, code, "error.html", uiError{Title: http.StatusText(code), Message: untag(err.Error())})
}

// uiBadParam is a query parameter the viewer cannot use (400).
type uiBadParam struct{ name, value, want string }

func (e uiBadParam) Error() string {
	return fmt.Sprintf("parameter %s=%q: %s", e.name, e.value, e.want)
}

// intParam reads query parameter name as an integer in [lo, hi], def if
// absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, uiBadParam{name, v, fmt.Sprintf("want an integer from %d to %d", lo, hi)}
	}
	return n, nil
}

// uiSession is a row of the session list.
type uiSession struct {
	ID, Title, Cwd, Parent string
	Events                 uint64
	Bytes                  int64
	Updated                string
}

// uiSnip is a piece of a search snippet: Mark is a matched term.
type uiSnip struct {
	Text string
	Mark bool
}

type uiHit struct {
	Seq        uint64
	Type, Role string
	Time       string
	Snippet    []uiSnip
}

type uiFound struct {
	ID, Title, Cwd, Updated string
	Hits                    []uiHit
}

// uiList is the list page's data.
type uiList struct {
	Prefix, Cwd, Query string
	Limit              int
	Sessions           []uiSession
	Next               string // the next page's URL, "" after the last
	Found              []uiFound
	Failed             []string
	Searched           bool
}

const uiListMax = 1000

// list serves the session list: the most recently updated first,
// filtered by ID prefix and cwd, paged; with q, the search's hits
// instead, grouped by session.
func (s *uiServer) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := uiList{Prefix: q.Get("prefix"), Cwd: q.Get("cwd"), Query: strings.TrimSpace(q.Get("q"))}
	var err error
	if d.Limit, err = intParam(r, "limit", 50, 1, uiListMax); err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	after := q.Get("after")
	if d.Query != "" {
		if err := s.search(r.Context(), &d, after); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, search.ErrQuery) || errors.Is(err, store.ErrInvalidArgument) {
				code = http.StatusBadRequest
			}
			s.fail(w, code, err)
			return
		}
	} else {
		page, next, err := s.st.ListPage(r.Context(), store.ListOptions{Prefix: d.Prefix, Cwd: d.Cwd,
			OrderBy: store.OrderUpdated, After: after, Limit: d.Limit})
		if errors.Is(err, store.ErrInvalidArgument) {
			s.fail(w, http.StatusBadRequest, err)
			return
		} else if err != nil {
			s.fail(w, http.StatusInternalServerError, err)
			return
		}
		for _, sn := range page {
			d.Sessions = append(d.Sessions, uiSession{ID: sn.Header.ID, Title: sn.Title, Cwd: sn.Header.Cwd,
				Parent: sn.Header.ParentSession, Events: sn.EventCount, Bytes: sn.SizeBytes, Updated: uiTime(sn.UpdatedAt)})
		}
		if next != "" {
			d.Next = s.pageURL(d, next)
		}
	}
	name := "list.html"
	if q.Get("partial") == "1" {
		name = "sessions"
	}
	s.render(w, http.StatusOK, name, d)
}

// pageURL is the list's URL with after set.
func (s *uiServer) pageURL(d uiList, after string) string {
	v := url.Values{}
	for k, x := range map[string]string{"prefix": d.Prefix, "cwd": d.Cwd, "q": d.Query} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if d.Limit != 50 {
		v.Set("limit", strconv.Itoa(d.Limit))
	}
	v.Set("after", after)
	return "/?" + v.Encode()
}

// search runs d.Query over the store's search index (in dir/search, as
// seglog search keeps it; made by the first search, caught up by each).
func (s *uiServer) search(ctx context.Context, d *uiList, after string) error {
	d.Searched = true
	s.mu.Lock()
	if s.idx == nil {
		idx, err := search.Open(s.st, filepath.Join(s.dir, search.DirName), search.Options{})
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.idx = idx
	}
	idx := s.idx
	s.mu.Unlock()
	res, err := idx.Search(ctx, search.Query{Text: d.Query, Session: d.Prefix, Cwd: d.Cwd, Limit: d.Limit, PerSess: 5, After: after})
	if err != nil {
		return err
	}
	for _, f := range res.Sessions {
		found := uiFound{ID: f.ID, Title: f.Title, Cwd: f.Cwd, Updated: uiTime(f.UpdatedAt)}
		for _, h := range f.Hits {
			found.Hits = append(found.Hits, uiHit{Seq: h.Seq, Type: h.Type, Role: h.Role, Time: uiTime(h.Time), Snippet: uiSnippet(h.Snippet)})
		}
		d.Found = append(d.Found, found)
	}
	for _, f := range res.Failed {
		d.Failed = append(d.Failed, untag(f.Error()))
	}
	if res.Next != "" {
		d.Next = s.pageURL(*d, res.Next)
	}
	return nil
}

// uiSnippet splits a search snippet at its marks (« »).
func uiSnippet(s string) []uiSnip {
	var out []uiSnip
	for s != "" {
		i := strings.Index(s, "«")
		if i < 0 {
			break
		}
		j := strings.Index(s[i:], "»")
		if j < 0 {
			break
		}
		if i > 0 {
			out = append(out, uiSnip{Text: s[:i]})
		}
		out = append(out, uiSnip{Text: s[i+len("«") : i+j], Mark: true})
		s = s[i+j+len("»"):]
	}
	if s != "" {
		out = append(out, uiSnip{Text: s})
	}
	return out
}

// uiPage is a session page's data.
type uiPage struct {
	ID, Cwd, Parent, Title, Created string
	Inherited                       uint64
	Events                          []uiEvent
	Closers                         []uiEvent
	From, Len                       uint64 // the window shown: events From..Len-1
	Earlier                         string // the URL of the whole log, "" if shown whole
	Writer                          string // the live writer holding the session, "" if none
	Open                            bool   // a turn is open
}

// uiWindow is how many of a session's last events the page shows by
// default (?from=0 shows all).
const uiWindow = 2000

// session serves a session's timeline: Inspect's balanced view (the
// stored events, and the closers a resume would append if the last turn
// is open and no writer holds it).
func (s *uiServer) session(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("id")
	if id == "" {
		s.fail(w, http.StatusBadRequest, uiBadParam{"id", "", "want a session ID"})
		return
	}
	snap, err := s.st.Stat(ctx, id)
	if err != nil {
		s.sessionError(w, err)
		return
	}
	def := 0
	if snap.EventCount > uiWindow {
		def = int(snap.EventCount - uiWindow)
	}
	from, err := intParam(r, "from", def, 0, int(event.MaxTime))
	if err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	insp, err := s.st.Inspect(ctx, id, store.InspectEvents(from, -1))
	if err != nil {
		s.sessionError(w, err)
		return
	}
	p := uiPage{ID: id, Cwd: insp.Header.Cwd, Parent: insp.Header.ParentSession, Title: snap.Title,
		Created: uiTime(insp.Header.CreatedAt), Inherited: snap.InheritedEventCount, From: uint64(from),
		Len: uint64(from + len(insp.Events)), Open: insp.Turn.Open}
	if from > 0 {
		p.Earlier = "/session?" + url.Values{"id": {id}, "from": {"0"}}.Encode()
	}
	if o := insp.Holder; o != nil {
		p.Writer = "written by " + uiWriter(o)
	}
	ren := newUIRenderer(snap.InheritedEventCount)
	for i := range insp.Events {
		p.Events = append(p.Events, ren.row(&insp.Events[i]))
	}
	if insp.Holder == nil {
		for i := range insp.Closers {
			row := ren.row(&insp.Closers[i])
			row.Closer = true
			p.Closers = append(p.Closers, row)
		}
	}
	s.render(w, http.StatusOK, "session.html", p)
}

// uiWriter names the live writer o (as much as the backend records).
func uiWriter(o *store.OwnedError) string {
	w := "a live writer"
	if o.PID > 0 {
		w = fmt.Sprintf("process %d", o.PID)
	}
	if o.Host != "" {
		w += fmt.Sprintf(" on host %q", o.Host)
	}
	if !o.Since.IsZero() {
		w += " since " + o.Since.UTC().Format("2006-01-02 15:04:05")
	}
	return w
}

// sessionError is the page of a session that could not be read: 404 if
// it does not exist.
func (s *uiServer) sessionError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, store.ErrSessionNotFound):
		code = http.StatusNotFound
	case errors.Is(err, store.ErrInvalidArgument):
		code = http.StatusBadRequest
	}
	s.fail(w, code, err)
}

// sse starts a stream of server-sent events, or says why it cannot.
func sse(w http.ResponseWriter) (http.Flusher, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "seglog ui: streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return f, true
}

// sseSend writes one server-sent event (each line of data a data: line).
func sseSend(w io.Writer, name, data string) error {
	var b strings.Builder
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + strings.TrimSuffix(line, "\r") + "\n")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// uiKeepAlive is how often an idle event stream sends a comment (so a
// proxy or the browser does not take it for dead).
const uiKeepAlive = 15 * time.Second

// sessionEvents streams a session's events from seq from on as they
// become durable (Handle.Wait): an "event" per event, its timeline row
// as HTML (rendered by the same template as the page, so escaped), and
// "gone" once the session is deleted.
func (s *uiServer) sessionEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("id")
	if id == "" {
		s.fail(w, http.StatusBadRequest, uiBadParam{"id", "", "want a session ID"})
		return
	}
	from, err := intParam(r, "from", 0, 0, int(event.MaxTime))
	if err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	h, err := s.st.Open(ctx, id, store.Read)
	if err != nil {
		s.sessionError(w, err)
		return
	}
	defer h.Close()
	ren := newUIRenderer(h.InheritedEventCount())
	// The calls before from, for the durations of the results after it.
	n := 0
	for e, err := range h.Events(ctx, 0) {
		if err != nil || n >= from {
			break
		}
		ren.row(&e)
		n++
	}
	f, ok := sse(w)
	if !ok {
		return
	}
	for {
		evs, err := h.Read(ctx, from, -1)
		if err == nil {
			for i := range evs {
				var b bytes.Buffer
				if err = uiTemplates.ExecuteTemplate(&b, "event", ren.row(&evs[i])); err != nil {
					break
				}
				if err = sseSend(w, "event", b.String()); err != nil {
					return
				}
			}
			from += len(evs)
			f.Flush()
		}
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, uiKeepAlive)
			_, err = h.Wait(wctx, uint64(from))
			cancel()
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
					return
				}
				f.Flush()
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			name := "failed"
			if errors.Is(err, store.ErrSessionNotFound) {
				name = "gone"
			}
			sseSend(w, name, untag(err.Error()))
			f.Flush()
			return
		}
	}
}

// changes streams the store's changes from now on (the change feed,
// followed): a "change" per change, its data {"kind", "session"}. The
// list page reloads its rows on them.
func (s *uiServer) changes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The feed's end: what is there now is on the page already.
	var at store.Cursor
	for c, err := range s.st.Changes(ctx, "") {
		if err != nil {
			s.fail(w, http.StatusInternalServerError, err)
			return
		}
		at = c.Cursor
	}
	f, ok := sse(w)
	if !ok {
		return
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan store.Change)
	errc := make(chan error, 1)
	go func() {
		for c, err := range s.st.Changes(fctx, at, store.Follow()) {
			if err != nil {
				errc <- err
				return
			}
			select {
			case changes <- c:
			case <-fctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(uiKeepAlive)
	defer tick.Stop()
	for {
		select {
		case c := <-changes:
			b, _ := json.Marshal(map[string]string{"kind": c.Kind.String(), "session": c.Session})
			if sseSend(w, "change", string(b)) != nil {
				return
			}
			f.Flush()
		case err := <-errc:
			if ctx.Err() == nil {
				sseSend(w, "failed", untag(err.Error()))
				f.Flush()
			}
			return
		case <-tick.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			f.Flush()
		case <-ctx.Done():
			return
		}
	}
}

func init() {
	commandHelp["ui"] = struct {
		long  string
		codes [3]string
	}{`Serve a read-only web viewer of the store in --dir, opened as ls and tail open it (beside a
live host), and print its URL. Pages: the sessions, the most recently updated first (--prefix
and --cwd filters as in ls, paged), with a search box (the index of seglog search, in
<dir>/search, made by the first search); a session as a timeline of its turns and steps: user
and assistant messages as text, tool calls and results folded with their sizes and the time
from call to result, failed results and interrupted turns marked, a fork linked to its
parent, and, if the last turn is open and no writer holds the session, the closers a resume
would append. Both pages follow the store live (server-sent events): a new session appears
in the list, a session's new events appear in its timeline, without a reload.

--addr is loopback by default (127.0.0.1:7480; port 0 picks a free one). On any other
address every request needs a token: --token or $SEGLOG_UI_TOKEN, else a random one, printed
in the URL (?token=..., kept in a cookie for the pages it opens; or an Authorization: Bearer
header). Without a token only requests naming a loopback host are served. Everything is
embedded in the binary; the pages load nothing from elsewhere. Ctrl-C stops it (exit 0).`,
		[3]string{"stopped (Ctrl-C, SIGTERM)", "no store in --dir, or it could not be opened, or the address could not be listened on", "a bad --addr, an argument, or an unknown flag"}}
}

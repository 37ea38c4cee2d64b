package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// The bounds of seglog mcp's tool results (docs/SEARCH.md "MCP server").
const (
	mcpDefaultBytes = 64 << 10 // bytes of a tool result's text, by default (--max-bytes)
	mcpMinBytes     = 16 << 10 // the least --max-bytes takes: one listed session, one search hit with its context, and a piece of an event always fit
	mcpTextCut      = 200      // bytes of a title or cwd shown in a list or search result
	mcpExcerpt      = 300      // bytes of a search hit's context event shown (its JSON's start)

	mcpListDefault, mcpListMax       = 20, 200
	mcpReadDefault, mcpReadMax       = 50, 500
	mcpSearchDefault, mcpSearchMax   = 5, 20
	mcpPerSessDefault, mcpPerSessMax = 3, 10
	mcpContextMax                    = 3
)

func newMcpCmd(stdout io.Writer, dir *string) *cobra.Command {
	var httpAddr string
	var allowRemote bool
	var maxBytes int
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "serve the store read-only as MCP tools (sessions_list, session_read, session_search) over stdio, or --http ADDR",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxBytes < mcpMinBytes {
				return usageError{fmt.Errorf("--max-bytes %d: at least %d (a result must hold one session, one hit or a piece of an event)", maxBytes, mcpMinBytes)}
			}
			if httpAddr != "" {
				if err := checkLoopback(httpAddr, allowRemote); err != nil {
					return usageError{err}
				}
			}
			s, err := openMCP(*dir, maxBytes)
			if err != nil {
				return err
			}
			defer s.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if httpAddr != "" {
				return serveMCPHTTP(ctx, s, httpAddr, cmd.ErrOrStderr())
			}
			in := cmd.InOrStdin()
			rc, ok := in.(io.ReadCloser)
			if !ok {
				rc = io.NopCloser(in)
			}
			err = s.server().Run(ctx, &mcp.IOTransport{Reader: rc, Writer: nopWriteCloser{stdout}})
			if ctx.Err() != nil {
				return nil // stopped by a signal
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port, loopback: 127.0.0.1:8765) instead of stdio")
	f.BoolVar(&allowRemote, "allow-remote", false, "let --http listen on an address other hosts can reach (the server has no authentication: whoever reaches it reads every session)")
	f.IntVar(&maxBytes, "max-bytes", mcpDefaultBytes, "the most bytes of text a tool result holds (larger results are cut, with a marker saying how to read on)")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// errRemote is --http on an address other hosts can reach, without
// --allow-remote.
var errRemote = errors.New("not a loopback address")

// checkLoopback refuses an --http address other hosts can reach unless
// allowRemote: the server has no authentication, so whoever reaches it
// reads every session of the store.
func checkLoopback(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: not host:port (%v)", addr, err)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--http %q: %w: the MCP server has no authentication, so anyone who can reach it reads every session; "+
		"use 127.0.0.1:PORT, or pass --allow-remote to serve it anyway", addr, errRemote)
}

func serveMCPHTTP(ctx context.Context, s *mcpStore, addr string, errw io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := s.server()
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil),
		ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(errw, "seglog: MCP server (streamable HTTP) on http://%s/\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// Stopped by a signal: the calls in progress get a second to
		// finish; a client's open event stream (a GET it holds open for
		// the server's messages) never goes idle, so what is left is
		// closed then, and the stop is still a clean exit.
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		hs.Close()
		return nil
	}
}

// mcpStore is what the tools read: the store, opened read-only once,
// and its search index, opened at the first search.
type mcpStore struct {
	st       store.Store
	idxDir   string
	maxBytes int

	mu  sync.Mutex
	ix  *search.Index
	err error // the index's open error, kept
}

// openMCP opens the store in dir read-only (beside a live host, as ls
// and search do).
func openMCP(dir string, maxBytes int) (*mcpStore, error) {
	db, err := openRO(dir)
	if err != nil {
		return nil, err
	}
	return &mcpStore{st: store.Wrap[*engine.Handle](db), idxDir: filepath.Join(dir, search.DirName), maxBytes: maxBytes}, nil
}

func (s *mcpStore) Close() error {
	s.mu.Lock()
	if s.ix != nil {
		s.ix.Close()
	}
	s.mu.Unlock()
	return s.st.Close()
}

func (s *mcpStore) index() (*search.Index, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ix == nil && s.err == nil {
		// An agent searches for what it did a moment ago: each search
		// catches up to every event durable when it began (the CLI's
		// one-second freshness would miss them).
		s.ix, s.err = search.Open(s.st, s.idxDir, search.Options{Fresh: time.Nanosecond})
	}
	return s.ix, s.err
}

// server is the MCP server of the three tools.
func (s *mcpStore) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "seglog", Version: "1"}, &mcp.ServerOptions{
		Instructions: "The agent sessions of a seglog store, read-only. sessions_list finds sessions (most recently updated first), " +
			"session_read reads a session's events a window at a time, session_search finds words in them. " +
			fmt.Sprintf("Each result is at most %d bytes; a result cut shorter says so in its \"cut\" field and gives the cursor to read on.", s.maxBytes),
	})
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}
	bound := fmt.Sprintf(" The result is JSON text of at most %d bytes: what does not fit is left out, \"cut\" says how much and \"next\" is the cursor that reads on.", s.maxBytes)
	mcp.AddTool(srv, &mcp.Tool{Name: "sessions_list", Annotations: ro,
		Description: "List the store's sessions, most recently updated first (order \"id\": by ID), " +
			fmt.Sprintf("%d a page by default (limit, at most %d), filtered by ID prefix and working directory. ", mcpListDefault, mcpListMax) +
			"Pass the result's \"next\" as cursor for the next page." + bound,
	}, s.list)
	mcp.AddTool(srv, &mcp.Tool{Name: "session_read", Annotations: ro,
		Description: "Read a window of a session's events (JSON, as stored), from seq \"from\" " +
			fmt.Sprintf("(default 0), %d events by default (limit, at most %d). ", mcpReadDefault, mcpReadMax) +
			"The view is balanced: if the session's last turn is open, the events that would close it follow the stored ones, " +
			"marked by \"closersFrom\" (not stored; \"heldBy\" names a live writer whose turn is in progress). " +
			"An event too large for one result comes in pieces (\"part\"). Pass \"next\" as cursor to read on; \"end\" is true at the log's end." + bound,
	}, s.read)
	mcp.AddTool(srv, &mcp.Tool{Name: "session_search", Annotations: ro,
		Description: "Find words in the sessions' messages and tool calls: words (all must match), \"phrases\", prefix*, a OR b, -word. " +
			"Hits are grouped by session, with a snippet (matches between « and ») and, with context N, N events either side " +
			fmt.Sprintf("(their JSON's first %d bytes: session_read reads them whole). ", mcpExcerpt) +
			fmt.Sprintf("limit: sessions a page (default %d, at most %d); per_session: hits a session (default %d, at most %d); context at most %d. ",
				mcpSearchDefault, mcpSearchMax, mcpPerSessDefault, mcpPerSessMax, mcpContextMax) +
			"Roles default to user and assistant (\"*\": all, with tool calls and results)." + bound,
	}, s.search)
	return srv
}

// toolResult is the text content of a tool's result.
func toolResult(b []byte) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// toolError is a tool's error as a model reads it: the CLI's text, with
// no package tags.
func toolError(err error) error { return errors.New(untag(err.Error())) }

// largest is the largest k in [0, n] for which fits(k) holds, fits
// being monotone (true up to some k, false after).
func largest(n int, fits func(k int) bool) int {
	lo, hi := 0, n // fits(lo) assumed; search (lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// cutText is s cut to at most n bytes, at a rune boundary, with "…" if
// cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// badArg is a tool argument that is wrong.
func badArg(format string, args ...any) error { return fmt.Errorf(format, args...) }

// checkCount reads a count argument: 0 is def, above max is max, below
// 0 an error naming the argument.
func checkCount(name string, v, def, most int) (int, error) {
	switch {
	case v < 0:
		return 0, badArg("%s %d: must not be negative (default %d, at most %d)", name, v, def, most)
	case v == 0:
		return def, nil
	}
	return min(v, most), nil
}

// listIn are sessions_list's arguments.
type listIn struct {
	Order  string `json:"order,omitempty" jsonschema:"updated (most recently updated first; the default) or id"`
	Prefix string `json:"prefix,omitempty" jsonschema:"only sessions whose ID starts with this"`
	Cwd    string `json:"cwd,omitempty" jsonschema:"only sessions whose working directory is this"`
	Limit  int    `json:"limit,omitempty" jsonschema:"sessions a page (default 20, at most 200)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next of the previous page"`
}

type listSession struct {
	ID        string `json:"id"`
	Title     string `json:"title,omitempty"`
	Cwd       string `json:"cwd,omitempty"`
	Events    uint64 `json:"events"`
	Bytes     int64  `json:"bytes"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
	Parent    string `json:"parentSession,omitempty"`
	Inherited uint64 `json:"inheritedEvents,omitempty"`
	Format    string `json:"format,omitempty"` // only when not current
}

type listOut struct {
	Sessions []listSession `json:"sessions"`
	Next     string        `json:"next,omitempty"`
	Cut      string        `json:"cut,omitempty"`
}

func (s *mcpStore) list(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, any, error) {
	opts := store.ListOptions{Prefix: in.Prefix, Cwd: in.Cwd, After: in.Cursor, OrderBy: store.OrderUpdated}
	switch in.Order {
	case "", "updated":
	case "id":
		opts.OrderBy = store.OrderID
	default:
		return nil, nil, badArg("order %q: updated or id", in.Order)
	}
	var err error
	if opts.Limit, err = checkCount("limit", in.Limit, mcpListDefault, mcpListMax); err != nil {
		return nil, nil, err
	}
	if opts.OrderBy == store.OrderUpdated && in.Cursor != "" {
		if _, _, err := store.ParseUpdatedCursor(in.Cursor); err != nil {
			return nil, nil, badArg("cursor %q: not the next of a sessions_list page in updated order", in.Cursor)
		}
	}
	snaps, next, err := s.st.ListPage(ctx, opts)
	if err != nil {
		return nil, nil, toolError(err)
	}
	out := listOut{Sessions: make([]listSession, 0, len(snaps))}
	for _, sn := range snaps {
		ls := listSession{ID: sn.Header.ID, Title: cutText(oneLine(sn.Title), mcpTextCut), Cwd: cutText(sn.Header.Cwd, mcpTextCut),
			Events: sn.EventCount, Bytes: sn.SizeBytes, CreatedAt: msTime(sn.Header.CreatedAt), UpdatedAt: msTime(sn.UpdatedAt),
			Parent: sn.Header.ParentSession, Inherited: sn.InheritedEventCount}
		if sn.FormatStatus != store.FormatCurrent {
			ls.Format = sn.FormatStatus.String()
		}
		out.Sessions = append(out.Sessions, ls)
	}
	render := func(k int) []byte {
		o := listOut{Sessions: out.Sessions[:k], Next: next}
		if k < len(out.Sessions) {
			last := snaps[k-1]
			o.Next = last.Header.ID
			if opts.OrderBy == store.OrderUpdated {
				o.Next = store.UpdatedCursor(last.UpdatedAt, last.Header.ID)
			}
			o.Cut = fmt.Sprintf("%d of the %d sessions of this page left out to keep the result under %d bytes: call sessions_list with cursor %q (and the same order and filters) to read on",
				len(out.Sessions)-k, len(out.Sessions), s.maxBytes, o.Next)
		}
		b, _ := json.Marshal(o)
		return b
	}
	b := render(len(out.Sessions))
	if len(b) > s.maxBytes {
		k := largest(len(out.Sessions)-1, func(k int) bool { return k == 0 || len(render(k)) <= s.maxBytes })
		b = render(max(k, 1))
	}
	return toolResult(b), nil, nil
}

// readIn are session_read's arguments.
type readIn struct {
	ID     string `json:"id" jsonschema:"the session's ID"`
	From   int    `json:"from,omitempty" jsonschema:"the first seq to read (default 0)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"events to read (default 50, at most 500)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next of the previous result (replaces from)"`
}

// eventPart is a piece of an event whose JSON is larger than a result.
type eventPart struct {
	Seq    uint64 `json:"seq"`
	Offset int    `json:"offset"` // of Text in the event's JSON
	Total  int    `json:"total"`  // bytes of the event's JSON
	Text   string `json:"text"`
}

type readOut struct {
	ID          string            `json:"id"`
	Cwd         string            `json:"cwd,omitempty"`
	Parent      string            `json:"parentSession,omitempty"`
	HeldBy      string            `json:"heldBy,omitempty"`
	Turn        string            `json:"turn,omitempty"`
	Events      []json.RawMessage `json:"events"`
	ClosersFrom *uint64           `json:"closersFrom,omitempty"`
	Part        *eventPart        `json:"part,omitempty"`
	End         bool              `json:"end"`
	Next        string            `json:"next,omitempty"`
	Cut         string            `json:"cut,omitempty"`
}

// parseReadCursor reads a session_read cursor: "<seq>" or "<seq>:<byte
// offset>" (a piece of a large event).
func parseReadCursor(c string) (seq, off int, err error) {
	s, o, piece := strings.Cut(c, ":")
	seq, err1 := strconv.Atoi(s)
	if piece {
		off, err = strconv.Atoi(o)
	}
	if err1 != nil || err != nil || seq < 0 || off < 0 || (piece && off == 0) {
		return 0, 0, badArg("cursor %q: not one session_read returned (<seq>, or <seq>:<byte offset> for a piece of an event)", c)
	}
	return seq, off, nil
}

func (s *mcpStore) read(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, any, error) {
	if in.ID == "" {
		return nil, nil, badArg("id: missing (sessions_list lists the sessions' IDs)")
	}
	from, off := in.From, 0
	if from < 0 {
		return nil, nil, badArg("from %d: a seq is not negative", from)
	}
	if in.Cursor != "" {
		var err error
		if from, off, err = parseReadCursor(in.Cursor); err != nil {
			return nil, nil, err
		}
	}
	limit, err := checkCount("limit", in.Limit, mcpReadDefault, mcpReadMax)
	if err != nil {
		return nil, nil, err
	}
	insp, err := s.st.Inspect(ctx, in.ID, store.InspectEvents(from, limit))
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil, nil, badArg("session %q not found (sessions_list lists the sessions' IDs)", in.ID)
	}
	if err != nil {
		return nil, nil, toolError(err)
	}
	evs := insp.Events
	stored := len(evs)
	end := false
	if stored < limit {
		// The stored log ends in the window: the closers of an open turn
		// follow it, as many as the limit leaves room for.
		end = true
		for _, c := range insp.Closers {
			if c.Seq < uint64(from) {
				continue
			}
			if len(evs) == limit {
				end = false
				break
			}
			evs = append(evs, c)
		}
	}
	if len(evs) == 0 && from > 0 {
		// Past the end, or at it: at it is a reader waiting for more.
		n := uint64(0)
		if insp.Closers != nil {
			n = insp.Closers[len(insp.Closers)-1].Seq + 1
		} else if st, err := s.st.Stat(ctx, in.ID); err == nil {
			n = st.EventCount
		}
		if uint64(from) > n {
			return nil, nil, badArg("from %d: session %q has %d events (seqs 0..%d, closers included)", from, in.ID, n, int64(n)-1)
		}
	}
	out := readOut{ID: in.ID, Cwd: cutText(insp.Header.Cwd, mcpTextCut), Parent: insp.Header.ParentSession}
	if insp.Holder != nil {
		out.HeldBy = holderText(insp.Holder) + ": its turn is in progress; the closers are what a resume would append if it died"
	}
	if insp.Turn.Open {
		out.Turn = turnText(insp.Turn)
	}
	raws := make([]json.RawMessage, len(evs))
	for i := range evs {
		if raws[i], err = json.Marshal(&evs[i]); err != nil {
			return nil, nil, err
		}
	}
	closersFrom := func(k int) *uint64 {
		if stored < k {
			seq := evs[stored].Seq
			return &seq
		}
		return nil
	}
	nextOf := func(seq uint64) string { return strconv.FormatUint(seq, 10) }
	if off > 0 {
		if len(raws) == 0 || off >= len(raws[0]) {
			return nil, nil, badArg("cursor %q: no such piece (the event is not there, or its JSON is shorter)", in.Cursor)
		}
		return s.readPiece(out, evs[0].Seq, raws[0], off, stored == 0)
	}
	render := func(k int) []byte {
		o := out
		o.Events = raws[:k]
		o.ClosersFrom = closersFrom(k)
		o.End = end && k == len(raws)
		switch {
		case k < len(raws):
			o.Next = nextOf(evs[k].Seq)
			left := 0
			for _, r := range raws[k:] {
				left += len(r)
			}
			o.Cut = fmt.Sprintf("events %d..%d (%d bytes of JSON) left out to keep the result under %d bytes: call session_read with id %q and cursor %q to read on",
				evs[k].Seq, evs[len(evs)-1].Seq, left, s.maxBytes, in.ID, o.Next)
		case len(raws) > 0:
			o.Next = nextOf(evs[len(evs)-1].Seq + 1)
		default:
			o.Next = nextOf(uint64(from))
		}
		b, _ := json.Marshal(o)
		return b
	}
	b := render(len(raws))
	if len(b) > s.maxBytes {
		k := largest(len(raws)-1, func(k int) bool { return len(render(k)) <= s.maxBytes })
		if k == 0 {
			// The first event alone is larger than a result: its first piece.
			return s.readPiece(out, evs[0].Seq, raws[0], 0, stored == 0)
		}
		b = render(k)
	}
	return toolResult(b), nil, nil
}

// readPiece is the result holding the piece of an event's JSON raw from
// byte off on that fits.
func (s *mcpStore) readPiece(out readOut, seq uint64, raw []byte, off int, closer bool) (*mcp.CallToolResult, any, error) {
	if closer {
		out.ClosersFrom = &seq
	}
	render := func(n int) []byte {
		o := out
		o.Events = []json.RawMessage{}
		end := off + n
		for end > off && end < len(raw) && !utf8.RuneStart(raw[end]) {
			end--
		}
		o.Part = &eventPart{Seq: seq, Offset: off, Total: len(raw), Text: string(raw[off:end])}
		if end < len(raw) {
			o.Next = fmt.Sprintf("%d:%d", seq, end)
			o.Cut = fmt.Sprintf("event %d is %d bytes of JSON, more than a result holds (%d bytes): this is bytes %d..%d, %d bytes follow: call session_read with cursor %q for the next piece",
				seq, len(raw), s.maxBytes, off, end, len(raw)-end, o.Next)
		} else {
			o.Next = strconv.FormatUint(seq+1, 10)
			o.Cut = fmt.Sprintf("event %d is %d bytes of JSON: this is its last piece, bytes %d..%d; call session_read with cursor %q to read on", seq, len(raw), off, end, o.Next)
		}
		b, _ := json.Marshal(o)
		return b
	}
	n := largest(len(raw)-off, func(n int) bool { return n == 0 || len(render(n)) <= s.maxBytes })
	return toolResult(render(max(n, 1))), nil, nil
}

// searchIn are session_search's arguments.
type searchIn struct {
	Query      string   `json:"query" jsonschema:"words (all must match), \"a phrase\", prefix*, a OR b, -word"`
	Session    string   `json:"session,omitempty" jsonschema:"only sessions whose ID starts with this"`
	Cwd        string   `json:"cwd,omitempty" jsonschema:"only sessions whose working directory is this"`
	Since      string   `json:"since,omitempty" jsonschema:"only events at or after this time (RFC 3339, YYYY-MM-DD or ms since the epoch)"`
	Until      string   `json:"until,omitempty" jsonschema:"only events before this time"`
	Roles      []string `json:"roles,omitempty" jsonschema:"user, assistant, system, tool-call, tool, or * (default user and assistant)"`
	Types      []string `json:"types,omitempty" jsonschema:"only events of these types (e.g. tool/result)"`
	Order      string   `json:"order,omitempty" jsonschema:"rank (the default), newest or oldest"`
	Substring  bool     `json:"substring,omitempty" jsonschema:"match each term as a substring (3 characters or more)"`
	Context    int      `json:"context,omitempty" jsonschema:"events of context either side of each hit (at most 3)"`
	Limit      int      `json:"limit,omitempty" jsonschema:"sessions a page (default 5, at most 20)"`
	PerSession int      `json:"per_session,omitempty" jsonschema:"hits a session (default 3, at most 10)"`
	Cursor     string   `json:"cursor,omitempty" jsonschema:"the next of the previous page"`
}

type searchContext struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Bytes   int    `json:"bytes"`   // of its JSON
	Excerpt string `json:"excerpt"` // its JSON's start
}

type searchHit struct {
	Seq       uint64          `json:"seq"`
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Time      string          `json:"time"`
	Snippet   string          `json:"snippet"`
	Inherited bool            `json:"inherited,omitempty"`
	Before    []searchContext `json:"before,omitempty"`
	After     []searchContext `json:"after,omitempty"`
}

type searchSession struct {
	ID        string      `json:"id"`
	Title     string      `json:"title,omitempty"`
	Cwd       string      `json:"cwd,omitempty"`
	UpdatedAt string      `json:"updatedAt"`
	Hits      []searchHit `json:"hits"`
}

type searchOut struct {
	Sessions []searchSession `json:"sessions"`
	Failed   []string        `json:"failed,omitempty"`
	Next     string          `json:"next,omitempty"`
	Cut      string          `json:"cut,omitempty"`
}

func contextOf(evs []event.Event) []searchContext {
	var out []searchContext
	for i := range evs {
		b, _ := json.Marshal(&evs[i])
		out = append(out, searchContext{Seq: evs[i].Seq, Type: evs[i].Type, Bytes: len(b), Excerpt: cutText(string(b), mcpExcerpt)})
	}
	return out
}

func (s *mcpStore) search(ctx context.Context, _ *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, any, error) {
	if strings.TrimSpace(in.Query) == "" {
		return nil, nil, badArg("query: missing (words to find)")
	}
	q := search.Query{Text: in.Query, Session: in.Session, Cwd: in.Cwd, Types: in.Types, Roles: in.Roles,
		Substring: in.Substring, After: in.Cursor}
	var err error
	if q.Limit, err = checkCount("limit", in.Limit, mcpSearchDefault, mcpSearchMax); err != nil {
		return nil, nil, err
	}
	if q.PerSess, err = checkCount("per_session", in.PerSession, mcpPerSessDefault, mcpPerSessMax); err != nil {
		return nil, nil, err
	}
	if in.Context < 0 {
		return nil, nil, badArg("context %d: must not be negative (at most %d)", in.Context, mcpContextMax)
	}
	q.Context = min(in.Context, mcpContextMax)
	for _, t := range []struct {
		name, v string
		to      *int64
	}{{"since", in.Since, &q.Since}, {"until", in.Until, &q.Until}} {
		if *t.to, err = parseTime(t.name, t.v); err != nil {
			return nil, nil, badArg("%s %q: not RFC 3339, YYYY-MM-DD or milliseconds since the epoch", t.name, t.v)
		}
	}
	switch in.Order {
	case "", "rank":
	case "newest":
		q.Order = search.Newest
	case "oldest":
		q.Order = search.Oldest
	default:
		return nil, nil, badArg("order %q: rank, newest or oldest", in.Order)
	}
	ix, err := s.index()
	if err != nil {
		return nil, nil, toolError(err)
	}
	run := func(q search.Query) (searchOut, error) {
		res, err := ix.Search(ctx, q)
		if errors.Is(err, store.ErrInvalidArgument) && q.After != "" {
			return searchOut{}, badArg("cursor %q: not the next of a session_search page", q.After)
		}
		if err != nil {
			return searchOut{}, toolError(err)
		}
		out := searchOut{Sessions: []searchSession{}, Next: res.Next}
		for _, ss := range res.Sessions {
			o := searchSession{ID: ss.ID, Title: cutText(oneLine(ss.Title), mcpTextCut), Cwd: cutText(ss.Cwd, mcpTextCut), UpdatedAt: msTime(ss.UpdatedAt)}
			for _, h := range ss.Hits {
				o.Hits = append(o.Hits, searchHit{Seq: h.Seq, Type: h.Type, Role: h.Role, Time: msTime(h.Time), Snippet: h.Snippet,
					Inherited: h.Inherited, Before: contextOf(h.Before), After: contextOf(h.After)})
			}
			out.Sessions = append(out.Sessions, o)
		}
		for _, f := range res.Failed {
			out.Failed = append(out.Failed, untag(f.Error()))
		}
		return out, nil
	}
	out, err := run(q)
	if err != nil {
		return nil, nil, err
	}
	size := func(o searchOut) int { b, _ := json.Marshal(o); return len(b) }
	if size(out) > s.maxBytes {
		// Fewer sessions: searched again with that limit, for the cursor
		// of the next page to start after the last one shown.
		n := len(out.Sessions)
		k := largest(n-1, func(k int) bool { o := out; o.Sessions = out.Sessions[:k]; return size(o) <= s.maxBytes })
		hits := 0
		if k == 0 {
			// One session's hits do not fit: fewer of them.
			k = 1
			hits = largest(len(out.Sessions[0].Hits), func(j int) bool {
				o := out
				o.Sessions = []searchSession{out.Sessions[0]}
				o.Sessions[0].Hits = o.Sessions[0].Hits[:j]
				return j == 0 || size(o) <= s.maxBytes
			})
		}
		q1 := q
		q1.Limit = k
		if out, err = run(q1); err != nil {
			return nil, nil, err
		}
		cut := fmt.Sprintf("%d sessions of this page left out", n-k)
		if hits > 0 && len(out.Sessions) > 0 && hits < len(out.Sessions[0].Hits) {
			cut = fmt.Sprintf("%d hits of session %q left out (search again with session %q and a smaller context to see them)",
				len(out.Sessions[0].Hits)-hits, out.Sessions[0].ID, out.Sessions[0].ID)
			out.Sessions[0].Hits = out.Sessions[0].Hits[:max(hits, 1)]
		}
		out.Cut = fmt.Sprintf("%s to keep the result under %d bytes", cut, s.maxBytes)
		if out.Next != "" {
			out.Cut += fmt.Sprintf(": call session_search with the same arguments and cursor %q to read on", out.Next)
		}
		for size(out) > s.maxBytes && len(out.Failed) > 1 {
			out.Failed = out.Failed[:len(out.Failed)-1]
		}
	}
	b, _ := json.Marshal(out)
	return toolResult(b), nil, nil
}

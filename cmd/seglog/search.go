package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// searchArgs are seglog search's flags.
type searchArgs struct {
	session, cwd, since, until, order, after string
	types, roles                             []string
	context, limit, perSession               int
	substring, inherited, rebuild, asJSON    bool
	nats, index                              string
	nf                                       natsFlags
}

func newSearchCmd(w io.Writer, dir *string) *cobra.Command {
	var a searchArgs
	cmd := &cobra.Command{
		Use:   "search QUERY",
		Short: "find words in the store's sessions (a full-text index in <dir>/search, made on first use)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.rebuild != (len(args) == 0) {
				return usageError{errors.New("search takes a QUERY, or --rebuild alone")}
			}
			q := ""
			if len(args) == 1 {
				q = args[0]
			}
			return runSearch(w, newProgress(cmd.ErrOrStderr()), *dir, q, a)
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.session, "session", "", "only the sessions whose ID starts with this")
	f.StringVar(&a.cwd, "cwd", "", "only the sessions whose working directory is this")
	f.StringVar(&a.since, "since", "", "only events at or after this time (RFC 3339, YYYY-MM-DD, or ms since the epoch)")
	f.StringVar(&a.until, "until", "", "only events before this time")
	f.StringSliceVar(&a.types, "types", nil, "only events of these types (e.g. tool/result)")
	f.StringSliceVar(&a.roles, "roles", nil, "only text of these roles: user, assistant, system, tool-call, tool, or * (default user,assistant)")
	f.StringVar(&a.order, "order", "rank", "rank (BM25), newest or oldest")
	f.IntVar(&a.context, "context", 0, "events of context either side of each hit")
	f.IntVar(&a.limit, "limit", 10, "sessions per page")
	f.IntVar(&a.perSession, "per-session", 5, "hits per session")
	f.StringVar(&a.after, "after", "", "the cursor of the next page (printed by the previous one)")
	f.BoolVar(&a.substring, "substring", false, "match every term as a substring (trigrams; CJK terms always are)")
	f.BoolVar(&a.inherited, "inherited", false, "count a fork's inherited events as its own")
	f.BoolVar(&a.rebuild, "rebuild", false, "empty the index and build it again from the store")
	f.BoolVar(&a.asJSON, "json", false, "print one JSON object")
	f.StringVar(&a.nats, "nats", "", "the store is this JetStream stream (nats://host:4222[?stream=S&prefix=P&leases=B]), not --dir; its index is local, in --index")
	f.StringVar(&a.index, "index", "", "the index's directory (default <dir>/search; required with --nats)")
	a.nf.add(cmd)
	return cmd
}

// parseTime reads a --since or --until: RFC 3339, a date (UTC), or
// milliseconds since the epoch.
func parseTime(flag, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, usageError{fmt.Errorf("--%s %q: not RFC 3339, YYYY-MM-DD or milliseconds since the epoch", flag, s)}
}

// searchJSON is search --json's output.
type searchJSON struct {
	Sessions []searchSessionJSON `json:"sessions"`
	Next     string              `json:"next,omitempty"`
	Failed   []searchFailedJSON  `json:"failed,omitempty"`
}

type searchSessionJSON struct {
	ID        string          `json:"id"`
	Title     string          `json:"title,omitempty"`
	Cwd       string          `json:"cwd,omitempty"`
	UpdatedAt int64           `json:"updatedAt"`
	Hits      []searchHitJSON `json:"hits"`
}

type searchHitJSON struct {
	Seq       uint64 `json:"seq"`
	Type      string `json:"type"`
	Role      string `json:"role"`
	Time      int64  `json:"time"`
	Snippet   string `json:"snippet"`
	Inherited bool   `json:"inherited,omitempty"`
	Before    []any  `json:"before,omitempty"`
	After     []any  `json:"after,omitempty"`
}

type searchFailedJSON struct {
	Session string `json:"session"`
	Seq     uint64 `json:"seq"`
	Error   string `json:"error"`
}

func runSearch(w io.Writer, prog *progress, dir, text string, a searchArgs) error {
	q := search.Query{Text: text, Session: a.session, Cwd: a.cwd, Types: a.types, Roles: a.roles,
		Context: a.context, Limit: a.limit, PerSess: a.perSession, After: a.after, Substring: a.substring, Inherited: a.inherited}
	var err error
	if q.Since, err = parseTime("since", a.since); err != nil {
		return err
	}
	if q.Until, err = parseTime("until", a.until); err != nil {
		return err
	}
	switch a.order {
	case "rank":
	case "newest":
		q.Order = search.Newest
	case "oldest":
		q.Order = search.Oldest
	default:
		return usageError{fmt.Errorf("--order %q: rank, newest or oldest", a.order)}
	}
	if a.limit < 1 || a.perSession < 1 || a.context < 0 {
		return usageError{errors.New("--limit and --per-session must be at least 1, --context at least 0")}
	}
	ctx := context.Background()
	var st store.Store
	idxDir := a.index
	if a.nats != "" {
		if !isNATS(a.nats) {
			return usageError{fmt.Errorf("search --nats %s: not a NATS address (nats://host:4222)", a.nats)}
		}
		if idxDir == "" {
			return usageError{errors.New("search --nats needs --index DIR: the index of a stream is local to the host")}
		}
		t, err := openTarget(ctx, a.nats, &a.nf, false, true)
		if err != nil {
			return err
		}
		defer t.close()
		st = t.s
	} else {
		db, err := openRO(dir)
		if err != nil {
			return err
		}
		defer db.Close()
		st = store.Wrap[*engine.Handle](db)
		if idxDir == "" {
			idxDir = filepath.Join(dir, search.DirName)
		}
	}
	ix, err := search.Open(st, idxDir, search.Options{})
	if err != nil {
		return err
	}
	defer ix.Close()
	// The catch-up (the whole build, on a first search) shows a bar.
	var t *task
	bar := func(done, total uint64) {
		if t == nil {
			t = prog.start("index", int(total), "events", a.rebuild)
		}
		t.set(int(done))
	}
	if a.rebuild {
		err = ix.Rebuild(ctx, bar)
	} else {
		err = ix.CatchUp(ctx, bar)
	}
	if t != nil {
		t.end(err != nil)
	}
	if err != nil || a.rebuild {
		return err
	}
	res, err := ix.Search(ctx, q)
	if errors.Is(err, search.ErrQuery) || errors.Is(err, store.ErrInvalidArgument) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if a.asJSON {
		out := searchJSON{Sessions: []searchSessionJSON{}, Next: res.Next}
		for _, s := range res.Sessions {
			sj := searchSessionJSON{ID: s.ID, Title: s.Title, Cwd: s.Cwd, UpdatedAt: s.UpdatedAt}
			for _, h := range s.Hits {
				hj := searchHitJSON{Seq: h.Seq, Type: h.Type, Role: h.Role, Time: h.Time, Snippet: h.Snippet, Inherited: h.Inherited}
				for _, e := range h.Before {
					hj.Before = append(hj.Before, e)
				}
				for _, e := range h.After {
					hj.After = append(hj.After, e)
				}
				sj.Hits = append(sj.Hits, hj)
			}
			out.Sessions = append(out.Sessions, sj)
		}
		for _, f := range res.Failed {
			out.Failed = append(out.Failed, searchFailedJSON{Session: f.Session, Seq: f.Seq, Error: f.Err.Error()})
		}
		if err := writeJSON(w, out); err != nil {
			return err
		}
		return failedSessions(res.Failed)
	}
	for _, s := range res.Sessions {
		title := ""
		if s.Title != "" {
			title = "  " + s.Title
		}
		fmt.Fprintf(w, "%s%s  (%s, updated %s)\n", s.ID, title, s.Cwd, time.UnixMilli(s.UpdatedAt).UTC().Format(time.RFC3339))
		for _, h := range s.Hits {
			inh := ""
			if h.Inherited {
				inh = " inherited"
			}
			for _, e := range h.Before {
				fmt.Fprintf(w, "      %6d %s\n", e.Seq, e.Type)
			}
			fmt.Fprintf(w, "  %6d %s %s %s%s: %s\n", h.Seq, time.UnixMilli(h.Time).UTC().Format(time.RFC3339), h.Type, h.Role, inh,
				strings.Join(strings.Fields(h.Snippet), " "))
			for _, e := range h.After {
				fmt.Fprintf(w, "      %6d %s\n", e.Seq, e.Type)
			}
		}
	}
	if res.Next != "" {
		fmt.Fprintf(w, "more: --after %s\n", res.Next)
	}
	return failedSessions(res.Failed)
}

// failedSessions is the error of a search some of whose sessions could
// not be searched whole (exit 1, after the hits of the others).
func failedSessions(failed []*search.SessionError) error {
	if len(failed) == 0 {
		return nil
	}
	errs := make([]error, len(failed))
	for i, f := range failed {
		errs[i] = f
	}
	return errors.Join(errs...)
}

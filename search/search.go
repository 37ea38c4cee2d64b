package search

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// Order is the order of a search's hits.
type Order int

const (
	ByRank Order = iota // BM25, best first
	Newest              // event time, newest first
	Oldest              // event time, oldest first
)

// DefaultRoles are the roles a Query searches when it names none: what a
// person and the model said.
var DefaultRoles = []string{RoleUser, RoleAssistant}

// Query is a search.
type Query struct {
	// Text: words (all must match), "phrases", prefix*, a OR b, NOT word
	// and -word; case and diacritics are folded. A term with CJK text is
	// matched as a substring (trigrams), as every term is with Substring.
	Text      string
	Substring bool

	Session string // keeps the sessions whose ID starts with it
	Cwd     string // keeps the sessions whose header's Cwd is it
	Since   int64  // keeps events at or after this time (ms since the epoch); 0: no bound
	Until   int64  // keeps events before this time; 0: no bound
	Types   []string
	Roles   []string // nil: DefaultRoles (unless Types is set); []string{"*"}: every role
	// Inherited makes a fork's inherited events count as the fork's own:
	// a hit in a parent before a fork's cut is reported under the fork
	// too. (An inherited event is indexed once, under the session that
	// wrote it.)
	Inherited bool

	Order   Order
	Context int    // events of context either side of each hit
	Limit   int    // sessions per page; 0: 10
	PerSess int    // hits per session; 0: 5
	After   string // Result.Next of the previous page
	Mark    [2]string
}

// Hit is one event that matched.
type Hit struct {
	Seq     uint64
	Type    string
	Role    string
	Time    int64
	Snippet string // the matched terms between Query.Mark (default « »)
	// Inherited is set on a hit reported under a fork that inherited it
	// (Query.Inherited): Seq is the fork's (and its parent's) seq.
	Inherited bool
	Before    []event.Event // Query.Context events before it
	After     []event.Event // and after it
}

// Session is a session with hits.
type Session struct {
	ID        string
	Title     string
	Cwd       string
	UpdatedAt int64
	Hits      []Hit
}

// Result is a page of a search.
type Result struct {
	Sessions []Session
	Next     string // the cursor of the next page; "" after the last
	// Failed names the sessions the filters admit whose events could
	// not all be read for indexing (*SessionError: a damaged segment):
	// their hits after the damage are missing.
	Failed []*SessionError
}

type row struct {
	sid                 int64
	id, cwd, title, pid string
	updated, inh        int64
	seq                 uint64
	typ, role           string
	time                int64
	snippet             string
}

// Search runs q over the index, after catching it up to every event
// durable Options.Fresh before it began if the last catch-up is older. A
// session deleted since the index last saw it is left out (each
// session of the page is checked in the store).
func (ix *Index) Search(ctx context.Context, q Query) (Result, error) {
	begin := time.Now()
	p, err := parse(q.Text, q.Substring)
	if err != nil {
		return Result{}, err
	}
	if q.Limit < 0 || q.PerSess < 0 || q.Context < 0 {
		return Result{}, fmt.Errorf("search: negative Limit, PerSess or Context: %w", store.ErrInvalidArgument)
	}
	if q.Limit == 0 {
		q.Limit = 10
	}
	if q.PerSess == 0 {
		q.PerSess = 5
	}
	if q.Mark == [2]string{} {
		q.Mark = [2]string{"«", "»"}
	}
	offset := 0
	if q.After != "" {
		if offset, err = strconv.Atoi(q.After); err != nil || offset < 0 {
			return Result{}, fmt.Errorf("search: cursor %q is not one Search returned: %w", q.After, store.ErrInvalidArgument)
		}
	}
	if err := ix.catchUp(ctx, begin, nil); err != nil {
		return Result{}, err
	}
	tbl := "fts"
	if p.substring {
		tbl = "tri"
	}
	snip := fmt.Sprintf("snippet(%s, 0, ?, ?, '…', 16)", tbl)
	if p.substring {
		snip = "d.text" // detail=none: no snippet; cut and marked below
	}
	var where []string
	args := []any{}
	if !p.substring {
		args = append(args, q.Mark[0], q.Mark[1])
	}
	args = append(args, p.match())
	if q.Session != "" {
		where = append(where, "substr(s.id, 1, ?) = ?")
		args = append(args, len(q.Session), q.Session)
	}
	if q.Cwd != "" {
		where = append(where, "s.cwd = ?")
		args = append(args, q.Cwd)
	}
	if q.Since != 0 {
		where = append(where, "d.time >= ?")
		args = append(args, q.Since)
	}
	if q.Until != 0 {
		where = append(where, "d.time < ?")
		args = append(args, q.Until)
	}
	in := func(col string, vals []string) {
		where = append(where, col+" IN ("+strings.TrimSuffix(strings.Repeat("?,", len(vals)), ",")+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	if len(q.Types) > 0 {
		in("d.type", q.Types)
	}
	roles := q.Roles
	if roles == nil && len(q.Types) == 0 {
		roles = DefaultRoles
	}
	if len(roles) > 0 && !(len(roles) == 1 && roles[0] == "*") {
		in("d.role", roles)
	}
	order := "rank"
	switch q.Order {
	case Newest:
		order = "d.time DESC, d.rowid DESC"
	case Oldest:
		order = "d.time, d.rowid"
	}
	cond := ""
	if len(where) > 0 {
		cond = " AND " + strings.Join(where, " AND ")
	}
	// Enough hits for a page of sessions: more than Limit×PerSess when
	// some sessions have many.
	want := q.Limit * q.PerSess * 4
	args = append(args, want, offset)
	sqlq := fmt.Sprintf(`SELECT s.sid, s.id, s.cwd, s.title, s.parent, s.updated, s.inherited, d.seq, d.type, d.role, d.time, %s
		FROM %s JOIN docs d ON d.rowid = %s.rowid JOIN sessions s ON s.sid = d.sid
		WHERE %s MATCH ?%s ORDER BY %s LIMIT ? OFFSET ?`, snip, tbl, tbl, tbl, cond, order)
	rs, err := ix.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return Result{}, fmt.Errorf("search: %w", err)
	}
	var hits []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.sid, &r.id, &r.cwd, &r.title, &r.pid, &r.updated, &r.inh, &r.seq, &r.typ, &r.role, &r.time, &r.snippet); err != nil {
			rs.Close()
			return Result{}, err
		}
		if p.substring {
			r.snippet = markSubstrings(r.snippet, p, q.Mark)
		}
		hits = append(hits, r)
	}
	if err := rs.Close(); err != nil {
		return Result{}, fmt.Errorf("search: %w", err)
	}
	if q.Inherited {
		if hits, err = ix.inherit(ctx, hits); err != nil {
			return Result{}, err
		}
	}
	var res Result
	bySess := map[string]int{}
	used := 0
	for _, r := range hits {
		k, ok := bySess[r.id]
		if !ok {
			if len(res.Sessions) == q.Limit {
				break
			}
			res.Sessions = append(res.Sessions, Session{ID: r.id, Title: r.title, Cwd: r.cwd, UpdatedAt: r.updated})
			k = len(res.Sessions) - 1
			bySess[r.id] = k
		}
		used++
		if len(res.Sessions[k].Hits) < q.PerSess {
			res.Sessions[k].Hits = append(res.Sessions[k].Hits, Hit{Seq: r.seq, Type: r.typ, Role: r.role, Time: r.time,
				Snippet: r.snippet, Inherited: r.inh < 0})
		}
	}
	if len(hits) == want || used < len(hits) {
		res.Next = strconv.Itoa(offset + used)
	}
	if q.Inherited {
		res.Next = "" // pages of inherited hits: one page
	}
	// A session deleted (or created again) since the index saw it is
	// never shown.
	kept := res.Sessions[:0]
	for _, s := range res.Sessions {
		snap, err := ix.st.Stat(ctx, s.ID)
		if errors.Is(err, store.ErrSessionNotFound) {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		_ = snap
		if q.Context > 0 {
			if err := ix.context(ctx, &s, q.Context); err != nil {
				if errors.Is(err, store.ErrSessionNotFound) {
					continue
				}
				return Result{}, err
			}
		}
		kept = append(kept, s)
	}
	res.Sessions = kept
	res.Failed, err = ix.failed(ctx, q)
	return res, err
}

// failed returns the sessions q's filters admit whose indexing stopped at
// an error.
func (ix *Index) failed(ctx context.Context, q Query) ([]*SessionError, error) {
	rs, err := ix.db.QueryContext(ctx, `SELECT id, next, failed FROM sessions WHERE failed != '' AND substr(id, 1, ?) = ? AND (? = '' OR cwd = ?)`,
		len(q.Session), q.Session, q.Cwd, q.Cwd)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*SessionError
	for rs.Next() {
		var e SessionError
		var why string
		if err := rs.Scan(&e.Session, &e.Seq, &why); err != nil {
			return nil, err
		}
		e.Err = errors.New(why)
		out = append(out, &e)
	}
	return out, rs.Err()
}

// inherit adds, after each hit in a session that forks inherit from
// before their cut, the same hit under each such fork (and the forks of
// those forks), marked inherited.
func (ix *Index) inherit(ctx context.Context, hits []row) ([]row, error) {
	type fork struct {
		id, cwd, title string
		updated, n     int64
	}
	kids := map[string][]fork{}
	rs, err := ix.db.QueryContext(ctx, `SELECT id, cwd, title, updated, parent, inherited FROM sessions WHERE inherited > 0 AND parent != ''`)
	if err != nil {
		return nil, err
	}
	for rs.Next() {
		var f fork
		var parent string
		if err := rs.Scan(&f.id, &f.cwd, &f.title, &f.updated, &parent, &f.n); err != nil {
			rs.Close()
			return nil, err
		}
		kids[parent] = append(kids[parent], f)
	}
	if err := rs.Close(); err != nil {
		return nil, err
	}
	var out []row
	var walk func(r row, depth int)
	walk = func(r row, depth int) {
		if depth > 64 {
			return
		}
		for _, f := range kids[r.id] {
			if int64(r.seq) < f.n {
				c := r
				c.id, c.cwd, c.title, c.updated, c.inh = f.id, f.cwd, f.title, f.updated, -1
				out = append(out, c)
				walk(c, depth+1)
			}
		}
	}
	for _, r := range hits {
		out = append(out, r)
		walk(r, 0)
	}
	return out, nil
}

// context reads n events either side of each of s's hits.
func (ix *Index) context(ctx context.Context, s *Session, n int) error {
	h, err := ix.st.Open(ctx, s.ID, store.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	for i := range s.Hits {
		hit := &s.Hits[i]
		lo := max(int(hit.Seq)-n, 0)
		evs, err := h.Read(ctx, lo, int(hit.Seq)-lo+n+1)
		if err != nil {
			return err
		}
		for _, e := range evs {
			switch {
			case e.Seq < hit.Seq:
				hit.Before = append(hit.Before, e)
			case e.Seq > hit.Seq:
				hit.After = append(hit.After, e)
			}
		}
	}
	return nil
}

// markSubstrings marks the terms of a substring query in s (the trigram
// table keeps no positions: the snippet is the text's start, or the
// first match's surroundings).
func markSubstrings(s string, p *parsed, mark [2]string) string {
	low := strings.ToLower(s)
	for _, g := range p.groups {
		for _, t := range g {
			w := strings.ToLower(t.text)
			i := strings.Index(low, w)
			if i < 0 || len(low) != len(s) {
				continue
			}
			lo, hi := max(i-60, 0), min(i+len(w)+60, len(s))
			for lo > 0 && !utf8.RuneStart(s[lo]) {
				lo--
			}
			for hi < len(s) && !utf8.RuneStart(s[hi]) {
				hi++
			}
			pre, post := "", ""
			if lo > 0 {
				pre = "…"
			}
			if hi < len(s) {
				post = "…"
			}
			return pre + s[lo:i] + mark[0] + s[i:i+len(w)] + mark[1] + s[i+len(w):hi] + post
		}
	}
	return cut(s, 160)
}

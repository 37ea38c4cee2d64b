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
	rowid               int64 // in docs (and the FTS5 tables)
}

// maxChunk bounds the ranked hits one query of a search reads.
const maxChunk = 4096

// fetcher reads a query's hits in order, a chunk at a time, each hit
// with its session's row, those the filters (cond) reject left out.
type fetcher struct {
	ix         *Index
	tbl, match string
	cond       string
	args       []any
	order      Order
	off        int // rows of the order read so far (filtered or not)
}

// next reads the next n rows of the order (at most n hits: the filters
// drop some); more is false once the order has no rows left.
func (f *fetcher) next(ctx context.Context, n int) (_ []row, more bool, _ error) {
	var q string
	args := []any{}
	if f.order == ByRank {
		// Ranked and cut inside FTS5, joined and filtered after: the
		// filter is a column, so that the rows FTS5 gave are counted.
		q = fmt.Sprintf(`SELECT s.sid, s.id, s.cwd, s.title, s.parent, s.updated, s.inherited, d.seq, d.type, d.role, d.time, m.rowid, (%s)
			FROM (SELECT rowid, rank FROM %s WHERE %s MATCH ? ORDER BY rank LIMIT ? OFFSET ?) m
			JOIN docs d ON d.rowid = m.rowid JOIN sessions s ON s.sid = d.sid ORDER BY m.rank`, f.cond, f.tbl, f.tbl)
		args = append(append(args, f.args...), f.match, n, f.off)
	} else {
		// By time: every match is joined and sorted (FTS5 orders by
		// rank or rowid only).
		order := "d.time DESC, d.rowid DESC"
		if f.order == Oldest {
			order = "d.time, d.rowid"
		}
		q = fmt.Sprintf(`SELECT s.sid, s.id, s.cwd, s.title, s.parent, s.updated, s.inherited, d.seq, d.type, d.role, d.time, d.rowid, 1
			FROM %s JOIN docs d ON d.rowid = %s.rowid JOIN sessions s ON s.sid = d.sid
			WHERE %s MATCH ? AND (%s) ORDER BY %s LIMIT ? OFFSET ?`, f.tbl, f.tbl, f.tbl, f.cond, order)
		args = append(append(append(args, f.match), f.args...), n, f.off)
	}
	rs, err := f.ix.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("search: %w", err)
	}
	defer rs.Close()
	var out []row
	got := 0
	for rs.Next() {
		var r row
		var ok bool
		if err := rs.Scan(&r.sid, &r.id, &r.cwd, &r.title, &r.pid, &r.updated, &r.inh, &r.seq, &r.typ, &r.role, &r.time, &r.rowid, &ok); err != nil {
			return nil, false, err
		}
		got++
		if ok {
			out = append(out, r)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, false, fmt.Errorf("search: %w", err)
	}
	f.off += got
	return out, got == n, nil
}

// snippets sets the snippet of each hit of sessions (rowids: each hit's
// row), made for these hits only.
func (ix *Index) snippets(ctx context.Context, sessions []Session, rowids [][]int64, p *parsed, tbl string, mark [2]string) error {
	var ids []any
	seen := map[int64]bool{}
	for _, l := range rowids {
		for _, id := range l {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	list := strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")
	var q string
	var args []any
	if p.substring {
		// The trigram table keeps no positions for snippet(): the text,
		// cut and marked below.
		q = `SELECT rowid, text FROM docs WHERE rowid IN (` + list + `)`
		args = ids
	} else {
		// One pass over the matches, the snippet made for the page's
		// rows only (+rowid: not a constraint FTS5 would take, which
		// makes it start the query again for each row).
		q = fmt.Sprintf(`SELECT rowid, snippet(%s, 0, ?, ?, '…', 16) FROM %s WHERE %s MATCH ? AND +rowid IN (%s)`, tbl, tbl, tbl, list)
		args = append([]any{mark[0], mark[1], p.match()}, ids...)
	}
	rs, err := ix.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	defer rs.Close()
	snip := map[int64]string{}
	for rs.Next() {
		var id int64
		var s string
		if err := rs.Scan(&id, &s); err != nil {
			return err
		}
		if p.substring {
			s = markSubstrings(s, p, mark)
		}
		snip[id] = s
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	for k := range sessions {
		for i := range sessions[k].Hits {
			sessions[k].Hits[i].Snippet = snip[rowids[k][i]]
		}
	}
	return nil
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
	var where []string
	var args []any
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
	cond := "1"
	if len(where) > 0 {
		cond = strings.Join(where, " AND ")
	}
	if p.substring {
		if err := ix.trigrams(ctx); err != nil {
			return Result{}, err
		}
	}
	f := &fetcher{ix: ix, tbl: tbl, match: p.match(), cond: cond, args: args, order: q.Order}
	var res Result
	var rowids [][]int64 // of each session's hits, for their snippets
	bySess := map[string]int{}
	used, skip := 0, offset
	// The ranked hits come in chunks, each ranked and cut inside FTS5
	// (ORDER BY rank LIMIT: FTS5 keeps only the best rows, and the joins
	// and filters see only those), until the page has Limit sessions and
	// a hit of one more, or the hits end. Snippets are made for the
	// page's hits only.
	n := (offset+q.Limit)*2 + 64
	full := false
	for !full {
		rows, more, err := f.next(ctx, n)
		if err != nil {
			return Result{}, err
		}
		if q.Inherited {
			if rows, err = ix.inherit(ctx, rows); err != nil {
				return Result{}, err
			}
		}
		for _, r := range rows {
			if skip > 0 {
				skip--
				continue
			}
			k, ok := bySess[r.id]
			if !ok {
				if len(res.Sessions) == q.Limit {
					full = true
					break
				}
				res.Sessions = append(res.Sessions, Session{ID: r.id, Title: r.title, Cwd: r.cwd, UpdatedAt: r.updated})
				rowids = append(rowids, nil)
				k = len(res.Sessions) - 1
				bySess[r.id] = k
			}
			used++
			if len(res.Sessions[k].Hits) < q.PerSess {
				res.Sessions[k].Hits = append(res.Sessions[k].Hits, Hit{Seq: r.seq, Type: r.typ, Role: r.role, Time: r.time,
					Inherited: r.inh < 0})
				rowids[k] = append(rowids[k], r.rowid)
			}
		}
		if !more {
			break
		}
		n = min(n*2, maxChunk)
	}
	if full {
		res.Next = strconv.Itoa(offset + used)
	}
	if q.Inherited {
		res.Next = "" // pages of inherited hits: one page
	}
	if err := ix.snippets(ctx, res.Sessions, rowids, p, tbl, q.Mark); err != nil {
		return Result{}, err
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

package peers

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// S6 is the search workload (issue 46, part 3): the agent workload's
// sessions (bench.AgentTurn) in one engine store, indexed by the search
// package, and beside it, fed the same events in the same run, what
// hosts use today: SQLite FTS5 in the hosts' schema (a messages table,
// an external-content FTS5 table with unicode61 and a trigram one) and
// a grep-like scan of the JSONL reference layout (a .jsonl file per
// session, every line read for every query).
const S6 Workload = "S6-search"

// S6Config sizes a run of S6.
type S6Config struct {
	Sessions int // sessions of the store
	Turns    int // agent turns of each (about 61 events a turn)
	Queries  int // queries of each kind on the indexes
	Scans    int // queries of each kind on the JSONL scan (each reads every file)
}

// S6Default is the size the benchmark runs by default (a few seconds);
// S6Issue is the size: 10,000 sessions of 2 turns, about 1.2M
// events.
var (
	S6Default = S6Config{Sessions: 200, Turns: 2, Queries: 100, Scans: 10}
	S6Issue   = S6Config{Sessions: 10_000, Turns: 2, Queries: 200, Scans: 5}
)

// S6Result is one engine's figures in S6. The scan has no build and no
// index: its BuildPerSec and IndexBytes are 0.
type S6Result struct {
	Engine       string
	Events       int // events of the store
	Docs         int // of them with text, indexed
	BuildPerSec  float64
	IndexBytes   int64
	RawJSONBytes int64 // of the indexed events
	// Queries: by kind ("two words", "phrase", "substring"), the p50 and
	// p99 latency in ms; Hits: events found by every query of the kind
	// together (the indexes' first page: up to 50 events).
	Queries map[string][2]float64
	Hits    map[string]int
	// The search package makes its trigram table (substring queries) on
	// demand: the seconds the first substring query spent making it, and
	// the index's bytes with it (IndexBytes is without).
	TrigramSeconds    float64
	IndexBytesTrigram int64
}

// RunS6 writes the store of c in dir and measures the three engines on
// it, the search package first.
func RunS6(ctx context.Context, c S6Config, dir string) ([]S6Result, error) {
	st, closeStore, err := ChoiceStore(ctx, filepath.Join(dir, "store"), c.Sessions, c.Turns)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	qs, err := choiceQueries(c.Queries)
	if err != nil {
		return nil, err
	}
	var out []S6Result
	r, err := s6Search(ctx, st, filepath.Join(dir, "search"), qs)
	if err != nil {
		return nil, fmt.Errorf("search package: %w", err)
	}
	out = append(out, r)
	if r, err = s6SQLite(ctx, st, filepath.Join(dir, "sqlite"), qs); err != nil {
		return nil, fmt.Errorf("sqlite fts5: %w", err)
	}
	out = append(out, r)
	for k, l := range qs {
		qs[k] = l[:min(len(l), c.Scans)]
	}
	if r, err = s6Scan(ctx, st, filepath.Join(dir, "jsonl"), qs); err != nil {
		return nil, fmt.Errorf("jsonl scan: %w", err)
	}
	out = append(out, r)
	for i := range out {
		out[i].Events = r.Events
	}
	return out, nil
}

func newS6(engine string) S6Result {
	return S6Result{Engine: engine, Queries: map[string][2]float64{}, Hits: map[string]int{}}
}

// timeQueries runs every query of qs with f and records its latency and
// hits.
func timeQueries(res *S6Result, qs map[string][]string, f func(kind, q string) (int, error)) error {
	for kind, list := range qs {
		var l []float64
		for _, q := range list {
			t0 := time.Now()
			n, err := f(kind, q)
			if err != nil {
				return fmt.Errorf("%s %q: %w", kind, q, err)
			}
			l = append(l, float64(time.Since(t0).Microseconds())/1000)
			res.Hits[kind] += n
		}
		res.Queries[kind] = pcts(l)
	}
	return nil
}

func s6Search(ctx context.Context, st store.Store, dir string, qs map[string][]string) (S6Result, error) {
	res := newS6("seglog search (FTS5, search package)")
	ix, err := search.Open(st, dir, search.Options{Fresh: -1})
	if err != nil {
		return res, err
	}
	start := time.Now()
	var events uint64
	err = ix.CatchUp(ctx, func(_, total uint64) { events = total })
	ix.Close()
	if err != nil {
		return res, err
	}
	res.BuildPerSec = float64(events) / time.Since(start).Seconds()
	if res.Docs, res.RawJSONBytes, err = rawOfDocs(ctx, st); err != nil {
		return res, err
	}
	if res.IndexBytes, err = search.DirBytes(dir); err != nil {
		return res, err
	}
	// The trigram table, made as the first substring query would make
	// it (timed apart: the queries below then find it).
	start = time.Now()
	if ix, err = search.Open(st, dir, search.Options{Trigrams: true}); err != nil {
		return res, err
	}
	res.TrigramSeconds = time.Since(start).Seconds()
	ix.Close()
	if res.IndexBytesTrigram, err = search.DirBytes(dir); err != nil {
		return res, err
	}
	// Searches as a host makes them (Options.Fresh's default: a catch-up
	// when the last is older than a second).
	if ix, err = search.Open(st, dir, search.Options{}); err != nil {
		return res, err
	}
	defer ix.Close()
	err = timeQueries(&res, qs, func(kind, s string) (int, error) {
		q := search.Query{Text: s, Roles: []string{"*"}, Limit: 50, PerSess: 50}
		switch kind {
		case "phrase":
			q.Text = `"` + s + `"`
		case "substring":
			q.Substring = true
		}
		r, err := ix.Search(ctx, q)
		n := 0
		for _, s := range r.Sessions {
			n += len(s.Hits)
		}
		return n, err
	})
	return res, err
}

// The hosts' schema: the transcript rows, and two external-content FTS5
// tables over them kept by triggers.
const s6Schema = `
CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
  type TEXT, role TEXT, time INTEGER, content TEXT);
CREATE INDEX messages_session ON messages(session_id, seq);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE messages_trigram USING fts5(content, content='messages', content_rowid='id', tokenize='trigram');
CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
  INSERT INTO messages_trigram(rowid, content) VALUES (new.id, new.content);
END;`

func s6SQLite(ctx context.Context, st store.Store, dir string, qs map[string][]string) (S6Result, error) {
	res := newS6("sqlite fts5 (hosts' schema)")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "sessions.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return res, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, s6Schema); err != nil {
		return res, err
	}
	start := time.Now()
	var tx *sql.Tx
	var ins *sql.Stmt
	n := 0
	err = eachEvent(ctx, st, func(id string, e event.Event) error {
		res.Events++
		d, ok := search.DocOf(e, 0)
		if !ok {
			return nil
		}
		if tx == nil {
			var err error
			if tx, err = db.BeginTx(ctx, nil); err != nil {
				return err
			}
			if ins, err = tx.PrepareContext(ctx, `INSERT INTO messages(session_id, seq, type, role, time, content) VALUES (?,?,?,?,?,?)`); err != nil {
				return err
			}
		}
		if _, err := ins.ExecContext(ctx, id, e.Seq, e.Type, d.Role, e.Time, d.Text); err != nil {
			return err
		}
		res.Docs++
		if n++; n%1000 == 0 {
			err := tx.Commit()
			tx = nil
			return err
		}
		return nil
	})
	if err == nil && tx != nil {
		err = tx.Commit()
	}
	if err != nil {
		return res, err
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return res, err
	}
	res.BuildPerSec = float64(res.Events) / time.Since(start).Seconds()
	if _, res.RawJSONBytes, err = rawOfDocs(ctx, st); err != nil {
		return res, err
	}
	if res.IndexBytes, err = dirBytes(dir); err != nil {
		return res, err
	}
	err = timeQueries(&res, qs, func(kind, s string) (int, error) {
		table, match := "messages_fts", s
		switch kind {
		case "phrase":
			match = `"` + s + `"`
		case "substring":
			table, match = "messages_trigram", `"`+s+`"`
		}
		rows, err := db.QueryContext(ctx, `SELECT m.session_id, m.seq, snippet(`+table+`, 0, '«', '»', '…', 12)
			FROM `+table+` JOIN messages m ON m.id = `+table+`.rowid
			WHERE `+table+` MATCH ? ORDER BY rank LIMIT 50`, match)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var sid, snip string
			var seq int64
			if err := rows.Scan(&sid, &seq, &snip); err != nil {
				return n, err
			}
			n++
		}
		return n, rows.Err()
	})
	return res, err
}

// s6Scan writes the events as the JSONL reference lays them out (a file
// of JSON lines per session) and answers each query as a JSONL host does:
// every line of every file read, folded to lower case and matched.
func s6Scan(ctx context.Context, st store.Store, dir string, qs map[string][]string) (S6Result, error) {
	res := newS6("jsonl scan (grep-like)")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	files := map[string]*bufio.Writer{}
	var fs []*os.File
	err := eachEvent(ctx, st, func(id string, e event.Event) error {
		res.Events++
		w := files[id]
		if w == nil {
			f, err := os.Create(filepath.Join(dir, id+".jsonl"))
			if err != nil {
				return err
			}
			fs = append(fs, f)
			w = bufio.NewWriter(f)
			files[id] = w
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if _, ok := search.DocOf(e, 0); ok {
			res.Docs++
			res.RawJSONBytes += int64(len(b))
		}
		w.Write(b)
		return w.WriteByte('\n')
	})
	for _, f := range fs {
		if e := files[strings.TrimSuffix(filepath.Base(f.Name()), ".jsonl")].Flush(); err == nil {
			err = e
		}
		if e := f.Close(); err == nil {
			err = e
		}
	}
	if err != nil {
		return res, err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return res, err
	}
	err = timeQueries(&res, qs, func(kind, s string) (int, error) {
		var need [][]byte
		if kind == "two words" {
			for _, w := range strings.Fields(s) {
				need = append(need, []byte(w))
			}
		} else {
			need = [][]byte{[]byte(s)}
		}
		n := 0
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				return n, err
			}
			for line := range bytes.Lines(b) {
				l := bytes.ToLower(line)
				ok := true
				for _, w := range need {
					if !bytes.Contains(l, w) {
						ok = false
						break
					}
				}
				if ok {
					n++
				}
			}
		}
		return n, nil
	})
	return res, err
}

package search

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"

	_ "modernc.org/sqlite" // the FTS5 engine (pure Go)
)

// DirName is the directory of a store that holds its search index
// (Options.Dir's default for an engine store): the engine's open and
// check leave a subdirectory alone.
const DirName = "search"

// FileName is the index file in its directory; SQLite adds -wal and -shm
// beside it, and the indexing lease is LockName.
const (
	FileName = "index.sqlite"
	LockName = "indexer.lock"
)

// schemaVersion is stored in meta; an index of another version is
// rebuilt (but for schema 3, migrated in place: migrate3).
const schemaVersion = "4"

// Options configures an Index.
type Options struct {
	// Extractors give the text of a host's own event types, by type or
	// family ("acme/*").
	Extractors map[string]Extractor
	// ResultPrefix is the bytes of a tool result (and of a tool call's
	// arguments) indexed; 0 means DefaultResultPrefix.
	ResultPrefix int
	// Fresh is how old the index may be when a search begins: a search
	// answers over every event durable Fresh before it began (default
	// 1 s). A search that finds the last catch-up older catches up
	// first.
	Fresh time.Duration
	// Trigrams makes the trigram table (substring and CJK queries) at
	// Open. Without it, the table is made by the first such query (a
	// build from the indexed text: seconds on a large index), so an
	// index never asked for substrings does not carry it.
	Trigrams bool
}

// Index is the full-text index of a store, kept in dir (a cache: deleted
// or damaged, it is rebuilt from the store). It is safe for concurrent
// use, and any number of processes may open the same dir: one of them at
// a time indexes (the lease is a lock on LockName, released when its
// process dies), the others search what it indexed.
type Index struct {
	st   store.Store
	dir  string
	db   *sql.DB
	x    extractor
	opts Options

	mu     sync.Mutex // serialises this process's catch-ups
	closed bool
	tri    atomic.Bool // the trigram table is known to exist
}

// Open opens (or makes) the index of st in dir. An index that cannot be
// read, or of another schema, is moved aside and made again empty: the
// next catch-up rebuilds it.
func Open(st store.Store, dir string, opts Options) (*Index, error) {
	if opts.ResultPrefix == 0 {
		opts.ResultPrefix = DefaultResultPrefix
	}
	if opts.Fresh == 0 {
		opts.Fresh = time.Second
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ix := &Index{st: st, dir: dir, opts: opts, x: extractor{prefix: opts.ResultPrefix, host: opts.Extractors}}
	db, err := openDB(filepath.Join(dir, FileName))
	if err != nil {
		if !errors.Is(err, ErrIndex) {
			return nil, err
		}
		if err := setAside(dir); err != nil {
			return nil, err
		}
		if db, err = openDB(filepath.Join(dir, FileName)); err != nil {
			return nil, err
		}
	}
	ix.db = db
	if opts.Trigrams {
		if err := ix.trigrams(context.Background()); err != nil {
			db.Close()
			return nil, err
		}
	}
	return ix, nil
}

// trigrams makes the trigram table if the index has none yet (under the
// indexing lease: one process builds it, the others then find it).
func (ix *Index) trigrams(ctx context.Context) error {
	if ix.tri.Load() {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return ErrClosed
	}
	release, err := ix.lease(ctx)
	if err != nil {
		return err
	}
	defer release()
	has, err := ix.hasTrigrams(ctx)
	if err != nil || has {
		ix.tri.Store(has)
		return err
	}
	tx, err := ix.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, trigramSchema); err != nil {
		return fmt.Errorf("search: making the trigram table: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	ix.tri.Store(true)
	return nil
}

func (ix *Index) hasTrigrams(ctx context.Context) (bool, error) { return hasTrigrams(ctx, ix.db) }

// hasTrigrams reports whether the index q reads (a connection or a
// transaction) has the trigram table.
func hasTrigrams(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tri'`).Scan(&n)
	return n > 0, err
}

// setAside renames a damaged index to <name>.damaged (replacing an older
// one): a cache, but kept for a look until the next damage.
func setAside(dir string) error {
	for _, suf := range []string{"", "-wal", "-shm"} {
		p := filepath.Join(dir, FileName+suf)
		if err := os.Rename(p, p+".damaged"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

const schema = `
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
	sid INTEGER PRIMARY KEY,
	id TEXT NOT NULL UNIQUE,
	created INTEGER NOT NULL,
	cwd TEXT NOT NULL,
	title TEXT NOT NULL,
	updated INTEGER NOT NULL,
	parent TEXT NOT NULL,
	inherited INTEGER NOT NULL,
	next INTEGER NOT NULL,    -- the first seq not indexed
	failed TEXT NOT NULL DEFAULT '' -- why the events from next on could not be read
);
CREATE TABLE IF NOT EXISTS docs(
	rowid INTEGER PRIMARY KEY,
	sid INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	type TEXT NOT NULL,
	role TEXT NOT NULL,
	time INTEGER NOT NULL,
	text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_sid ON docs(sid, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(text, content='docs', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
	INSERT INTO fts(fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
`

// A row of docs is indexed by inserting it into fts (and tri, if there is
// one) in statements of their own (txn.event), not by an AFTER INSERT
// trigger: an insert that fires a trigger needs a statement journal, so
// SQLite opens a savepoint around it, and FTS5 writes its pending terms
// out as a new segment at every savepoint: a segment per event, merged
// over and over (half the build's time, schema 3). Deletes, rare, keep
// their triggers.

// trigramSchema is the trigram table (substring and CJK queries), made
// on demand (Index.trigrams): built from docs, then kept by txn.event
// and a trigger.
const trigramSchema = `
CREATE VIRTUAL TABLE tri USING fts5(text, content='docs', content_rowid='rowid', tokenize='trigram remove_diacritics 1');
CREATE TRIGGER tri_ad AFTER DELETE ON docs BEGIN
	INSERT INTO tri(tri, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
INSERT INTO tri(tri) VALUES ('rebuild');
`

func openDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_pragma=cache_size(-32768)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	fail := func(err error) (*sql.DB, error) {
		db.Close()
		var se interface{ Code() int }
		if errors.As(err, &se) {
			switch se.Code() & 0xff {
			case 11, 26: // SQLITE_CORRUPT, SQLITE_NOTADB
				return nil, fmt.Errorf("%w: %s: %v", ErrIndex, path, err)
			}
		}
		return nil, err
	}
	var v string
	err = db.QueryRow(`SELECT v FROM meta WHERE k = 'schema'`).Scan(&v)
	if err == nil && v == "3" {
		if err := migrate3(db); err != nil {
			return fail(err)
		}
		v = schemaVersion
	}
	switch {
	case err == nil && v == schemaVersion:
		return db, nil
	case err == nil:
		db.Close()
		return nil, fmt.Errorf("%w: %s: schema %q, this build reads %q", ErrIndex, path, v, schemaVersion)
	case errors.Is(err, sql.ErrNoRows) || strings.Contains(err.Error(), "no such table"):
	default:
		return fail(err)
	}
	if _, err := db.Exec(schema); err != nil {
		return fail(err)
	}
	if _, err := db.Exec(`INSERT OR REPLACE INTO meta(k, v) VALUES ('schema', ?)`, schemaVersion); err != nil {
		return fail(err)
	}
	return db, nil
}

// migrate3 makes an index of schema 3 one of schema 4: the same tables,
// without the AFTER INSERT triggers (txn.event inserts into fts and tri
// itself). One transaction: a process that dies in it leaves schema 3.
func migrate3(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DROP TRIGGER IF EXISTS docs_ai; DROP TRIGGER IF EXISTS tri_ai; UPDATE meta SET v = '4' WHERE k = 'schema' AND v = '3'`); err != nil {
		return fmt.Errorf("search: index schema 3 to 4: %w", err)
	}
	return tx.Commit()
}

// Close closes the index (the store stays open: it is the caller's).
func (ix *Index) Close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return nil
	}
	ix.closed = true
	return ix.db.Close()
}

// Bytes returns the bytes of the index's files on disk.
func (ix *Index) Bytes() (int64, error) { return DirBytes(ix.dir) }

// DirBytes returns the bytes of the index files in dir (0 if there is no
// index).
func DirBytes(dir string) (int64, error) {
	var n int64
	for _, suf := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(filepath.Join(dir, FileName+suf))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// lease takes the indexing lease: an exclusive lock on LockName that the
// kernel lets go when the process dies, so another takes over.
func (ix *Index) lease(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(ix.dir, LockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Progress is called as a catch-up goes: the events read from the change
// feed so far, and the events it has to read in all: for a build from the
// feed's start the store's listed events, for a catch-up from a cursor 0
// (unknown: the feed does not say how far its end is) until its end.
type Progress func(done, total uint64)

// CatchUp brings the index up to every event durable when it began, and
// drops the sessions deleted since. It takes the indexing lease for its
// time (waiting for another process's catch-up to end), and skips the
// work if a catch-up that began within Options.Fresh before this call
// finished meanwhile.
func (ix *Index) CatchUp(ctx context.Context, progress Progress) error {
	return ix.catchUp(ctx, time.Now(), progress)
}

func (ix *Index) catchUp(ctx context.Context, begin time.Time, progress Progress) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return ErrClosed
	}
	release, err := ix.lease(ctx)
	if err != nil {
		return err
	}
	defer release()
	var last int64
	err = ix.db.QueryRowContext(ctx, `SELECT CAST(v AS INTEGER) FROM meta WHERE k = 'caughtUp'`).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if last >= begin.Add(-ix.opts.Fresh).UnixNano() {
		return nil
	}
	start := time.Now()
	if err := ix.pass(ctx, progress); err != nil {
		return err
	}
	_, err = ix.db.ExecContext(ctx, `INSERT OR REPLACE INTO meta(k, v) VALUES ('caughtUp', ?)`, fmt.Sprint(start.UnixNano()))
	return err
}

// indexed is what the index holds of a session (a catch-up keeps the
// sessions it touched in memory, written back with each commit).
type indexed struct {
	sid     int64
	next    uint64 // the first seq not indexed
	title   string
	updated int64
	dirty   bool
}

// batchEvents is how many events one transaction of a catch-up covers
// (at least: a transaction ends between changes). Each transaction
// commits the events' rows, the sessions' state and the feed cursor past
// the last change applied together, so a process killed in a catch-up
// resumes from the last commit's cursor with every event indexed once.
var batchEvents = 8192 // (a var: the SIGKILL test makes it smaller, to kill between commits)

// pass is one catch-up: the store's change feed from the index's cursor
// to its end (what was durable when the feed was read), applied in
// order. A cursor the store no longer holds (store.ErrCursorExpired)
// empties the index and reads the feed again from its start.
func (ix *Index) pass(ctx context.Context, progress Progress) error {
	var cur string
	err := ix.db.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'cursor'`).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	for {
		err := ix.feed(ctx, store.Cursor(cur), progress)
		if _, ok := errors.AsType[*store.CorruptionError](err); ok {
			// A damaged segment stops the feed: the sessions are read
			// one by one instead, each damaged one recording its error,
			// until the feed reads past it again (its events then
			// skipped as already indexed).
			return ix.scan(ctx)
		}
		if cur != "" && errors.Is(err, store.ErrCursorExpired) {
			if err := ix.empty(ctx); err != nil {
				return err
			}
			cur = ""
			continue
		}
		return err
	}
}

// scan reads each listed session past what the index holds of it, in
// one transaction, recording in failed why a session's events could not
// be read; sessions no longer listed are dropped.
func (ix *Index) scan(ctx context.Context) error {
	snaps, err := ix.st.List(ctx)
	if err != nil {
		return err
	}
	tx := &txn{ix: ix, ctx: ctx, sess: map[string]*indexed{}}
	defer tx.rollback()
	live := map[string]bool{}
	for _, s := range snaps {
		id := s.Header.ID
		live[id] = true
		h, err := tx.lookup(id)
		if err != nil {
			return err
		}
		if h == nil {
			h = &indexed{next: s.InheritedEventCount, title: s.Title, updated: s.UpdatedAt}
			r, err := tx.tx.ExecContext(ctx, `INSERT INTO sessions(id, created, cwd, title, updated, parent, inherited, next) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
				id, s.Header.CreatedAt, s.Header.Cwd, s.Title, s.UpdatedAt, s.Header.ParentSession, s.InheritedEventCount, s.InheritedEventCount)
			if err != nil {
				return err
			}
			if h.sid, err = r.LastInsertId(); err != nil {
				return err
			}
			tx.sess[id] = h
		}
		why := ""
		if s.EventCount > h.next {
			hd, err := ix.st.Open(ctx, id, store.Read)
			if err != nil {
				why = err.Error()
			} else {
				for e, err := range hd.Events(ctx, int(h.next)) {
					if err != nil {
						why = err.Error()
						break
					}
					if err := tx.event(h.sid, e, ix.x); err != nil {
						hd.Close()
						return err
					}
					h.next = e.Seq + 1
				}
				hd.Close()
			}
		}
		if err := tx.exec(`UPDATE sessions SET next = ?, failed = ?, title = ?, updated = ? WHERE sid = ?`, h.next, why, s.Title, s.UpdatedAt, h.sid); err != nil {
			return err
		}
	}
	rs, err := tx.tx.QueryContext(ctx, `SELECT id FROM sessions`)
	if err != nil {
		return err
	}
	var gone []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return err
		}
		if !live[id] {
			gone = append(gone, id)
		}
	}
	if err := rs.Close(); err != nil {
		return err
	}
	for _, id := range gone {
		if err := tx.dropID(id); err != nil {
			return err
		}
	}
	return tx.commit() // the cursor stays where the feed stopped
}

// empty drops every row of the index and its cursor.
func (ix *Index) empty(ctx context.Context) error {
	tri, err := ix.hasTrigrams(ctx)
	if err != nil {
		return err
	}
	q := `DELETE FROM docs; DELETE FROM sessions; DELETE FROM meta WHERE k IN ('caughtUp', 'cursor');
		INSERT INTO fts(fts) VALUES ('delete-all');`
	if tri {
		q += ` INSERT INTO tri(tri) VALUES ('delete-all');`
	}
	_, err = ix.db.ExecContext(ctx, q)
	return err
}

// feed applies the changes from cur on.
func (ix *Index) feed(ctx context.Context, cur store.Cursor, progress Progress) error {
	tx := &txn{ix: ix, ctx: ctx, sess: map[string]*indexed{}}
	defer tx.rollback()
	var done, shown, total uint64
	if cur == "" && progress != nil {
		// A build from the start: the bar's length is what the store
		// lists (the feed does not say how far its end is; a catch-up
		// from a cursor reports 0, unknown).
		snaps, err := ix.st.List(ctx)
		if err != nil {
			return err
		}
		for _, s := range snaps {
			total += s.EventCount - min(s.InheritedEventCount, s.EventCount)
		}
	}
	for c, err := range ix.st.Changes(ctx, cur) {
		if err != nil {
			return err
		}
		if err := tx.apply(c, ix.x, &done); err != nil {
			return err
		}
		tx.cursor = c.Cursor
		if tx.n >= batchEvents {
			if err := tx.commit(); err != nil {
				return err
			}
		}
		if progress != nil && done/256 != shown/256 {
			progress(done, max(total, done)*min(total, 1))
		}
		shown = done
	}
	if progress != nil {
		progress(done, done)
	}
	return tx.commit()
}

// apply applies one change of the feed to the index.
func (t *txn) apply(c store.Change, x extractor, done *uint64) error {
	switch c.Kind {
	case store.ChangeCreate, store.ChangeFork:
		if c.Header == nil {
			return fmt.Errorf("%w: feed's %v of session %q has no header", ErrIndex, c.Kind, c.Session)
		}
		// An ID created again whose delete the feed did not show (a
		// delete compacted away while the index was behind): the old
		// incarnation goes.
		if err := t.dropID(c.Session); err != nil {
			return err
		}
		h := &indexed{updated: c.Header.CreatedAt}
		parent := c.Header.ParentSession
		if c.Kind == store.ChangeFork {
			parent, h.next = c.Parent, c.N
			if p, err := t.lookup(c.Parent); err != nil {
				return err
			} else if p != nil {
				h.title = p.title // a fork's title is its parent's until it sets one
			}
		}
		if err := t.begin(); err != nil {
			return err
		}
		r, err := t.tx.ExecContext(t.ctx, `INSERT INTO sessions(id, created, cwd, title, updated, parent, inherited, next) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			c.Session, c.Header.CreatedAt, c.Header.Cwd, h.title, h.updated, parent, h.next, h.next)
		if err != nil {
			return err
		}
		if h.sid, err = r.LastInsertId(); err != nil {
			return err
		}
		t.sess[c.Session] = h
		return nil
	case store.ChangeDelete:
		return t.dropID(c.Session)
	case store.ChangeAppend:
		h, err := t.lookup(c.Session)
		if err != nil || h == nil {
			return err // events of a session never created (not shown by the contract)
		}
		for i := range c.Events {
			e := &c.Events[i]
			if e.Seq < h.next {
				continue // already indexed: each event once
			}
			if err := t.event(h.sid, *e, x); err != nil {
				return err
			}
			if title, ok := store.TitleOf(e); ok {
				h.title = title
			}
			h.updated = e.Time // (Snapshot.UpdatedAt: the last event's time)
			h.next = e.Seq + 1
			h.dirty = true
			t.n++
			*done++
		}
		return nil
	}
	return nil
}

// lookup returns what the index holds of session id, nil if nothing.
func (t *txn) lookup(id string) (*indexed, error) {
	if h, ok := t.sess[id]; ok {
		return h, nil
	}
	if err := t.begin(); err != nil {
		return nil, err
	}
	h := &indexed{}
	err := t.tx.QueryRowContext(t.ctx, `SELECT sid, next, title, updated FROM sessions WHERE id = ?`, id).Scan(&h.sid, &h.next, &h.title, &h.updated)
	if errors.Is(err, sql.ErrNoRows) {
		h = nil
	} else if err != nil {
		return nil, err
	}
	t.sess[id] = h
	return h, nil
}

// dropID removes session id's rows, if the index holds it.
func (t *txn) dropID(id string) error {
	h, err := t.lookup(id)
	if err != nil || h == nil {
		return err
	}
	t.sess[id] = nil
	return t.drop(h.sid)
}

// txn is a catch-up's current transaction, committed every batchEvents
// events.
type txn struct {
	ix     *Index
	ctx    context.Context
	tx     *sql.Tx
	n      int
	ins    *sql.Stmt           // into docs
	fts    *sql.Stmt           // into fts
	tri    *sql.Stmt           // into tri (nil if the index has no trigram table)
	sess   map[string]*indexed // the sessions looked up (nil: not in the index)
	cursor store.Cursor        // the feed's cursor past the last change applied
}

func (t *txn) begin() error {
	if t.tx != nil {
		return nil
	}
	tx, err := t.ix.db.BeginTx(t.ctx, nil)
	if err != nil {
		return err
	}
	t.tx = tx
	t.tri = nil
	if t.ins, err = tx.PrepareContext(t.ctx, `INSERT INTO docs(sid, seq, type, role, time, text) VALUES (?, ?, ?, ?, ?, ?)`); err != nil {
		return err
	}
	if t.fts, err = tx.PrepareContext(t.ctx, `INSERT INTO fts(rowid, text) VALUES (?, ?)`); err != nil {
		return err
	}
	// (Read in the transaction: another process may have made the table.)
	tri, err := hasTrigrams(t.ctx, tx)
	if err != nil {
		return err
	}
	if tri {
		t.tri, err = tx.PrepareContext(t.ctx, `INSERT INTO tri(rowid, text) VALUES (?, ?)`)
	}
	return err
}

func (t *txn) exec(q string, args ...any) error {
	if err := t.begin(); err != nil {
		return err
	}
	_, err := t.tx.ExecContext(t.ctx, q, args...)
	return err
}

func (t *txn) event(sid int64, e event.Event, x extractor) error {
	d, ok := x.doc(e)
	if !ok {
		return nil
	}
	if err := t.begin(); err != nil {
		return err
	}
	res, err := t.ins.ExecContext(t.ctx, sid, e.Seq, e.Type, d.Role, e.Time, d.Text)
	if err != nil {
		return err
	}
	rowid, err := res.LastInsertId()
	if err != nil {
		return err
	}
	if _, err := t.fts.ExecContext(t.ctx, rowid, d.Text); err != nil {
		return err
	}
	if t.tri != nil {
		_, err = t.tri.ExecContext(t.ctx, rowid, d.Text)
	}
	return err
}

// commit writes back the sessions' state and the cursor, and commits
// them with the rows (one transaction: all of it is durable, or none).
func (t *txn) commit() error {
	if t.cursor != "" {
		for _, h := range t.sess {
			if h == nil || !h.dirty {
				continue
			}
			if err := t.exec(`UPDATE sessions SET next = ?, title = ?, updated = ?, failed = '' WHERE sid = ?`, h.next, h.title, h.updated, h.sid); err != nil {
				return err
			}
			h.dirty = false
		}
		if err := t.exec(`INSERT OR REPLACE INTO meta(k, v) VALUES ('cursor', ?)`, string(t.cursor)); err != nil {
			return err
		}
	}
	if t.tx == nil {
		return nil
	}
	err := t.tx.Commit()
	t.tx, t.n = nil, 0
	if err != nil {
		t.sess = map[string]*indexed{}
	}
	return err
}

func (t *txn) rollback() {
	if t.tx != nil {
		t.tx.Rollback()
		t.tx = nil
	}
}

func (t *txn) drop(sid int64) error {
	if err := t.exec(`DELETE FROM docs WHERE sid = ?`, sid); err != nil {
		return err
	}
	return t.exec(`DELETE FROM sessions WHERE sid = ?`, sid)
}

// Rebuild empties the index and indexes the store again.
func (ix *Index) Rebuild(ctx context.Context, progress Progress) error {
	ix.mu.Lock()
	if ix.closed {
		ix.mu.Unlock()
		return ErrClosed
	}
	release, err := ix.lease(ctx)
	if err != nil {
		ix.mu.Unlock()
		return err
	}
	err = ix.empty(ctx)
	release()
	ix.mu.Unlock()
	if err != nil {
		return err
	}
	return ix.catchUp(ctx, time.Now(), progress)
}

// Run indexes in the background until ctx ends: it catches up, then
// again every interval (the store's new events and deletes), so that
// searches find the index fresh. It returns ctx's error, or the first
// error of a catch-up.
func (ix *Index) Run(ctx context.Context, interval time.Duration) error {
	for {
		if err := ix.catchUp(ctx, time.Now(), nil); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

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
// rebuilt.
const schemaVersion = "1"

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
	return ix, nil
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
	revision TEXT NOT NULL,
	inc TEXT NOT NULL,        -- the incarnation: the revision's part before its last '.'
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
CREATE VIRTUAL TABLE IF NOT EXISTS tri USING fts5(text, content='docs', content_rowid='rowid', tokenize='trigram remove_diacritics 1');
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
	INSERT INTO fts(rowid, text) VALUES (new.rowid, new.text);
	INSERT INTO tri(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
	INSERT INTO fts(fts, rowid, text) VALUES ('delete', old.rowid, old.text);
	INSERT INTO tri(tri, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
`

func openDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)")
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

// Progress is called as a catch-up goes: events indexed (read) so far and
// the events it has to read in all.
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

// indexed is what the index holds of a session.
type indexed struct {
	sid      int64
	created  int64
	next     uint64
	revision string
	inc      string
	failed   string
}

// incarnation is the part of a revision that names the incarnation
// (both backends write store.Revision: "r<uid>.<events>", as
// store.Copy reads it).
func incarnation(rev string) string {
	if i := strings.LastIndexByte(rev, '.'); i >= 0 {
		return rev[:i]
	}
	return rev
}

// batchEvents is how many events (read, indexed or not) one transaction
// of a catch-up covers:
// each transaction commits the events and the sessions' next seq
// together, so a process killed in a catch-up leaves every event indexed
// once or not at all.
const batchEvents = 2048

// pass is one catch-up over the store's sessions.
func (ix *Index) pass(ctx context.Context, progress Progress) error {
	snaps, err := ix.st.List(ctx)
	if err != nil {
		return err
	}
	have := map[string]indexed{}
	rows, err := ix.db.QueryContext(ctx, `SELECT sid, id, created, next, revision, inc, failed FROM sessions`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var s indexed
		if err := rows.Scan(&s.sid, &id, &s.created, &s.next, &s.revision, &s.inc, &s.failed); err != nil {
			rows.Close()
			return err
		}
		have[id] = s
	}
	if err := rows.Close(); err != nil {
		return err
	}
	tx := &txn{ix: ix, ctx: ctx}
	defer tx.rollback()
	// Deleted sessions, and sessions created again (a new incarnation).
	live := map[string]bool{}
	var todo []store.Snapshot
	var total uint64
	for _, s := range snaps {
		live[s.Header.ID] = true
		h, ok := have[s.Header.ID]
		if ok && (h.inc != incarnation(s.Revision) || h.created != s.Header.CreatedAt || s.EventCount < h.next) {
			if err := tx.drop(h.sid); err != nil {
				return err
			}
			delete(have, s.Header.ID)
			ok = false
		}
		if ok && h.revision == s.Revision && h.failed == "" {
			continue
		}
		todo = append(todo, s)
		from := s.InheritedEventCount
		if ok {
			from = max(from, h.next)
		}
		if s.EventCount > from {
			total += s.EventCount - from
		}
	}
	for id, h := range have {
		if !live[id] {
			if err := tx.drop(h.sid); err != nil {
				return err
			}
			delete(have, id)
		}
	}
	var done uint64
	for _, s := range todo {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, ok := have[s.Header.ID]
		if !ok {
			sid, err := tx.addSession(s)
			if err != nil {
				return err
			}
			h = indexed{sid: sid, created: s.Header.CreatedAt, next: s.InheritedEventCount, inc: incarnation(s.Revision)}
		}
		if err := ix.session(tx, s, h, &done, total, progress); err != nil {
			return err
		}
	}
	return tx.commit()
}

// session indexes s's events from h.next to its end as listed.
func (ix *Index) session(tx *txn, s store.Snapshot, h indexed, done *uint64, total uint64, progress Progress) error {
	next := max(h.next, s.InheritedEventCount)
	var failed error
	if s.EventCount > next {
		hd, err := ix.st.Open(tx.ctx, s.Header.ID, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			return tx.drop(h.sid) // deleted since listed
		}
		if err != nil {
			failed = err
		} else {
			for e, err := range hd.Events(tx.ctx, int(next)) {
				if err != nil {
					failed = err
					break
				}
				if e.Seq >= s.EventCount {
					break
				}
				if err := tx.event(h.sid, e, ix.x); err != nil {
					hd.Close()
					return err
				}
				next = e.Seq + 1
				*done++
				tx.n++
				if err := tx.maybeCommit(h.sid, next); err != nil {
					hd.Close()
					return err
				}
				if progress != nil && *done%256 == 0 {
					progress(*done, total)
				}
			}
			hd.Close()
			if errors.Is(failed, store.ErrSessionNotFound) {
				return tx.drop(h.sid)
			}
			if failed != nil && tx.ctx.Err() != nil {
				return tx.ctx.Err()
			}
		}
	}
	why := ""
	rev := s.Revision
	if failed != nil {
		why = failed.Error()
		rev = ""
	}
	if progress != nil {
		progress(*done, total)
	}
	return tx.exec(`UPDATE sessions SET next = ?, revision = ?, failed = ?, title = ?, updated = ?, cwd = ? WHERE sid = ?`,
		next, rev, why, s.Title, s.UpdatedAt, s.Header.Cwd, h.sid)
}

// txn is a catch-up's current transaction, committed every batchEvents
// events.
type txn struct {
	ix   *Index
	ctx  context.Context
	tx   *sql.Tx
	n    int
	ins  *sql.Stmt
	next *sql.Stmt
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
	if t.ins, err = tx.PrepareContext(t.ctx, `INSERT INTO docs(sid, seq, type, role, time, text) VALUES (?, ?, ?, ?, ?, ?)`); err != nil {
		return err
	}
	t.next, err = tx.PrepareContext(t.ctx, `UPDATE sessions SET next = ? WHERE sid = ?`)
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
	_, err := t.ins.ExecContext(t.ctx, sid, e.Seq, e.Type, d.Role, e.Time, d.Text)
	return err
}

// maybeCommit commits once a batch is full, with the session's next seq.
func (t *txn) maybeCommit(sid int64, next uint64) error {
	if t.n < batchEvents {
		return nil
	}
	if _, err := t.next.ExecContext(t.ctx, next, sid); err != nil {
		return err
	}
	return t.commit()
}

func (t *txn) commit() error {
	if t.tx == nil {
		return nil
	}
	err := t.tx.Commit()
	t.tx, t.n = nil, 0
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

func (t *txn) addSession(s store.Snapshot) (int64, error) {
	if err := t.begin(); err != nil {
		return 0, err
	}
	r, err := t.tx.ExecContext(t.ctx, `INSERT INTO sessions(id, created, cwd, title, updated, parent, inherited, next, revision, inc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?)`,
		s.Header.ID, s.Header.CreatedAt, s.Header.Cwd, s.Title, s.UpdatedAt, s.Header.ParentSession, s.InheritedEventCount, s.InheritedEventCount, incarnation(s.Revision))
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
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
	_, err = ix.db.ExecContext(ctx, `DELETE FROM docs; DELETE FROM sessions; DELETE FROM meta WHERE k = 'caughtUp';
		INSERT INTO fts(fts) VALUES ('delete-all'); INSERT INTO tri(tri) VALUES ('delete-all');`)
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

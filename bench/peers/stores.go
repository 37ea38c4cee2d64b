package peers

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// All returns every peer, seglog first.
func All() []Peer {
	return []Peer{
		{Name: "seglog", Note: "engine defaults; Append + Flush; concurrent flushes share one fdatasync", Open: openSeglog},
		{Name: "raw", Note: "one file, write + fdatasync of the JSON lines (the physical limit)", Open: openRaw, Serial: true},
		{Name: "raw-group", Note: "one file; the JSON lines of concurrent appends written together, one write + fdatasync per group (the group-commit floor: no framing, checksum, compression or index)", Open: openRawGroup},
		{Name: "jsonl", Note: "a JSON-lines file per session, write + fdatasync per batch (the reference's design)", Open: openJSONL(false)},
		{Name: "jsonl-zstd", Note: "as jsonl, each batch one zstd frame", Open: openJSONL(true)},
		{Name: "sqlite", Note: "modernc.org/sqlite, WAL, synchronous=FULL, a row per event, a transaction per batch, one connection", Open: openSQLite, Serial: true},
		{Name: "bbolt", Note: "a transaction per batch; durable concurrent appends through DB.Batch (MaxBatchSize = writers)", Open: openBolt},
		{Name: "pebble", Note: "a batch per append committed with pebble.Sync (its commit pipeline groups syncs)", Open: openPebble},
		{Name: "raft-wal", Note: "one log, StoreLogs per batch (always fsynced), one writer", Open: openRaftWAL, Serial: true},
	}
}

func marshalLines(evs []event.Event) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range evs {
		enc.Encode(&evs[i]) // Encode appends '\n'; Event has only plain fields
	}
	return b.Bytes()
}

func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// --- seglog

type seglogStore struct {
	db *engine.DB
	hs []*engine.Handle
}

func openSeglog(dir string, sessions int) (Store, error) {
	db, err := engine.Open(dir, nil)
	if err != nil {
		return nil, err
	}
	s := &seglogStore{db: db}
	for i := range sessions {
		h, err := db.Create(context.Background(), store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1})
		if err != nil {
			db.Close()
			return nil, err
		}
		s.hs = append(s.hs, h)
	}
	return s, nil
}

func (s *seglogStore) Append(i int, evs []event.Event, sync bool) error {
	ctx := context.Background()
	if err := s.hs[i].Append(ctx, evs...); err != nil {
		return err
	}
	if sync {
		return s.hs[i].Flush(ctx)
	}
	return nil
}

func (s *seglogStore) Sync() error { return s.db.Flush(context.Background()) }

func (s *seglogStore) Replay(i int) (int, int64, error) {
	evs, err := s.hs[i].Read(context.Background(), 0, -1)
	return len(evs), eventBytes(evs), err
}

func (s *seglogStore) Close() error { return s.db.Close() }

func eventBytes(evs []event.Event) int64 {
	var n int64
	for _, e := range evs {
		n += int64(len(e.Type) + len(e.Data) + len(e.SurfaceOp) + 8*len(e.SourceEventSeqs) + 16)
	}
	return n
}

// --- raw

type rawStore struct {
	f    *os.File
	path string
}

func openRaw(dir string, _ int) (Store, error) {
	p := filepath.Join(dir, "raw.log")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	return &rawStore{f: f, path: p}, err
}

func (r *rawStore) Append(_ int, evs []event.Event, sync bool) error {
	if _, err := r.f.Write(marshalLines(evs)); err != nil {
		return err
	}
	if sync {
		return fdatasync(r.f)
	}
	return nil
}
func (r *rawStore) Sync() error { return fdatasync(r.f) }
func (r *rawStore) Replay(int) (int, int64, error) {
	return replayLines(r.path, false)
}
func (r *rawStore) Close() error { return r.f.Close() }

// --- raw-group: the floor of group commit on this machine

// rawGroupStore is the least work a durable, group-committed log can do:
// appends copy their JSON lines into one buffer under a mutex; a durable
// append whose bytes are not yet written becomes the leader (if none is
// writing) and writes the whole buffer with one write and one fdatasync,
// while later appends gather the next group; the others wait for it. An
// engine doing the same with framing, checksums, compression and an
// index cannot go faster, so it bounds what S2 can reach here.
type rawGroupStore struct {
	f    *os.File
	path string
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	next uint64 // the group bytes appended now go into
	done uint64 // groups durable: group g is durable once done > g
	busy bool   // a leader is writing
	err  error
}

func openRawGroup(dir string, _ int) (Store, error) {
	p := filepath.Join(dir, "raw.log")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	g := &rawGroupStore{f: f, path: p}
	g.cond = sync.NewCond(&g.mu)
	return g, nil
}

func (g *rawGroupStore) Append(_ int, evs []event.Event, sync bool) error {
	b := marshalLines(evs)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.buf = append(g.buf, b...)
	if !sync {
		if len(g.buf) >= 1<<20 && !g.busy { // a bulk load: write as it goes
			_, err := g.f.Write(g.buf)
			g.buf = g.buf[:0]
			return err
		}
		return nil
	}
	return g.commit(g.next)
}

// commit returns once group mine is durable, leading the writes while
// no other goroutine does. g.mu is held.
func (g *rawGroupStore) commit(mine uint64) error {
	for g.done <= mine && g.err == nil {
		if g.busy {
			g.cond.Wait()
			continue
		}
		g.busy = true
		buf, group := g.buf, g.next
		g.buf, g.next = nil, g.next+1
		g.mu.Unlock()
		_, err := g.f.Write(buf)
		if err == nil {
			err = fdatasync(g.f)
		}
		g.mu.Lock()
		g.busy = false
		if err != nil {
			g.err = err
		}
		g.done = group + 1
		g.cond.Broadcast()
	}
	return g.err
}

func (g *rawGroupStore) Sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commit(g.next)
}

func (g *rawGroupStore) Replay(int) (int, int64, error) { return replayLines(g.path, false) }
func (g *rawGroupStore) Close() error                   { return g.f.Close() }

// replayLines reads a JSON-lines file (optionally a series of zstd frames)
// and decodes every event, as a reader of the log would.
func replayLines(path string, compressed bool) (int, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	if compressed {
		d, err := zstd.NewReader(nil)
		if err != nil {
			return 0, 0, err
		}
		defer d.Close()
		if b, err = d.DecodeAll(b, nil); err != nil {
			return 0, 0, err
		}
	}
	n, bytesOut := 0, int64(0)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return n, bytesOut, err
		}
		n++
		bytesOut += eventBytes([]event.Event{e})
	}
	return n, bytesOut, sc.Err()
}

// --- jsonl, a file per session

type jsonlStore struct {
	compress bool
	enc      *zstd.Encoder
	files    []*os.File
	mus      []sync.Mutex
	dir      string
}

func openJSONL(compress bool) func(string, int) (Store, error) {
	return func(dir string, sessions int) (Store, error) {
		s := &jsonlStore{compress: compress, dir: dir, mus: make([]sync.Mutex, sessions)}
		if compress {
			var err error
			if s.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest)); err != nil {
				return nil, err
			}
		}
		for i := range sessions {
			f, err := os.OpenFile(s.path(i), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return nil, err
			}
			s.files = append(s.files, f)
		}
		return s, nil
	}
}

func (s *jsonlStore) path(i int) string {
	if s.compress {
		return filepath.Join(s.dir, fmt.Sprintf("s%d.v3.jsonl.zstd", i))
	}
	return filepath.Join(s.dir, fmt.Sprintf("s%d.v3.jsonl", i))
}

func (s *jsonlStore) Append(i int, evs []event.Event, sync bool) error {
	s.mus[i].Lock()
	defer s.mus[i].Unlock()
	b := marshalLines(evs)
	if s.compress {
		b = s.enc.EncodeAll(b, nil)
	}
	if _, err := s.files[i].Write(b); err != nil {
		return err
	}
	if sync {
		return fdatasync(s.files[i])
	}
	return nil
}

func (s *jsonlStore) Sync() error {
	for _, f := range s.files {
		if err := fdatasync(f); err != nil {
			return err
		}
	}
	return nil
}

func (s *jsonlStore) Replay(i int) (int, int64, error) { return replayLines(s.path(i), s.compress) }

func (s *jsonlStore) Close() error {
	for _, f := range s.files {
		f.Close()
	}
	return nil
}

// --- sqlite

type sqliteStore struct{ db *sql.DB }

func openSQLite(dir string, _ int) (Store, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "events.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE events(session INTEGER, seq INTEGER, type TEXT, time INTEGER, data TEXT,
		source_event_seqs TEXT, surface_op TEXT, ignorable INTEGER, PRIMARY KEY(session, seq)) STRICT`)
	return &sqliteStore{db: db}, err
}

func (s *sqliteStore) Append(i int, evs []event.Event, sync bool) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	st, err := tx.Prepare(`INSERT INTO events VALUES(?,?,?,?,?,?,?,?)`)
	if err != nil {
		tx.Rollback()
		return err
	}
	for _, e := range evs {
		var src, op any
		if e.SourceEventSeqs != nil {
			b, _ := json.Marshal(e.SourceEventSeqs)
			src = string(b)
		}
		if e.SurfaceOp != nil {
			op = string(e.SurfaceOp)
		}
		if _, err := st.Exec(i, e.Seq, e.Type, e.Time, string(e.Data), src, op, e.Ignorable); err != nil {
			tx.Rollback()
			return err
		}
	}
	st.Close()
	return tx.Commit() // synchronous=FULL: durable at commit, sync or not
}

func (s *sqliteStore) Sync() error { return nil }

func (s *sqliteStore) Replay(i int) (int, int64, error) {
	rows, err := s.db.Query(`SELECT seq, type, time, data, source_event_seqs, surface_op, ignorable FROM events WHERE session = ? ORDER BY seq`, i)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	n, b := 0, int64(0)
	for rows.Next() {
		var e event.Event
		var data string
		var src, op sql.NullString
		if err := rows.Scan(&e.Seq, &e.Type, &e.Time, &data, &src, &op, &e.Ignorable); err != nil {
			return n, b, err
		}
		e.Data = json.RawMessage(data)
		if src.Valid {
			json.Unmarshal([]byte(src.String), &e.SourceEventSeqs)
		}
		if op.Valid {
			e.SurfaceOp = json.RawMessage(op.String)
		}
		n++
		b += eventBytes([]event.Event{e})
	}
	return n, b, rows.Err()
}

func (s *sqliteStore) Close() error { return s.db.Close() }

// --- bbolt

type boltStore struct{ db *bolt.DB }

var boltBucket = []byte("events")

func openBolt(dir string, sessions int) (Store, error) {
	db, err := bolt.Open(filepath.Join(dir, "events.db"), 0o644, nil)
	if err != nil {
		return nil, err
	}
	db.MaxBatchSize = max(sessions, 1)
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	return &boltStore{db: db}, err
}

func key(session int, seq uint64) []byte {
	var k [12]byte
	binary.BigEndian.PutUint32(k[:], uint32(session))
	binary.BigEndian.PutUint64(k[4:], seq)
	return k[:]
}

func (s *boltStore) Append(i int, evs []event.Event, sync bool) error {
	put := func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		for j := range evs {
			v, _ := json.Marshal(&evs[j])
			if err := b.Put(key(i, evs[j].Seq), v); err != nil {
				return err
			}
		}
		return nil
	}
	if !sync {
		s.db.NoSync = true
		defer func() { s.db.NoSync = false }()
		return s.db.Update(put)
	}
	return s.db.Batch(put) // groups concurrent callers' transactions
}

func (s *boltStore) Sync() error { return s.db.Sync() }

func (s *boltStore) Replay(i int) (int, int64, error) {
	n, bytesOut := 0, int64(0)
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		prefix := key(i, 0)[:4]
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e event.Event
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			n++
			bytesOut += eventBytes([]event.Event{e})
		}
		return nil
	})
	return n, bytesOut, err
}

func (s *boltStore) Close() error { return s.db.Close() }

// --- pebble

type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string, _ int) (Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{})
	return &pebbleStore{db: db}, err
}

func (s *pebbleStore) Append(i int, evs []event.Event, sync bool) error {
	b := s.db.NewBatch()
	for j := range evs {
		v, _ := json.Marshal(&evs[j])
		if err := b.Set(key(i, evs[j].Seq), v, nil); err != nil {
			return err
		}
	}
	if sync {
		return b.Commit(pebble.Sync)
	}
	return b.Commit(pebble.NoSync)
}

func (s *pebbleStore) Sync() error { return s.db.LogData(nil, pebble.Sync) }

func (s *pebbleStore) Replay(i int) (int, int64, error) {
	lower := key(i, 0)
	upper := key(i+1, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	n, b := 0, int64(0)
	for it.First(); it.Valid(); it.Next() {
		var e event.Event
		if err := json.Unmarshal(it.Value(), &e); err != nil {
			return n, b, err
		}
		n++
		b += eventBytes([]event.Event{e})
	}
	return n, b, nil
}

func (s *pebbleStore) Close() error { return s.db.Close() }

// --- raft-wal

type raftWALStore struct {
	w    *raftwal.WAL
	next uint64
	idx  map[int][]uint64 // raft indexes per session, for replay
	mu   sync.Mutex
}

func openRaftWAL(dir string, _ int) (Store, error) {
	w, err := raftwal.Open(dir)
	return &raftWALStore{w: w, next: 1, idx: map[int][]uint64{}}, err
}

func (s *raftWALStore) Append(i int, evs []event.Event, _ bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logs := make([]*raft.Log, len(evs))
	for j := range evs {
		v, _ := json.Marshal(&evs[j])
		logs[j] = &raft.Log{Index: s.next, Term: 1, Type: raft.LogCommand, Data: v}
		s.idx[i] = append(s.idx[i], s.next)
		s.next++
	}
	return s.w.StoreLogs(logs) // raft-wal fsyncs every StoreLogs
}

func (s *raftWALStore) Sync() error { return nil }

func (s *raftWALStore) Replay(i int) (int, int64, error) {
	n, b := 0, int64(0)
	var l raft.Log
	for _, ix := range s.idx[i] {
		if err := s.w.GetLog(ix, &l); err != nil {
			return n, b, err
		}
		var e event.Event
		if err := json.Unmarshal(l.Data, &e); err != nil {
			return n, b, err
		}
		n++
		b += eventBytes([]event.Event{e})
	}
	return n, b, nil
}

func (s *raftWALStore) Close() error { return s.w.Close() }

package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// lease is a session's write lease: this process's (handle.Owners: one
// write handle per session in the process) and the session's byte in the
// locks file, which no other process can take while this one holds it and
// which the kernel releases when the process dies (docs/DESIGN.md, Many
// processes, Leases).
type lease struct {
	*handle.Lease
	db   *DB
	id   string
	once sync.Once
	// recorded: this lease wrote its holder record (leaseRecord)
	recorded bool
}

// acquire takes session id's lease, or fails with a *store.OwnedError
// (errors.Is(err, store.ErrAlreadyOwned)) naming its holder while a write
// handle of this process or of another holds it.
func (db *DB) acquire(id string) (*lease, error) {
	l, err := db.owners.Acquire(id)
	if err != nil {
		return nil, db.ownedError(id, true)
	}
	ok, err := db.shared.LockLease(id)
	if err != nil || !ok {
		l.Release()
		if err == nil {
			err = db.ownedError(id, false)
		}
		return nil, err
	}
	return &lease{Lease: l, db: db, id: id, recorded: db.recordLease(id)}, nil
}

// ownedKind is the kind of a refused acquire's SessionError: the
// *store.OwnedError naming the holder, or ErrAlreadyOwned (the lease's
// byte could not be asked for).
func ownedKind(err error) error {
	var o *store.OwnedError
	if errors.As(err, &o) {
		return o
	}
	return store.ErrAlreadyOwned
}

// Release gives the session up, to this process and to the others. It is
// idempotent.
func (l *lease) Release() {
	l.once.Do(func() {
		l.db.waitUnpinned(l.id)
		// The record before the byte: once the byte is free, the next
		// holder's record is the one there.
		if l.recorded {
			l.db.opts.FS.Remove(l.db.leaseRecordPath(l.id))
		}
		// The byte first: while this process's lease is still held, no
		// other handle of it can take the byte and lose it here.
		l.db.shared.UnlockLease(l.id)
		l.Lease.Release()
	})
}

// The holder records of the session leases (docs/DESIGN.md, Files): a
// process that takes a session's lease writes, beside the segments,
// lease-<key in 16 hex digits> (coord.LeaseKey: the lease byte's number),
// and removes it before it lets the byte go, so that a process refused the
// lease can say who holds it (store.OwnedError). The records are
// diagnostics: nothing is synced, a write that fails only leaves the holder
// unnamed (a warning on Options.Logger, once per DB), and the first process
// to open the store removes those its dead predecessors left.
const leaseRecordPrefix = "lease-"

// leaseRecord is the JSON of a holder record.
type leaseRecord struct {
	ID    string `json:"id"`    // the session (another ID of the same key may be the one refused)
	PID   int    `json:"pid"`   // the holding process
	Host  string `json:"host"`  // its machine (os.Hostname)
	Since int64  `json:"since"` // when it took the lease, milliseconds since the epoch
}

// hostname is os.Hostname, asked once ("" if it fails).
var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

func (db *DB) leaseRecordPath(id string) string {
	return filepath.Join(db.dir, fmt.Sprintf("%s%016x", leaseRecordPrefix, coord.LeaseKey(id)))
}

// recordLease writes the holder record of id's lease, which this process
// now holds, and reports whether it did.
func (db *DB) recordLease(id string) bool {
	b, err := json.Marshal(leaseRecord{ID: id, PID: os.Getpid(), Host: hostname(), Since: time.Now().UnixMilli()})
	if err != nil {
		return false
	}
	path := db.leaseRecordPath(id)
	tmp := path + ".tmp"
	err = func() error {
		f, err := db.opts.FS.Create(tmp)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(b, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = db.opts.FS.Rename(tmp, path)
		}
		return err
	}()
	if err != nil {
		db.opts.FS.Remove(tmp)
		if db.leaseWarned.CompareAndSwap(false, true) {
			db.opts.Logger.Warn("engine: the holder record of a session lease could not be written; a process refused the session will not be told who holds it", "file", path, "error", err)
		}
		return false
	}
	return true
}

// ownedError is the error of a lease refused: the holder as its record
// names it. inProcess: a write handle of this DB holds it.
func (db *DB) ownedError(id string, inProcess bool) *store.OwnedError {
	e := &store.OwnedError{}
	var rec leaseRecord
	if b, err := vfs.ReadFile(db.opts.FS, db.leaseRecordPath(id)); err == nil && json.Unmarshal(b, &rec) == nil {
		e.PID, e.Host = rec.PID, rec.Host
		if rec.Since > 0 {
			e.Since = time.UnixMilli(rec.Since)
		}
	}
	if inProcess && e.PID != os.Getpid() {
		// This process holds it, whatever the file says (its record not
		// written, or a dead process's left).
		e.PID, e.Host, e.Since = os.Getpid(), hostname(), time.Time{}
	}
	return e
}

// removeLeaseRecords removes the holder records in the store's directory:
// called by the first process to open it, when no process holds a lease,
// for those of processes that died holding one.
func (db *DB) removeLeaseRecords() {
	names, err := db.opts.FS.List(db.dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, leaseRecordPrefix) {
			db.opts.FS.Remove(filepath.Join(db.dir, n))
		}
	}
}

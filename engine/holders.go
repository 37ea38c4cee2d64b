package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The holder records of the session leases (docs/MULTIPROCESS.md, Files), so
// that a process refused a lease can say who holds it (store.OwnedError).
// Each writing DB keeps one file beside the segments for as long as it is
// open, lease-holders-<pid>-<n>: a header naming the process (its pid and
// host), then 16-byte slots, each the key of a lease it holds
// (coord.LeaseKey, with the top bit set while in use) and when it took it.
// Taking a lease writes its slot, letting it go clears it: one pwrite of
// 16 bytes each, on a file opened once, where a file per lease cost a
// create, a write and a rename at every write open (46 against 5 µs).
//
// The records are diagnostics: nothing is synced, a write that fails only
// leaves the holder unnamed (a warning on Options.Logger, once per DB). A
// process that dies leaves its file: a process refused a lease skips (and
// removes) the file of a process of this host that no longer runs, and the
// first process to open the store removes every file of those that died.
const (
	leaseRecordPrefix = "lease-" // every holder file; the build before wrote lease-<key> per lease
	holdersPrefix     = "lease-holders-"
	holdersMagic      = "seglogLH"
	holdersHead       = 512 // magic, pid, host length, host: the slots start here
	holderSlotSize    = 16  // key | holderUsed, since (ms since the epoch)
	holderUsed        = 1 << 63
	maxHolderHost     = holdersHead - 18
)

// holders is a DB's holder file.
type holders struct {
	mu   sync.Mutex
	f    vfs.File // nil: none (read-only, or it could not be made)
	path string
	free []int // cleared slots
	next int   // slots past it were never used
}

// holdersSeq numbers the holder files of this process's DBs.
var holdersSeq struct {
	sync.Mutex
	n int
}

// openHolders makes the writing DB's holder file. A failure is a warning:
// the DB's leases go unrecorded.
func (db *DB) openHolders() {
	holdersSeq.Lock()
	holdersSeq.n++
	n := holdersSeq.n
	holdersSeq.Unlock()
	path := filepath.Join(db.dir, fmt.Sprintf("%s%d-%d", holdersPrefix, os.Getpid(), n))
	head := make([]byte, holdersHead)
	copy(head, holdersMagic)
	binary.LittleEndian.PutUint64(head[8:], uint64(os.Getpid()))
	host := hostname()
	if len(host) > maxHolderHost {
		host = host[:maxHolderHost]
	}
	binary.LittleEndian.PutUint16(head[16:], uint16(len(host)))
	copy(head[18:], host)
	f, err := db.opts.FS.Create(path)
	if err == nil {
		if _, err = f.WriteAt(head, 0); err != nil {
			f.Close()
			db.opts.FS.Remove(path)
		}
	}
	if err != nil {
		db.warnHolders(path, err)
		return
	}
	db.holders.f, db.holders.path = f, path
}

func (db *DB) warnHolders(path string, err error) {
	if db.leaseWarned.CompareAndSwap(false, true) {
		db.opts.Logger.Warn("engine: the holder record of a session lease could not be written; a process refused the session will not be told who holds it", "file", path, "error", err)
	}
}

// record writes a slot naming the lease of key, which this process now
// holds, and returns it (-1 if it wrote none).
func (hs *holders) record(db *DB, key uint64) int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.f == nil {
		return -1
	}
	slot := hs.next
	if n := len(hs.free); n > 0 {
		slot, hs.free = hs.free[n-1], hs.free[:n-1]
	} else {
		hs.next++
	}
	var b [holderSlotSize]byte
	binary.LittleEndian.PutUint64(b[:], key|holderUsed)
	binary.LittleEndian.PutUint64(b[8:], uint64(time.Now().UnixMilli()))
	if _, err := hs.f.WriteAt(b[:], holderOff(slot)); err != nil {
		hs.free = append(hs.free, slot)
		db.warnHolders(hs.path, err)
		return -1
	}
	return slot
}

// clear clears slot (from record; -1: nothing), before its lease's byte
// is let go: once the byte is free, the next holder's slot is the one
// that names it.
func (hs *holders) clear(slot int) {
	if slot < 0 {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.f == nil {
		return
	}
	var b [holderSlotSize]byte
	hs.f.WriteAt(b[:], holderOff(slot)) // a slot not cleared names a holder that let go: diagnostics
	hs.free = append(hs.free, slot)
}

// close closes and removes the holder file: at the DB's Close, once no
// lease is held.
func (hs *holders) close(fsys vfs.FS) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.f == nil {
		return
	}
	hs.f.Close()
	fsys.Remove(hs.path)
	hs.f = nil
}

func holderOff(slot int) int64 { return holdersHead + int64(slot)*holderSlotSize }

// ownedError is the error of a lease refused: the holder as the holder
// files name it (of the processes that name the lease's key, the one that
// took it last). inProcess: a write handle of this DB holds it.
func (db *DB) ownedError(id string, inProcess bool) *store.OwnedError {
	e := &store.OwnedError{}
	want := coord.LeaseKey(id) | holderUsed
	names, _ := db.opts.FS.List(db.dir)
	var since uint64
	for _, n := range names {
		if !strings.HasPrefix(n, holdersPrefix) {
			continue
		}
		path := filepath.Join(db.dir, n)
		b, err := vfs.ReadFile(db.opts.FS, path)
		if err != nil || len(b) < holdersHead || string(b[:8]) != holdersMagic {
			continue
		}
		pid := int(binary.LittleEndian.Uint64(b[8:]))
		hl := int(binary.LittleEndian.Uint16(b[16:]))
		if hl > maxHolderHost {
			continue
		}
		host := string(b[18 : 18+hl])
		if host == hostname() && coord.ProcessGone(pid) {
			db.opts.FS.Remove(path) // a dead process's: it holds nothing
			continue
		}
		for off := holdersHead; off+holderSlotSize <= len(b); off += holderSlotSize {
			if binary.LittleEndian.Uint64(b[off:]) != want {
				continue
			}
			if t := binary.LittleEndian.Uint64(b[off+8:]); t >= since {
				since, e.PID, e.Host = t, pid, host
			}
		}
	}
	if e.PID != 0 && since > 0 {
		e.Since = time.UnixMilli(int64(since))
	}
	if inProcess && e.PID != os.Getpid() {
		// This process holds it, whatever the files say (its slot not
		// written, or a dead process's left).
		e.PID, e.Host, e.Since = os.Getpid(), hostname(), time.Time{}
	}
	return e
}

// hostname is os.Hostname, asked once ("" if it fails).
var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// removeLeaseRecords removes the holder files in the store's directory:
// called by the first process to open it, when no process holds a lease,
// for those of processes that died holding one (and the per-lease records
// of the build before).
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

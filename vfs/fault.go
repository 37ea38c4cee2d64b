package vfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrInjected is the error a FaultFS returns when a Rule has no Err of its own.
var ErrInjected = errors.New("vfs: injected fault")

// Op names one kind of file-system operation, for fault rules and counters.
type Op uint8

// The operations a FaultFS can fail. OpAny matches every one of them.
const (
	OpAny Op = iota
	OpCreate
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpRename
	OpRemove
	OpMkdir
	OpList
	OpLock
	OpSyncDir
	OpMap
	// OpAllocate is MapShared's making or growing of its file (create):
	// only a rule of this Op fails it, and OpAny neither counts it nor
	// fails it (nothing durable is there: a crash sweep over OpAny skips
	// it).
	OpAllocate
	numOps
)

var opNames = [...]string{"any", "create", "open", "read", "write", "sync", "truncate", "rename", "remove", "mkdir", "list", "lock", "syncdir", "mmap", "allocate"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", o)
}

// Rule says which operation fails and how.
type Rule struct {
	Op Op // the kind of operation; OpAny counts every operation
	// Nth is the 1-based count, among operations matching Op and Name, of
	// the one that fails. 0 means every matching operation fails.
	Nth int
	// Sticky makes every matching operation after the Nth fail too: the
	// device is gone, as after a power cut or a dead disk.
	Sticky bool
	// Name, if set, restricts the rule to files whose path contains it.
	Name string
	// Err is returned; nil means ErrInjected. Use syscall.ENOSPC for a full
	// disk.
	Err error
	// Short, for writes: the number of bytes that really reach the file
	// before the error (a short write). Negative means half of them. Zero
	// means none.
	Short int

	seen int // matching operations so far
}

// FaultFS wraps an FS and fails operations according to its rules.
// It is safe for concurrent use.
type FaultFS struct {
	inner FS

	mu      sync.Mutex
	rules   []*Rule
	counts  [numOps]int
	latency [numOps]time.Duration
}

// SetLatency makes every later operation of kind op take at least d (a slow
// device), so that tests can make concurrent operations overlap.
func (f *FaultFS) SetLatency(op Op, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency[op] = d
}

// NewFault wraps fs with the given rules.
func NewFault(fs FS, rules ...Rule) *FaultFS {
	f := &FaultFS{inner: fs}
	for _, r := range rules {
		f.Add(r)
	}
	return f
}

// Add installs another rule. Rules count only operations made after they
// were added.
func (f *FaultFS) Add(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &r)
}

// Clear removes every rule (the device is healthy again).
func (f *FaultFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Count returns how many operations of kind op were attempted; OpAny gives
// the total.
func (f *FaultFS) Count(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

// check counts one operation and returns the rule that fails it, if any.
func (f *FaultFS) check(op Op, name string) *Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[op]++
	if op == OpAllocate {
		return f.match(op, name, false)
	}
	f.counts[OpAny]++
	if d := f.latency[op]; d > 0 {
		f.mu.Unlock()
		time.Sleep(d)
		f.mu.Lock()
	}
	return f.match(op, name, true)
}

// match returns the rule that fails an operation op on name, if any,
// counting it in each rule it matches (anyOp: OpAny rules match it too).
// Called with f.mu held.
func (f *FaultFS) match(op Op, name string, anyOp bool) *Rule {
	var hit *Rule
	for _, r := range f.rules {
		if r.Op != op && (r.Op != OpAny || !anyOp) {
			continue
		}
		if r.Name != "" && !strings.Contains(name, r.Name) {
			continue
		}
		r.seen++
		if hit == nil && (r.Nth == 0 || r.seen == r.Nth || (r.Sticky && r.seen > r.Nth)) {
			hit = r
		}
	}
	return hit
}

func (r *Rule) err(op Op, name string) error {
	e := r.Err
	if e == nil {
		e = ErrInjected
	}
	return &os.PathError{Op: op.String(), Path: name, Err: e}
}

func (f *FaultFS) fail(op Op, name string) error {
	if r := f.check(op, name); r != nil {
		return r.err(op, name)
	}
	return nil
}

// Create implements FS.
func (f *FaultFS) Create(name string) (File, error) {
	if err := f.fail(OpCreate, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, f: file, name: name}, nil
}

// Open implements FS.
func (f *FaultFS) Open(name string) (File, error) {
	if err := f.fail(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, f: file, name: name}, nil
}

// OpenReadWrite implements FS.
func (f *FaultFS) OpenReadWrite(name string) (File, error) {
	if err := f.fail(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, f: file, name: name}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if err := f.fail(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// Rename implements FS.
func (f *FaultFS) Rename(oldname, newname string) error {
	if err := f.fail(OpRename, newname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := f.fail(OpMkdir, dir); err != nil {
		return err
	}
	return f.inner.MkdirAll(dir, perm)
}

// List implements FS.
func (f *FaultFS) List(dir string) ([]string, error) {
	if err := f.fail(OpList, dir); err != nil {
		return nil, err
	}
	return f.inner.List(dir)
}

// Lock implements FS.
func (f *FaultFS) Lock(name string) (FileLock, error) {
	if err := f.fail(OpLock, name); err != nil {
		return nil, err
	}
	return f.inner.Lock(name)
}

// LockShared implements FS.
func (f *FaultFS) LockShared(name string) (FileLock, error) {
	if err := f.fail(OpLock, name); err != nil {
		return nil, err
	}
	return f.inner.LockShared(name)
}

// OpenLocks implements FS.
func (f *FaultFS) OpenLocks(name string) (Locks, error) {
	if err := f.fail(OpLock, name); err != nil {
		return nil, err
	}
	return f.inner.OpenLocks(name)
}

// LockDir implements FS.
func (f *FaultFS) LockDir(dir string, exclusive bool) (FileLock, error) {
	if err := f.fail(OpLock, dir); err != nil {
		return nil, err
	}
	return f.inner.LockDir(dir, exclusive)
}

// MapShared implements FS. Only a rule of OpAllocate fails it, and only
// with create (it holds nothing durable, but making or growing its file
// takes room): as a full disk fails the OS's fallocate, the failed call
// leaves the file made (empty) if it was missing, and no larger.
func (f *FaultFS) MapShared(name string, size int, create bool) (*Shared, error) {
	if create {
		if r := f.check(OpAllocate, name); r != nil {
			if file, err := f.inner.OpenReadWrite(name); err == nil {
				file.Close()
			} else if file, err := f.inner.Create(name); err == nil {
				file.Close()
			}
			return nil, r.err(OpAllocate, name)
		}
	}
	return f.inner.MapShared(name, size, create)
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	if err := f.fail(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

type faultFile struct {
	fs   *FaultFS
	f    File
	name string
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.fail(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	r := f.fs.check(OpWrite, f.name)
	if r == nil {
		return f.f.WriteAt(p, off)
	}
	n := r.Short
	if n < 0 {
		n = len(p) / 2
	}
	n = min(n, len(p))
	if n > 0 {
		if m, err := f.f.WriteAt(p[:n], off); err != nil {
			return m, err
		}
	}
	return n, r.err(OpWrite, f.name)
}

func (f *faultFile) Sync() error {
	if err := f.fs.fail(OpSync, f.name); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.fail(OpTruncate, f.name); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *faultFile) Size() (int64, error) { return f.f.Size() }
func (f *faultFile) Close() error         { return f.f.Close() }

func (f *faultFile) Map(size int64) (*Mapping, error) {
	if err := f.fs.fail(OpMap, f.name); err != nil {
		return nil, err
	}
	return f.f.Map(size)
}

package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MemFS is an in-memory FS that records what has been made durable, so that
// tests can ask what a power cut would leave behind (CrashClone).
//
// The durability model, which is what seglog assumes of a real disk:
//   - File.Sync makes every byte and the size of that file durable.
//   - Bytes written since the file's last Sync are volatile. After a crash
//     each unsynced write (and truncate) independently survives whole,
//     survives as a prefix (a torn write), or is lost; the last surviving
//     write of a file may also be garbled.
//   - Create, Rename, Remove and MkdirAll are volatile until SyncDir of the
//     directories they touch. After a crash every synced directory operation
//     survives, and of the unsynced ones a prefix (in the order they were
//     made) survives.
//
// The zero value is not usable; call NewMem.
type MemFS struct {
	mu    sync.Mutex
	nodes map[string]*memNode // current namespace, clean absolute-ish paths
	base  map[string]*memNode // namespace at creation (or at the crash it was cloned from)
	ops   []*dirOp            // namespace operations since base, in order
	// inos numbers the nodes (FileID.Ino)
	inos uint64
	cond *sync.Cond // on mu: a byte-range lock was released
}

// memFlock is a whole-file lock: one exclusive holder or shared ones.
type memFlock struct {
	exclusive bool
	shared    int
}

// memRange is the lock on one byte: the holders and whether exclusive.
type memRange struct {
	exclusive bool
	holders   map[*memLocks]bool
}

type memNode struct {
	dir     bool
	ino     uint64
	data    []byte   // current contents
	synced  []byte   // contents as of the last Sync
	pending []fileOp // writes and truncates since the last Sync, in order
	// size is len(data), for the shared mappings of the file, which read
	// it without the lock
	size atomic.Int64
	// The locks and the shared mapping are the file's, not its name's: a
	// file created in place of a removed one starts without them, as on
	// the OS. A crash clone starts without any.
	flock  *memFlock
	ranges map[int64]*memRange
	shared []byte
}

// newNode returns a new node, numbered. Called with m.mu held (or before
// m is shared).
func (m *MemFS) newNode(dir bool) *memNode {
	m.inos++
	return &memNode{dir: dir, ino: m.inos}
}

// setData replaces the node's contents.
func (n *memNode) setData(b []byte) {
	n.data = b
	n.size.Store(int64(len(b)))
}

type fileOp struct {
	off      int64
	data     []byte // nil for a truncate
	truncate bool
	size     int64 // for a truncate
}

type dirOpKind uint8

const (
	opMkdir dirOpKind = iota + 1
	opCreate
	opRename
	opRemove
)

type dirOp struct {
	kind     dirOpKind
	name     string
	newname  string // rename only
	node     *memNode
	unsynced []string // directories whose SyncDir the op still waits for
}

// NewMem returns an empty in-memory file system whose root directory exists.
func NewMem() *MemFS {
	m := &MemFS{}
	root := m.newNode(true)
	m.nodes = map[string]*memNode{"/": root}
	m.base = map[string]*memNode{"/": root}
	return m
}

func clean(name string) string {
	p := path.Clean("/" + name)
	return p
}

func (m *MemFS) parentExists(p string) bool {
	n := m.nodes[path.Dir(p)]
	return n != nil && n.dir
}

func (m *MemFS) record(op *dirOp) {
	dirs := []string{path.Dir(op.name)}
	if op.kind == opRename && path.Dir(op.newname) != dirs[0] {
		dirs = append(dirs, path.Dir(op.newname))
	}
	op.unsynced = dirs
	m.ops = append(m.ops, op)
}

// Create implements FS.
func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if !m.parentExists(p) {
		return nil, &os.PathError{Op: "create", Path: name, Err: fs.ErrNotExist}
	}
	if m.nodes[p] != nil {
		return nil, &os.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	n := m.newNode(false)
	m.nodes[p] = n
	m.record(&dirOp{kind: opCreate, name: p, node: n})
	return &memFile{fs: m, node: n, name: name}, nil
}

func (m *MemFS) open(name string, readOnly bool) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[clean(name)]
	if n == nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir && !readOnly {
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("is a directory")}
	}
	return &memFile{fs: m, node: n, name: name, readOnly: readOnly}, nil
}

// Open implements FS.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, true) }

// OpenReadWrite implements FS.
func (m *MemFS) OpenReadWrite(name string) (File, error) { return m.open(name, false) }

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	n := m.nodes[p]
	if n == nil {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if n.dir && len(m.children(p)) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: fmt.Errorf("directory not empty")}
	}
	delete(m.nodes, p)
	m.record(&dirOp{kind: opRemove, name: p, node: n})
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	op, np := clean(oldname), clean(newname)
	n := m.nodes[op]
	if n == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if !m.parentExists(np) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if n.dir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fmt.Errorf("renaming directories is not supported")}
	}
	if old := m.nodes[np]; old != nil && old.dir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fmt.Errorf("target is a directory")}
	}
	if op == np {
		return nil
	}
	delete(m.nodes, op)
	m.nodes[np] = n
	m.record(&dirOp{kind: opRename, name: op, newname: np, node: n})
	return nil
}

// MkdirAll implements FS.
func (m *MemFS) MkdirAll(dir string, _ os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(dir)
	var missing []string
	for q := p; q != "/"; q = path.Dir(q) {
		if n := m.nodes[q]; n != nil {
			if !n.dir {
				return &os.PathError{Op: "mkdir", Path: q, Err: fmt.Errorf("not a directory")}
			}
			break
		}
		missing = append(missing, q)
	}
	for _, q := range slices.Backward(missing) {
		n := m.newNode(true)
		m.nodes[q] = n
		m.record(&dirOp{kind: opMkdir, name: q, node: n})
	}
	return nil
}

func (m *MemFS) children(dir string) []string {
	var out []string
	for p := range m.nodes {
		if p != "/" && path.Dir(p) == dir {
			out = append(out, path.Base(p))
		}
	}
	slices.Sort(out)
	return out
}

// List implements FS.
func (m *MemFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(dir)
	if n := m.nodes[p]; n == nil || !n.dir {
		return nil, &os.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	return m.children(p), nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(dir)
	if n := m.nodes[p]; n == nil || !n.dir {
		return &os.PathError{Op: "syncdir", Path: dir, Err: fs.ErrNotExist}
	}
	for _, op := range m.ops {
		op.unsynced = slices.DeleteFunc(op.unsynced, func(d string) bool { return d == p })
	}
	return nil
}

// Lock implements FS. Locks are held per MemFS; a crash clone starts with none.
func (m *MemFS) Lock(name string) (FileLock, error) { return m.flock(name, true) }

// LockShared implements FS.
func (m *MemFS) LockShared(name string) (FileLock, error) { return m.flock(name, false) }

func (m *MemFS) flock(name string, exclusive bool) (FileLock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if err := m.ensureFile(p, "lock", name); err != nil {
		return nil, err
	}
	return m.flockNode(m.nodes[p], name, exclusive, os.Getpid())
}

// LockDir implements FS.
func (m *MemFS) LockDir(dir string, exclusive bool) (FileLock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[clean(dir)]
	if n == nil || !n.dir {
		return nil, &os.PathError{Op: "flock", Path: dir, Err: fs.ErrNotExist}
	}
	return m.flockNode(n, dir, exclusive, 0)
}

// flockNode takes node n's whole-file lock for a holder; a conflict is a
// *LockError naming pid. Called with m.mu held.
func (m *MemFS) flockNode(n *memNode, name string, exclusive bool, pid int) (FileLock, error) {
	l := n.flock
	if l != nil && (l.exclusive || exclusive) {
		return nil, &LockError{Path: name, PID: pid}
	}
	if l == nil {
		l = &memFlock{}
		n.flock = l
	}
	h := &memFlockHolder{m: m, n: n, l: l, exclusive: exclusive}
	if exclusive {
		l.exclusive = true
	} else {
		l.shared++
	}
	return h, nil
}

type memFlockHolder struct {
	m         *MemFS
	n         *memNode
	l         *memFlock
	exclusive bool
	closed    bool
}

func (h *memFlockHolder) Share() error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if h.exclusive && !h.closed {
		h.exclusive, h.l.exclusive = false, false
		h.l.shared++
	}
	return nil
}

func (h *memFlockHolder) ID() (FileID, error) { return FileID{Ino: h.n.ino}, nil }

func (h *memFlockHolder) Close() error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.exclusive {
		h.l.exclusive = false
	} else {
		h.l.shared--
	}
	if !h.l.exclusive && h.l.shared == 0 && h.n.flock == h.l {
		h.n.flock = nil
	}
	return nil
}

// OpenLocks implements FS: every call is a holder of its own, as an open
// file description is.
func (m *MemFS) OpenLocks(name string) (Locks, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if err := m.ensureFile(p, "open", name); err != nil {
		return nil, err
	}
	n := m.nodes[p]
	if n.ranges == nil {
		n.ranges = map[int64]*memRange{}
	}
	if m.cond == nil {
		m.cond = sync.NewCond(&m.mu)
	}
	return &memLocks{m: m, n: n, bytes: n.ranges}, nil
}

// memLocks is one holder of byte-range locks in a MemFS.
type memLocks struct {
	m     *MemFS
	n     *memNode
	bytes map[int64]*memRange
}

func (l *memLocks) ID() (FileID, error) { return FileID{Ino: l.n.ino}, nil }

// take takes byte off if no other holder conflicts; called with m.mu held.
func (l *memLocks) take(off int64, exclusive bool) bool {
	r := l.bytes[off]
	if r == nil {
		l.bytes[off] = &memRange{exclusive: exclusive, holders: map[*memLocks]bool{l: true}}
		return true
	}
	others := len(r.holders)
	if r.holders[l] {
		others--
	}
	if others > 0 && (exclusive || r.exclusive) {
		return false
	}
	r.holders[l] = true
	r.exclusive = exclusive
	return true
}

func (l *memLocks) TryLock(off int64, exclusive bool) (bool, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return l.take(off, exclusive), nil
}

func (l *memLocks) HeldByOther(off int64) (bool, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	r := l.bytes[off]
	if r == nil || !r.exclusive {
		return false, nil
	}
	others := len(r.holders)
	if r.holders[l] {
		others--
	}
	return others > 0, nil
}

func (l *memLocks) Lock(off int64, exclusive bool) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for !l.take(off, exclusive) {
		l.m.cond.Wait()
	}
	return nil
}

// release drops the holder's lock on off; called with m.mu held.
func (l *memLocks) release(off int64) {
	r := l.bytes[off]
	if r == nil || !r.holders[l] {
		return
	}
	delete(r.holders, l)
	if len(r.holders) == 0 {
		delete(l.bytes, off)
	}
	l.m.cond.Broadcast()
}

func (l *memLocks) Unlock(off int64) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.release(off)
	return nil
}

func (l *memLocks) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for off, r := range l.bytes {
		if r.holders[l] {
			l.release(off)
		}
	}
	return nil
}

// MapShared implements FS: every mapping of a file in this MemFS shares
// one buffer (the file's own contents are not involved: only its size,
// which create grows to size, as on the OS). An access through it once
// the file is shorter than the accessed field is lost, as one past the
// end of a real file faults. A crash clone starts with none.
func (m *MemFS) MapShared(name string, size int, create bool) (*Shared, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := clean(name)
	if create {
		if err := m.ensureFile(p, "open", name); err != nil {
			return nil, err
		}
	}
	n := m.nodes[p]
	switch {
	case n == nil:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case n.dir:
		return nil, &os.PathError{Op: "mmap", Path: name, Err: fmt.Errorf("is a directory")}
	case len(n.data) < size && !create:
		return nil, &os.PathError{Op: "mmap", Path: name, Err: fmt.Errorf("%w: %d bytes, not %d", ErrShortFile, len(n.data), size)}
	case len(n.data) < size:
		n.setData(resize(n.data, int64(size)))
		n.pending = append(n.pending, fileOp{truncate: true, size: int64(size)})
	}
	b := n.shared
	switch {
	case b == nil:
		// 8-byte aligned, as a page is, for atomic access to its fields.
		words := make([]uint64, (size+7)/8)
		b = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
		n.shared = b
	case len(b) < size:
		return nil, errors.New("vfs: MapShared: a MemFS mapping cannot grow")
	}
	return &Shared{
		data:  b[:size],
		size:  func() (int64, error) { return n.size.Load(), nil },
		id:    FileID{Ino: n.ino},
		limit: &n.size,
	}, nil
}

// ensureFile creates the empty file p (named name in errors, for op) if
// it is missing, as O_CREATE does. Called with m.mu held.
func (m *MemFS) ensureFile(p, op, name string) error {
	if m.nodes[p] != nil {
		return nil
	}
	if !m.parentExists(p) {
		return &os.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	n := m.newNode(false)
	m.nodes[p] = n
	m.record(&dirOp{kind: opCreate, name: p, node: n})
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// CrashConfig chooses what a simulated power cut keeps of unsynced state.
type CrashConfig struct {
	// Rand drives every choice. If nil, nothing unsynced survives: every
	// unsynced write and directory operation is lost (the page cache is
	// dropped whole), unless KeepAll is set.
	Rand *rand.Rand
	// KeepAll keeps every unsynced write and directory operation (the
	// cache reached the disk just before the cut). It ignores Rand.
	KeepAll bool
	// Garble lets the last surviving unsynced write of each file have part
	// of its surviving bytes replaced by random bytes. Needs Rand.
	Garble bool
}

// CrashClone returns the file system as a power cut at this moment could
// leave it, chosen by cfg. The receiver is not changed and may go on being
// used; the clone shares no memory with it, holds no locks, and treats all
// of its contents as synced.
func (m *MemFS) CrashClone(cfg CrashConfig) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	keepOp := func() bool { return cfg.KeepAll || (cfg.Rand != nil && cfg.Rand.IntN(2) == 0) }

	// Namespace: replay synced operations always, unsynced ones up to the
	// first that is dropped.
	ns := make(map[string]*memNode, len(m.base))
	for p, n := range m.base {
		ns[p] = n
	}
	cut := false
	for _, op := range m.ops {
		if len(op.unsynced) > 0 {
			if cut || !keepOp() {
				cut = true
				continue
			}
		}
		parent := ns[path.Dir(op.name)]
		switch op.kind {
		case opMkdir, opCreate:
			if parent != nil && parent.dir {
				ns[op.name] = op.node
			}
		case opRemove:
			if ns[op.name] == op.node {
				delete(ns, op.name)
			}
		case opRename:
			np := ns[path.Dir(op.newname)]
			if ns[op.name] == op.node && np != nil && np.dir {
				delete(ns, op.name)
				ns[op.newname] = op.node
			}
		}
	}
	// Drop entries whose parent directory did not survive.
	for changed := true; changed; {
		changed = false
		for p := range ns {
			if p == "/" {
				continue
			}
			if d := ns[path.Dir(p)]; d == nil || !d.dir {
				delete(ns, p)
				changed = true
			}
		}
	}

	clones := map[*memNode]*memNode{}
	out := &MemFS{nodes: map[string]*memNode{}, base: map[string]*memNode{}}
	for p, n := range ns {
		c := clones[n]
		if c == nil {
			c = out.newNode(n.dir)
			if !n.dir {
				c.setData(crashContents(n, cfg))
				c.synced = slices.Clone(c.data)
			}
			clones[n] = c
		}
		out.nodes[p] = c
		out.base[p] = c
	}
	return out
}

// crashContents applies to a file's synced bytes what survives of its
// unsynced writes.
func crashContents(n *memNode, cfg CrashConfig) []byte {
	data := slices.Clone(n.synced)
	lastKept, lastOff, lastLen := -1, int64(0), 0
	for i, op := range n.pending {
		if op.truncate {
			if cfg.KeepAll || (cfg.Rand != nil && cfg.Rand.IntN(2) == 0) {
				data = resize(data, op.size)
			}
			continue
		}
		keep := 0
		switch {
		case cfg.KeepAll:
			keep = len(op.data)
		case cfg.Rand != nil:
			switch cfg.Rand.IntN(3) {
			case 0: // lost
			case 1:
				keep = len(op.data)
			default:
				keep = cfg.Rand.IntN(len(op.data) + 1)
			}
		}
		if keep == 0 {
			continue
		}
		data = writeAt(data, op.data[:keep], op.off)
		lastKept, lastOff, lastLen = i, op.off, keep
	}
	if cfg.Garble && cfg.Rand != nil && lastKept >= 0 && cfg.Rand.IntN(2) == 0 {
		from := cfg.Rand.IntN(lastLen)
		// (a later truncation kept may have cut it short)
		for i := from; i < lastLen && lastOff+int64(i) < int64(len(data)); i++ {
			data[lastOff+int64(i)] = byte(cfg.Rand.Uint32())
		}
	}
	return data
}

func resize(b []byte, size int64) []byte {
	if size <= int64(len(b)) {
		return b[:size]
	}
	return append(b, make([]byte, size-int64(len(b)))...)
}

func writeAt(b, p []byte, off int64) []byte {
	if end := off + int64(len(p)); end > int64(len(b)) {
		b = resize(b, end)
	}
	copy(b[off:], p)
	return b
}

// UnsyncedWrites reports how many writes and truncates across all files are
// not yet durable. Tests use it to tell whether a cut can lose anything.
func (m *MemFS) UnsyncedWrites() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]bool{}
	total := 0
	for _, n := range m.nodes {
		if !seen[n] {
			seen[n] = true
			total += len(n.pending)
		}
	}
	return total
}

// String lists the files and their sizes, for test failure messages.
func (m *MemFS) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	names := make([]string, 0, len(m.nodes))
	for p := range m.nodes {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		n := m.nodes[p]
		if n.dir {
			fmt.Fprintf(&b, "%s/\n", p)
		} else {
			fmt.Fprintf(&b, "%s %d bytes (%d unsynced ops)\n", p, len(n.data), len(n.pending))
		}
	}
	return b.String()
}

type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	readOnly bool
	closed   bool
}

func (f *memFile) check(op string, write bool) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	if write && f.readOnly {
		return &os.PathError{Op: op, Path: f.name, Err: fmt.Errorf("file opened read-only")}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: fmt.Errorf("negative offset")}
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: fmt.Errorf("negative offset")}
	}
	f.node.setData(writeAt(f.node.data, p, off))
	f.node.pending = append(f.node.pending, fileOp{off: off, data: slices.Clone(p)})
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: fmt.Errorf("negative size")}
	}
	if size < int64(len(f.node.data)) {
		// Shrink in place: a Mapping shares the backing array, and sees
		// the file as it is (zeros past its end, where a real mapping
		// would fault), and what a later write puts there. (A copy would
		// leave earlier Mappings on stale bytes that a regrowth to their
		// size hides from Reader.Remap.)
		clear(f.node.data[size:])
		f.node.setData(f.node.data[:size])
		f.node.cutShared(size)
	} else {
		f.node.setData(resize(f.node.data, size))
	}
	f.node.pending = append(f.node.pending, fileOp{truncate: true, size: size})
	return nil
}

// cutShared zeroes the node's shared mapping from size on, as the OS
// zeroes the rest of a mapped file's page past a cut and drops the pages
// after it (which read as zeros if the file grows again). Word by word,
// atomically: other goroutines may be reading them.
func (n *memNode) cutShared(size int64) {
	for off := size &^ 7; off+8 <= int64(len(n.shared)); off += 8 {
		w := (*atomic.Uint64)(unsafe.Pointer(&n.shared[off]))
		keep := uint64(0)
		if off < size {
			keep = 1<<(8*(size-off)) - 1 // (little-endian: the low bytes are before the cut)
		}
		for {
			v := w.Load()
			if w.CompareAndSwap(v, v&keep) {
				break
			}
		}
	}
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync", false); err != nil {
		return err
	}
	f.node.synced = slices.Clone(f.node.data)
	f.node.pending = nil
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat", false); err != nil {
		return 0, err
	}
	return int64(len(f.node.data)), nil
}

// Map returns a view that shares the file's current backing array: writes
// in place within size are visible through it, as with a shared mmap.
func (f *memFile) Map(size int64) (*Mapping, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("mmap", false); err != nil {
		return nil, err
	}
	if size < 0 || size > int64(len(f.node.data)) {
		return nil, &os.PathError{Op: "mmap", Path: f.name, Err: fmt.Errorf("size %d outside file of %d bytes", size, len(f.node.data))}
	}
	return &Mapping{data: f.node.data[:size:size]}, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/seglog/seglog/internal/base"
)

// This file checks an index file on its raw bytes, before bbolt reads any
// of it. bbolt trusts its pages: a page ID out of range makes it read
// outside its mapping (a fault), a damaged page makes it panic, and the
// page walk of a read-write open (the free list is not stored) runs in a
// goroutine of bbolt's own where neither can be recovered. So Open walks
// the whole file first, with every access bounds-checked, and hands it to
// bbolt only if every page bbolt can reach is sound.

// bbolt's on-disk format (go.etcd.io/bbolt/internal/common), in the host's
// byte order as bbolt writes it.
const (
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	elemSize       = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	bucketHeader   = 16 // root pgid u64, sequence u64; an inline bucket's page follows
	metaEnd        = pageHeaderSize + 64

	boltMagic   = 0xED0CDAED
	boltVersion = 2

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10
	leafIsBucket = 0x01

	noFreelist = ^uint64(0)

	// maxDepth bounds the nesting of tree levels and buckets: bbolt keeps
	// at least two keys per branch page, so a real tree is far shallower;
	// a deeper one is a cycle or damage.
	maxDepth = 64
)

var ne = binary.NativeEndian

type boltMeta struct {
	valid                     bool
	pageSize                  uint32
	root, freelist, hwm, txid uint64
}

// readMeta decodes the meta page at the start of b, as bbolt's
// Meta.Validate accepts it: magic, version and checksum.
func readMeta(b []byte) boltMeta {
	if len(b) < metaEnd {
		return boltMeta{}
	}
	m := b[pageHeaderSize:metaEnd]
	if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion {
		return boltMeta{}
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != ne.Uint64(m[56:]) {
		return boltMeta{}
	}
	return boltMeta{valid: true, pageSize: ne.Uint32(m[8:]), root: ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]), hwm: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:])}
}

// bucket kinds of this package's layout.
type bucketKind int

const (
	kindRoot bucketKind = iota
	kindMeta
	kindSessions
	kindFrames
	kindForks
	kindRetired
	kindForeign
)

// fileCheck walks one index file.
type fileCheck struct {
	path string
	data []byte // the whole file
	psz  uint64
	hwm  uint64
	seen []uint64 // bitset: pages reached (or holding the free list)
	free []uint64 // bitset: pages the stored free list names

	buckets   [kindForeign]bool
	version   []byte
	schemaErr error // the first record that does not fit the layout
	sessions  int
	frames    int

	// onRecord, if set, sees every key/value pair of this package's
	// buckets (tests use it to tell stored bytes from structure).
	onRecord func(kind bucketKind, k, v []byte)
	// onSession, if set, sees every well-formed session record
	// (Options.Sessions); user is set while it runs (see protect).
	onSession func(id []byte, s Session, header []byte)
	user      bool
}

// off returns the offset in the file of b, a slice of c.data.
func (c *fileCheck) off(b []byte) int64 { return int64(cap(c.data) - cap(b)) }

func (c *fileCheck) damage(off int64, format string, args ...any) error {
	return newDamage(c.path, off, fmt.Sprintf(format, args...), nil)
}

func bit(set []uint64, i uint64) bool { return set[i/64]&(1<<(i%64)) != 0 }
func setBit(set []uint64, i uint64)   { set[i/64] |= 1 << (i % 64) }

func (c *fileCheck) run() error {
	size := uint64(len(c.data))
	if size == 0 {
		return c.damage(-1, "empty file")
	}
	// The page size, as bbolt finds it: from the first meta page, else by
	// looking for the second one.
	m0 := readMeta(c.data)
	psz := uint64(m0.pageSize)
	if !m0.valid {
		for i := range 15 {
			pos := uint64(1024) << i
			if pos+1024 >= size {
				break
			}
			if m := readMeta(c.data[pos:]); m.valid {
				psz = uint64(m.pageSize)
				break
			}
		}
		if psz == 0 {
			return c.damage(0, "no valid bbolt meta page (not a bbolt file, or both meta pages damaged)")
		}
	}
	if psz < 1024 || psz > 1<<24 || psz&(psz-1) != 0 {
		return c.damage(0, "meta page gives page size %d", psz)
	}
	if size < 2*psz {
		return c.damage(-1, "file of %d bytes is shorter than its two %d-byte meta pages", size, psz)
	}
	// Both meta pages say they are (bbolt's tx.Check asserts it: a read
	// of either through a transaction panics otherwise).
	for i := range uint64(2) {
		p := c.data[i*psz:]
		if id, f := ne.Uint64(p), ne.Uint16(p[8:]); id != i || f != flagMeta {
			return c.damage(int64(i*psz), "meta page %d identifies itself as page %d of type %#x", i, id, f)
		}
	}
	// The meta bbolt uses: the valid one with the higher transaction ID.
	m0, m1 := readMeta(c.data), readMeta(c.data[psz:])
	a, b := m0, m1
	if m1.txid > m0.txid {
		a, b = m1, m0
	}
	m := a
	if !m.valid {
		m = b
	}
	if !m.valid {
		return c.damage(0, "both bbolt meta pages are damaged")
	}
	if uint64(m.pageSize) != psz {
		return c.damage(0, "meta pages disagree on the page size (%d, %d)", psz, m.pageSize)
	}
	c.psz, c.hwm = psz, m.hwm
	// The high-water mark: every page bbolt may touch lies below it, so it
	// must lie within the file (past its end the mapping faults).
	if m.hwm < 3 || m.hwm > size/psz {
		return c.damage(-1, "high-water mark of %d pages (%d bytes) does not fit the file of %d bytes", m.hwm, m.hwm*psz, size)
	}
	c.seen = make([]uint64, (m.hwm+63)/64)
	c.free = make([]uint64, (m.hwm+63)/64)
	if m.freelist != noFreelist {
		if err := c.freelist(m.freelist); err != nil {
			return err
		}
	}
	if _, err := c.tree(m.root, 0, nil, nil, kindRoot); err != nil {
		return err
	}
	// The layout.
	if c.version != nil {
		if len(c.version) != 2 {
			return c.damage(c.off(c.version), "format version of %d bytes", len(c.version))
		}
		if v := int(binary.LittleEndian.Uint16(c.version)); v != Version {
			return newDamage(c.path, -1, fmt.Sprintf("index format v%d, this build reads v%d", v, Version),
				&base.FormatError{Path: c.path, What: "index", Version: v, Supported: Version, Oldest: Version})
		}
	}
	if c.schemaErr != nil {
		return c.schemaErr
	}
	for k, name := range []string{kindMeta: "meta", kindSessions: "sessions", kindFrames: "frames"} {
		if k != int(kindRoot) && !c.buckets[k] { // ("forks" and "retired" are made on the first fork)
			return c.damage(-1, "no %q bucket (not an index, or one never initialized)", name)
		}
	}
	if c.version == nil {
		return c.damage(-1, "index has no format version")
	}
	return nil
}

// freelist checks the stored free list at page id and marks its pages.
func (c *fileCheck) freelist(id uint64) error {
	p, err := c.page(id)
	if err != nil {
		return err
	}
	off := int64(id * c.psz)
	if f := ne.Uint16(p[8:]); f != flagFreelist {
		return c.damage(off, "page %d: free list page has type %#x", id, f)
	}
	first, n := uint64(0), uint64(ne.Uint16(p[10:]))
	if n == 0xFFFF {
		first, n = 1, ne.Uint64(p[pageHeaderSize:])
	}
	if room := uint64(len(p)-pageHeaderSize)/8 - first; n > room {
		return c.damage(off, "page %d: free list of %d pages overflows its page", id, n)
	}
	for i := range n {
		f := ne.Uint64(p[pageHeaderSize+8*(first+i):])
		if f < 2 || f >= c.hwm {
			return c.damage(off, "page %d: free list names page %d, outside 2..%d", id, f, c.hwm-1)
		}
		if bit(c.free, f) {
			return c.damage(off, "page %d: free list names page %d twice", id, f)
		}
		setBit(c.free, f)
	}
	return nil
}

// page returns page id with its overflow pages, which must all be below
// the high-water mark, reached once, and not free.
func (c *fileCheck) page(id uint64) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, c.damage(-1, "a reference to page %d, outside the pages in use (2..%d)", id, c.hwm-1)
	}
	start := id * c.psz
	p := c.data[start : start+c.psz]
	off := int64(start)
	if got := ne.Uint64(p); got != id {
		return nil, c.damage(off, "page %d identifies itself as page %d", id, got)
	}
	ov := uint64(ne.Uint32(p[12:]))
	if ov >= c.hwm-id {
		return nil, c.damage(off, "page %d: %d overflow pages run past the high-water mark %d", id, ov, c.hwm)
	}
	for i := id; i <= id+ov; i++ {
		if bit(c.seen, i) {
			return nil, c.damage(off, "page %d is referenced twice", i)
		}
		if bit(c.free, i) {
			return nil, c.damage(off, "page %d is both in use and on the free list", i)
		}
		setBit(c.seen, i)
	}
	return c.data[start : start+(ov+1)*c.psz], nil
}

// elems checks that the count elements of page p fit it.
func (c *fileCheck) elems(p []byte, what string) (int, error) {
	n := int(ne.Uint16(p[10:]))
	if pageHeaderSize+n*elemSize > len(p) {
		return 0, c.damage(c.off(p), "%s: %d elements overflow the page", what, n)
	}
	return n, nil
}

// entry returns the key (and for a leaf the value) of element i of page
// p. *next is where its data must start: after the element array for the
// first element, where the previous element's data ended for the others.
func (c *fileCheck) entry(p []byte, i int, leaf bool, next *uint64, what string) (k, v []byte, err error) {
	e := p[pageHeaderSize+i*elemSize:]
	var pos, ksize, vsize uint64
	if leaf {
		pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
	} else {
		pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
	}
	start := uint64(pageHeaderSize+i*elemSize) + pos
	if ksize == 0 || start+ksize+vsize > uint64(len(p)) {
		return nil, nil, c.damage(c.off(e), "%s element %d: key of %d bytes and value of %d at %d do not fit the page", what, i, ksize, vsize, pos)
	}
	// bbolt (node.write) lays keys and values out in element order right
	// after the elements, with no gaps: an element whose data does not
	// start where the previous one's ended has a damaged position or size.
	if start != *next {
		return nil, nil, c.damage(c.off(e), "%s element %d: data at %d, where the previous element's ends at %d", what, i, start, *next)
	}
	*next = start + ksize + vsize
	return p[start : start+ksize], p[start+ksize : start+ksize+vsize], nil
}

// order checks key i of a page against the previous key (or the lower
// bound the parent gives) and the upper bound, as bbolt's tx.Check does.
func (c *fileCheck) order(i int, k, prev, hi []byte, what string) error {
	if prev != nil {
		if x := bytes.Compare(prev, k); x > 0 || (i > 0 && x == 0) {
			return c.damage(c.off(k), "%s key %d (%x) is out of order after %x", what, i, k, prev)
		}
	}
	if hi != nil && bytes.Compare(k, hi) >= 0 {
		return c.damage(c.off(k), "%s key %d (%x) is not below the next key of its parent (%x)", what, i, k, hi)
	}
	return nil
}

// tree checks the subtree at page id of a bucket of kind kind, whose keys lie in [lo, hi). It returns the
// subtree's largest key.
func (c *fileCheck) tree(id uint64, depth int, lo, hi []byte, kind bucketKind) ([]byte, error) {
	if depth > maxDepth {
		return nil, c.damage(int64(id*c.psz), "page %d lies %d levels deep: a cycle", id, depth)
	}
	p, err := c.page(id)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("page %d", id)
	switch f := ne.Uint16(p[8:]); f {
	case flagBranch:
		n, err := c.elems(p, what)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, c.damage(c.off(p), "%s: branch page without elements", what)
		}
		keys := make([][]byte, n)
		next := uint64(pageHeaderSize + n*elemSize)
		for i := range n {
			if keys[i], _, err = c.entry(p, i, false, &next, what); err != nil {
				return nil, err
			}
		}
		run, max := lo, []byte(nil)
		for i := range n {
			if err := c.order(i, keys[i], run, hi, what); err != nil {
				return nil, err
			}
			next := hi
			if i+1 < n {
				next = keys[i+1]
			}
			child := ne.Uint64(p[pageHeaderSize+i*elemSize+8:])
			if max, err = c.tree(child, depth+1, keys[i], next, kind); err != nil {
				return nil, err
			}
			run = max
		}
		return max, nil
	case flagLeaf:
		return c.leaf(p, what, depth, lo, hi, kind)
	default:
		return nil, c.damage(c.off(p), "%s has type %#x where a branch or leaf page belongs", what, f)
	}
}

// leaf checks the leaf page p (a file page or an inline bucket's page).
func (c *fileCheck) leaf(p []byte, what string, depth int, lo, hi []byte, kind bucketKind) ([]byte, error) {
	n, err := c.elems(p, what)
	if err != nil {
		return nil, err
	}
	prev := lo
	next := uint64(pageHeaderSize + n*elemSize)
	for i := range n {
		k, v, err := c.entry(p, i, true, &next, what)
		if err != nil {
			return nil, err
		}
		if err := c.order(i, k, prev, hi, what); err != nil {
			return nil, err
		}
		prev = k
		switch f := ne.Uint32(p[pageHeaderSize+i*elemSize:]); f {
		case 0:
			c.record(kind, k, v)
		case leafIsBucket:
			if err := c.bucket(kind, k, v, depth); err != nil {
				return nil, err
			}
		default:
			return nil, c.damage(c.off(p[pageHeaderSize+i*elemSize:]), "%s element %d has flags %#x", what, i, f)
		}
	}
	if n == 0 {
		return nil, nil
	}
	return prev, nil
}

// bucket checks the bucket named k, whose header (and inline page) is v,
// held in a bucket of kind parent.
func (c *fileCheck) bucket(parent bucketKind, k, v []byte, depth int) error {
	kind := kindForeign
	if parent == kindRoot {
		switch string(k) {
		case "meta":
			kind = kindMeta
		case "sessions":
			kind = kindSessions
		case "frames":
			kind = kindFrames
		case "forks":
			kind = kindForks
		case "retired":
			kind = kindRetired
		}
	}
	if kind == kindForeign {
		c.schemaf(k, "a bucket %q that is not part of the index", k)
	} else {
		c.buckets[kind] = true
	}
	if len(v) < bucketHeader {
		return c.damage(c.off(v), "bucket %q: header of %d bytes", k, len(v))
	}
	if root := ne.Uint64(v); root != 0 {
		_, err := c.tree(root, depth+1, nil, nil, kind)
		return err
	}
	p := v[bucketHeader:]
	if len(p) < pageHeaderSize {
		return c.damage(c.off(p), "bucket %q: inline page of %d bytes", k, len(p))
	}
	what := fmt.Sprintf("inline bucket %q", k)
	if f := ne.Uint16(p[8:]); f != flagLeaf {
		return c.damage(c.off(p), "%s has type %#x", what, f)
	}
	if depth+1 > maxDepth {
		return c.damage(c.off(p), "%s lies %d levels deep", what, depth+1)
	}
	_, err := c.leaf(p, what, depth+1, nil, nil, kind)
	return err
}

func (c *fileCheck) schemaf(at []byte, format string, args ...any) {
	if c.schemaErr == nil {
		c.schemaErr = c.damage(c.off(at), format, args...)
	}
}

// record checks one key/value pair against the layout.
func (c *fileCheck) record(kind bucketKind, k, v []byte) {
	if c.onRecord != nil {
		c.onRecord(kind, k, v)
	}
	switch kind {
	case kindRoot:
		c.schemaf(k, "a value %q in the root bucket", k)
	case kindMeta:
		switch {
		case bytes.Equal(k, keyVersion):
			c.version = v
		case bytes.Equal(k, keyRewrite):
			if _, ok := decodeRewrite(v); !ok {
				c.schemaf(v, "meta %q of %d bytes is malformed", k, len(v))
			}
		case bytes.Equal(k, keyCheckpoint):
			if len(v) != 16 {
				c.schemaf(v, "meta %q of %d bytes", k, len(v))
			}
		case bytes.Equal(k, keyCheckpointSegment):
			if len(v) != 8 {
				c.schemaf(v, "meta %q of %d bytes", k, len(v))
			}
		default:
			c.schemaf(k, "meta key %q that is not part of the index", k)
		}
	case kindSessions:
		c.sessions++
		s, hdr, ok := parseSession(v)
		switch {
		case !ok:
			c.schemaf(v, "session %q record is malformed", k)
		case c.onSession != nil:
			c.user = true
			c.onSession(k, s, hdr)
			c.user = false
		}
	case kindForks:
		if !validForkRecord(k, v) {
			c.schemaf(k, "fork registry record %x is malformed", k)
		}
	case kindRetired:
		if !validRetiredRecord(k, v) {
			c.schemaf(k, "retired frame record %x is malformed", k)
		}
	case kindFrames:
		c.frames++
		if _, _, ok := parseFrameKey(k); !ok {
			c.schemaf(k, "frame key %x is malformed", k)
		} else if len(v) != frameValueLen {
			c.schemaf(v, "frame record of %d bytes", len(v))
		}
	}
}

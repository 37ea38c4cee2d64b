package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/internal/testlong"
)

// state is everything an index holds, as its API reads it.
type state struct {
	Checkpoint Checkpoint
	Rewrite    Rewrite
	HasRewrite bool
	Sessions   []Session
	Frames     map[string][]Frame
}

// readState reads x whole through its API; the first error ends it.
func readState(x *Index, ids []string) (state, error) {
	var s state
	var err error
	if s.Checkpoint, err = x.Checkpoint(); err != nil {
		return s, err
	}
	if s.Rewrite, s.HasRewrite, err = x.Rewrite(); err != nil {
		return s, err
	}
	if err = x.Sessions(func(ss Session) error { s.Sessions = append(s.Sessions, ss); return nil }); err != nil {
		return s, err
	}
	s.Frames = map[string][]Frame{}
	seen := map[string]bool{}
	for _, ss := range s.Sessions {
		ids = append(ids, ss.ID)
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		f, err := x.Frames(id)
		if err != nil {
			return s, err
		}
		if len(f) > 0 {
			s.Frames[id] = f
		}
	}
	return s, nil
}

// fixture is a real index file and the states it went through.
type fixture struct {
	file       []byte
	psz        int
	ids        []string
	final      state // after the last transaction
	previous   state // after the one before it (what bbolt falls back to without the newer meta page)
	payload    [][2]int64
	freePages  map[int64]bool
	branchPage []int64
	dir        string // where probe writes its copies
}

func buildFixture(t testing.TB) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.db")
	x, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{}
	rng := rand.New(rand.NewPCG(1, 2))
	seg, off := uint64(1), int64(64)
	next := map[string]uint64{}
	for round := range 4 {
		u := &Update{}
		for i := range 60 {
			id := fmt.Sprintf("session-%03d-%d", i, round%2)
			hdr := []byte(fmt.Sprintf(`{"id":%q,"round":%d}`, id, round))
			if i == 7 && round == 0 {
				hdr = bytes.Repeat([]byte("h"), 10000) // an overflow page
			}
			for range 1 + rng.IntN(20) {
				u.Frames = append(u.Frames, SessionFrame{id, Frame{FirstSeq: next[id], Count: 3, Segment: seg, Offset: off, Size: 200}})
				next[id] += 3
				off += 200
			}
			u.Sessions = append(u.Sessions, Session{ID: id, Header: hdr, UID: uint64(i + 1), Events: next[id], Size: int64(next[id]) * 67})
		}
		if round == 3 {
			u.Deleted = []string{"session-003-0", "session-010-0"}
		}
		seg++
		u.Checkpoint = Checkpoint{Segment: seg, Offset: off}
		if err := x.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		fx.ids = append(fx.ids, fmt.Sprintf("session-%03d-0", i), fmt.Sprintf("session-%03d-1", i))
	}
	if fx.previous, err = readState(x, fx.ids); err != nil {
		t.Fatal(err)
	}
	if err := x.BeginRewrite(Rewrite{Segment: 2, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if fx.final, err = readState(x, fx.ids); err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if fx.file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	// Where the stored bytes of keys and values lie, which pages the tree
	// uses, and which are branch pages.
	c := &fileCheck{path: path, data: fx.file, onRecord: func(_ bucketKind, k, v []byte) {
		fx.payload = append(fx.payload, [2]int64{int64(cap(fx.file) - cap(k)), int64(len(k))}, [2]int64{int64(cap(fx.file) - cap(v)), int64(len(v))})
	}}
	if err := c.run(); err != nil {
		t.Fatal(err)
	}
	fx.psz = int(c.psz)
	fx.freePages = map[int64]bool{}
	for p := uint64(0); p < uint64(len(fx.file))/c.psz; p++ {
		if p >= 2 && (p >= c.hwm || !bit(c.seen, p)) {
			fx.freePages[int64(p)] = true
		}
		if p < c.hwm && bit(c.seen, p) && ne.Uint64(fx.file[p*c.psz:]) == p && ne.Uint16(fx.file[p*c.psz+8:]) == flagBranch {
			fx.branchPage = append(fx.branchPage, int64(p))
		}
	}
	if len(fx.branchPage) == 0 || len(fx.file)/fx.psz < 20 {
		t.Fatalf("fixture too small: %d pages, branch pages %v", len(fx.file)/fx.psz, fx.branchPage)
	}
	return fx
}

// inPayload reports whether every damaged byte [off, off+n) lies in the
// stored bytes of a key or value, which no check can tell from others.
func (fx *fixture) inPayload(off, n int64) bool {
	for _, r := range fx.payload {
		if off >= r[0] && off+n <= r[0]+r[1] {
			return true
		}
	}
	return false
}

// outcome of one hostile file in one open mode.
type outcome int

const (
	refusedAtOpen outcome = iota
	refusedAtRead
	refusedAtVerify
	intact   // reads and Verify return the data the index held
	previous // the state before the last transaction (the newer meta page is damaged)
	undetected
)

var outcomeNames = [...]string{"refused at open", "refused at read", "refused at verify", "intact", "previous transaction", "undetected"}

// probe opens a copy of data and reads it whole, then verifies it. Any
// error must be ErrDamaged; a failed Open must not change the file.
func (fx *fixture) probe(t *testing.T, name string, data []byte, readOnly bool) outcome {
	t.Helper()
	if fx.dir == "" {
		fx.dir = t.TempDir()
	}
	path := filepath.Join(fx.dir, "index.db")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	x, err := Open(path, &Options{ReadOnly: readOnly})
	if err != nil {
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("%s (read-only %v): Open = %v, want ErrDamaged", name, readOnly, err)
		}
		var de *DamageError
		if !errors.As(err, &de) || de.Path != path {
			t.Fatalf("%s: Open = %v, want a *DamageError naming %s", name, err, path)
		}
		if !errors.Is(err, base.ErrCorrupt) && !errors.Is(err, base.ErrFormat) {
			t.Fatalf("%s: Open = %v, neither ErrCorrupt nor ErrFormat", name, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
			t.Fatalf("%s (read-only %v): a refused Open changed the file", name, readOnly)
		}
		return refusedAtOpen
	}
	defer x.Close()
	got, readErr := readState(x, fx.ids)
	if readErr != nil && !errors.Is(readErr, ErrDamaged) {
		t.Fatalf("%s: read = %v, want ErrDamaged", name, readErr)
	}
	verifyErr := x.Verify()
	if verifyErr != nil && !errors.Is(verifyErr, ErrDamaged) {
		t.Fatalf("%s: Verify = %v, want ErrDamaged", name, verifyErr)
	}
	switch {
	case readErr != nil:
		return refusedAtRead
	case reflect.DeepEqual(got, fx.final) && verifyErr == nil:
		return intact
	case reflect.DeepEqual(got, fx.previous) && verifyErr == nil:
		return previous
	case verifyErr != nil:
		return refusedAtVerify
	}
	return undetected
}

// attack runs probe in both modes and checks the outcome against what the
// damage allows. payload: the damage is confined to stored key/value bytes
// (nothing can tell it); meta: it touches a meta page (bbolt falls back to
// the other one, a transaction older).
func (fx *fixture) attack(t *testing.T, tally map[string]int, name string, data []byte, payload, meta bool) {
	t.Helper()
	for _, ro := range []bool{false, true} {
		o := fx.probe(t, name, data, ro)
		tally[outcomeNames[o]]++
		switch {
		case o == previous && !meta:
			t.Errorf("%s (read-only %v): reads an older transaction, but no meta page was touched", name, ro)
		case o == undetected && !payload:
			t.Errorf("%s (read-only %v): damage to the file's structure returned wrong data and passed Verify", name, ro)
		}
	}
}

func TestHostileIndexFiles(t *testing.T) {
	fx := buildFixture(t)
	file, psz := fx.file, fx.psz
	pages := len(file) / psz
	tally := map[string]int{}
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(file)
		f(b)
		return b
	}

	// The untouched file reads back whole.
	fx.attack(t, tally, "untouched", file, false, false)
	if tally[outcomeNames[intact]] != 2 {
		t.Fatalf("the untouched file does not read back: %v", tally)
	}

	// Each page: a byte flipped in its header, its first element, its
	// middle and its end; the page zeroed.
	for p := range pages {
		for _, at := range []int{0, 8, 10, 12, 16, 20, 28, 56, psz / 2, psz - 1} {
			off := p*psz + at
			name := fmt.Sprintf("page %d byte %d flipped", p, at)
			fx.attack(t, tally, name, mod(func(b []byte) { b[off] ^= 0x5a }), fx.inPayload(int64(off), 1), p < 2)
		}
		fx.attack(t, tally, fmt.Sprintf("page %d zeroed", p),
			mod(func(b []byte) { clear(b[p*psz : (p+1)*psz]) }), false, p < 2)
	}

	// Random bytes flipped anywhere: 100 (50 with -short, 2000 with
	// SEGLOG_LONG=1).
	rng := rand.New(rand.NewPCG(3, 4))
	flips := testlong.Pick(50, 100, 2000)
	for range flips {
		off := rng.IntN(len(file))
		x := byte(1 + rng.IntN(255))
		fx.attack(t, tally, fmt.Sprintf("byte %d ^ %#x", off, x),
			mod(func(b []byte) { b[off] ^= x }), fx.inPayload(int64(off), 1), off < 2*psz)
	}

	// Branch pages pointing at themselves, past the high-water mark, far
	// outside the file.
	for _, p := range fx.branchPage {
		for _, to := range []uint64{uint64(p), uint64(pages), 1 << 40, 0, 1} {
			fx.attack(t, tally, fmt.Sprintf("branch page %d points at page %d", p, to),
				mod(func(b []byte) { ne.PutUint64(b[int(p)*psz+pageHeaderSize+8:], to) }), false, false)
		}
	}

	// Truncated.
	for _, n := range []int{0, 1, 4095, psz, 2 * psz, len(file) / 2, len(file) - psz, len(file) - 1} {
		fx.attack(t, tally, fmt.Sprintf("truncated to %d of %d bytes", n, len(file)), file[:n:n], false, false)
	}

	// Both meta pages claim more pages than the file holds (a truncation
	// that kept valid meta pages: bbolt then faults on the missing pages),
	// or a root page far outside the file.
	for _, m := range []struct {
		name  string
		field int
		v     uint64
	}{{"high-water mark past the end", 56, uint64(pages + 10)}, {"root page far outside", 32, 1 << 40}} {
		fx.attack(t, tally, m.name, mod(func(b []byte) {
			for _, at := range []int{0, psz} {
				ne.PutUint64(b[at+m.field:], m.v)
				h := fnv.New64a()
				h.Write(b[at+16 : at+72])
				ne.PutUint64(b[at+72:], h.Sum64())
			}
		}), false, true)
	}

	// Random bytes.
	junk := make([]byte, 16*psz)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	fx.attack(t, tally, "random bytes", junk, false, false)

	// bbolt files that are not this index.
	for _, c := range []struct {
		name string
		fill func(tx *bolt.Tx) error
	}{
		{"empty bbolt file", func(tx *bolt.Tx) error { return nil }},
		{"foreign buckets", func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("widgets"))
			if err != nil {
				return err
			}
			for i := range 500 {
				if err := b.Put(fmt.Appendf(nil, "w%04d", i), bytes.Repeat([]byte{byte(i)}, 40)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"layout without a version", layout(nil, nil)},
		{"stale format version 0", layout([]byte{0, 0}, nil)},
		{"newer format version 2", layout([]byte{2, 0}, nil)},
		{"version of 3 bytes", layout([]byte{1, 0, 0}, nil)},
		{"an extra bucket", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("extra"))
			return err
		})},
		{"a nested bucket in sessions", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			_, err := tx.Bucket(bucketSessions).CreateBucket([]byte("nested"))
			return err
		})},
		{"an unknown meta key", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put([]byte("owner"), []byte("someone"))
		})},
		{"a malformed session record", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketSessions).Put([]byte("s"), []byte{2, 1, 1, 1, 1})
		})},
		{"a malformed frame key", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketFrames).Put([]byte{9, 'a'}, make([]byte, frameValueLen))
		})},
		{"a short frame record", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketFrames).Put(frameKey(nil, "a", 0), make([]byte, 8))
		})},
		{"a short checkpoint", layout([]byte{1, 0}, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyCheckpoint, make([]byte, 8))
		})},
	} {
		path := filepath.Join(t.TempDir(), "other.db")
		db, err := bolt.Open(path, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(c.fill); err != nil {
			t.Fatal(err)
		}
		db.Close()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			if o := fx.probe(t, c.name, b, ro); o != refusedAtOpen {
				t.Errorf("%s (read-only %v): %s, want refused at open", c.name, ro, outcomeNames[o])
			}
		}
	}
	t.Logf("outcomes over %d pages of %d bytes: %v", pages, psz, tally)
}

// layout returns a bbolt fill of this index's buckets with the given
// version record (none if nil), then extra.
func layout(version []byte, extra func(*bolt.Tx) error) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketSessions, bucketFrames} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		if version != nil {
			if err := tx.Bucket(bucketMeta).Put(keyVersion, version); err != nil {
				return err
			}
		}
		if extra != nil {
			return extra(tx)
		}
		return nil
	}
}

func TestOtherVersionIsDamageAndFormat(t *testing.T) {
	for _, v := range []uint16{0, Version + 1} {
		path := filepath.Join(t.TempDir(), "index.db")
		db, err := bolt.Open(path, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		db.Update(layout(binary.LittleEndian.AppendUint16(nil, v), nil))
		db.Close()
		for _, ro := range []bool{false, true} {
			_, err := Open(path, &Options{ReadOnly: ro})
			var fe *base.FormatError
			if !errors.Is(err, ErrDamaged) || !errors.As(err, &fe) || fe.Version != int(v) || errors.Is(err, base.ErrCorrupt) {
				t.Errorf("version %d (read-only %v): Open = %v, want ErrDamaged wrapping a *FormatError and not ErrCorrupt", v, ro, err)
			}
		}
	}
}

func TestEmptyFileIsDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		if _, err := Open(path, &Options{ReadOnly: ro}); !errors.Is(err, ErrDamaged) || !errors.Is(err, base.ErrCorrupt) {
			t.Errorf("Open (read-only %v) of an empty file = %v, want ErrDamaged", ro, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("the refused opens changed the file: %v, %v", fi, err)
	}
	// A missing file: a read-only open says so; a read-write one creates it.
	missing := filepath.Join(t.TempDir(), "index.db")
	if _, err := Open(missing, &Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrDamaged) {
		t.Errorf("read-only Open of a missing file = %v, want fs.ErrNotExist", err)
	}
	x, err := Open(missing, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(); err != nil {
		t.Errorf("Verify of a new index = %v", err)
	}
	x.Close()
	if x, err = Open(missing, &Options{ReadOnly: true}); err != nil {
		t.Fatalf("reopen of a new index: %v", err)
	}
	x.Close()
}

// A file cut short while it is open: bbolt's reads of the missing pages
// fault; every read returns ErrDamaged instead, from then on.
func TestFileCutWhileOpen(t *testing.T) {
	fx := buildFixture(t)
	for _, ro := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "index.db")
		if err := os.WriteFile(path, fx.file, 0o644); err != nil {
			t.Fatal(err)
		}
		x, err := Open(path, &Options{ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, int64(2*fx.psz)); err != nil {
			t.Fatal(err)
		}
		if _, err := readState(x, fx.ids); !errors.Is(err, ErrDamaged) {
			t.Errorf("read-only %v: reads of a file cut under the index = %v, want ErrDamaged", ro, err)
		}
		if _, err := x.Checkpoint(); !errors.Is(err, ErrDamaged) {
			t.Errorf("read-only %v: a read after a fault = %v, want the same ErrDamaged", ro, err)
		}
		if err := x.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// A panic in the caller's Sessions callback is the caller's: it goes up.
func TestSessionsCallbackPanicGoesUp(t *testing.T) {
	x, _ := openTemp(t)
	if err := x.Apply(&Update{Sessions: []Session{{ID: "a", Header: []byte("{}")}}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != "mine" {
			t.Errorf("recovered %v, want the callback's panic", r)
		}
		if err := x.Verify(); err != nil {
			t.Errorf("the index is marked damaged after the caller's panic: %v", err)
		}
	}()
	x.Sessions(func(Session) error { panic("mine") })
	t.Error("Sessions returned")
}

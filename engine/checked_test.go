package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The end-of-test store check. Every store a test makes ends with it, as
// bbolt's tests check every database they leave: the test helpers that
// make a store (checkedDir, openStore) register, once per test and
// directory, a cleanup that runs after the test's own closes and checks
// what the test left there (storeCheck). A test that leaves a store
// broken on purpose says so (keepBroken). internal/lint's
// TestStoresChecked fails on a test file that opens a store without
// these helpers.

// checkedStores is what the tests that are running made: testing.TB ->
// *testStores.
var checkedStores sync.Map

type testStores struct {
	mu   sync.Mutex
	dirs map[string]*checkedStore
}

// checkedStore is one directory a test made a store in.
type checkedStore struct {
	opts   Options // of the last open (FS, index path, catalog); zero: the OS
	broken string  // why the test leaves it broken; "" checks it
	expect string  // what the check must report of the store the test damaged
}

// storeFor returns the record of dir in t, registering its check on the
// first call.
func storeFor(t testing.TB, dir string) *checkedStore {
	t.Helper()
	v, _ := checkedStores.LoadOrStore(t, &testStores{dirs: map[string]*checkedStore{}})
	ts := v.(*testStores)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if s, ok := ts.dirs[dir]; ok {
		return s
	}
	s := &checkedStore{}
	ts.dirs[dir] = s
	if len(ts.dirs) == 1 {
		t.Cleanup(func() { checkedStores.Delete(t) })
	}
	t.Cleanup(func() {
		ts.mu.Lock()
		o, broken, expect := s.opts, s.broken, s.expect
		ts.mu.Unlock()
		if broken != "" || t.Failed() || t.Skipped() {
			return
		}
		err := storeCheck(dir, o)
		switch {
		case expect == "" && err != nil:
			t.Errorf("the store the test left in %s: %v", dir, err)
		case expect != "" && err == nil:
			t.Errorf("the store the test damaged in %s: the check found nothing, want %q", dir, expect)
		case expect != "" && !strings.Contains(err.Error(), expect):
			t.Errorf("the store the test damaged in %s: the check found %v, want %q", dir, err, expect)
		}
	})
	return s
}

// checkedDir returns a new temporary directory for a store, with the
// end-of-test store check registered on it. The store must be closed when
// the test ends (a deferred Close, or a Cleanup registered after
// checkedDir).
func checkedDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	storeFor(t, dir)
	return dir
}

// CheckedDir is checkedDir, for the external tests.
var CheckedDir = checkedDir

// openStore is Open for tests: it also registers the end-of-test store
// check of dir (once per test and directory), made with the options of
// the last open of dir through openStore (its FS, index path and
// catalog).
func openStore(t testing.TB, dir string, o *Options) (*DB, error) {
	t.Helper()
	s := storeFor(t, dir)
	var c Options
	if o != nil {
		c = Options{FS: o.FS, IndexPath: o.IndexPath, NoIndex: o.NoIndex, Catalog: o.Catalog}
	}
	v, _ := checkedStores.Load(t)
	ts := v.(*testStores)
	ts.mu.Lock()
	s.opts = c
	ts.mu.Unlock()
	return Open(dir, o)
}

// OpenStore is openStore, for the external tests.
var OpenStore = openStore

// keepBroken turns off the end-of-test store check of dir in t: the test
// leaves the store there broken on purpose, for the reason why.
func keepBroken(t testing.TB, dir, why string) {
	t.Helper()
	if why == "" {
		t.Fatal("keepBroken needs the reason the test leaves the store broken")
	}
	s := storeFor(t, dir)
	v, _ := checkedStores.Load(t)
	ts := v.(*testStores)
	ts.mu.Lock()
	s.broken = why
	ts.mu.Unlock()
}

// KeepBroken is keepBroken, for the external tests.
var KeepBroken = keepBroken

// expectProblem makes the end-of-test store check of dir in t expect the
// damage the test made: what it reports must contain want (and it must
// report something).
func expectProblem(t testing.TB, dir, want string) {
	t.Helper()
	if want == "" {
		t.Fatal("expectProblem needs what the check must report")
	}
	s := storeFor(t, dir)
	v, _ := checkedStores.Load(t)
	ts := v.(*testStores)
	ts.mu.Lock()
	s.expect = want
	ts.mu.Unlock()
}

// goldenLegacyRefusal is what the end-of-test check reports of a copy of
// the golden store (testdata/golden): its v2 session "legacy", written
// before issue 38, has user messages the reference's v2 admission refuses.
const goldenLegacyRefusal = "user/message data lacks required field role"

// ExpectProblem is expectProblem, for the external tests.
var ExpectProblem = expectProblem

// openUnchecked is Open for a store no end-of-test check can see: one a
// workload makes outside a test (whose crashed copies the test checks),
// or one a peer process serves for a test that checks it. why says which.
func openUnchecked(why, dir string, o *Options) (*DB, error) {
	if why == "" {
		return nil, errors.New("openUnchecked needs the reason no check sees the store")
	}
	return Open(dir, o)
}

// OpenUnchecked is openUnchecked, for the external tests.
var OpenUnchecked = openUnchecked

// storeCheck checks the store in dir at the end of a test: Check finds no
// problem, a read-only open succeeds, and every session it lists reads in
// full. The error names what failed.
func storeCheck(dir string, o Options) error {
	if f, ok := o.FS.(*vfs.FaultFS); ok {
		f.Clear() // the test is over: its injected faults are not the store's
	}
	rep, err := Check(dir, &o)
	if err != nil {
		return fmt.Errorf("Check: %w", err)
	}
	var errs []error
	for _, p := range rep.Problems {
		errs = append(errs, fmt.Errorf("Check: %v", p))
	}
	ro := o
	ro.ReadOnly, ro.Logger, ro.CompactInterval = true, slog.New(slog.DiscardHandler), -1
	db, err := Open(dir, &ro)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("read-only open: %w", err))...)
	}
	defer db.Close()
	ctx := context.Background()
	snaps, err := db.List(ctx)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("List: %w", err))...)
	}
	for _, s := range snaps {
		id := s.Header.ID
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			errs = append(errs, fmt.Errorf("session %q: open: %w", id, err))
			continue
		}
		evs, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("session %q: read: %w", id, err))
		} else if s.FormatStatus == store.FormatCurrent && uint64(len(evs)) != s.EventCount {
			// (A migration-required session reads migrated, in memory:
			// v2 -> v3 adds a head. DESIGN.md, "Formats".)
			errs = append(errs, fmt.Errorf("session %q: read %d events, List says %d", id, len(evs), s.EventCount))
		}
	}
	return errors.Join(errs...)
}

// idxRewrite returns the rewrite intent the store's index records.
func (db *DB) idxRewrite() (rw index.Rewrite, ok bool, err error) {
	err = db.index.use(false, func(x *index.Index) error {
		var err error
		rw, ok, err = x.Rewrite()
		return err
	})
	return rw, ok, err
}

// idxBeginRewrite records a rewrite intent in the store's index, as a
// compaction does.
func (db *DB) idxBeginRewrite(rw index.Rewrite) error {
	return db.index.use(true, func(x *index.Index) error { return x.BeginRewrite(rw) })
}

// idxClearRewrite clears the store's rewrite intent.
func (db *DB) idxClearRewrite() error { return db.index.use(true, (*index.Index).ClearRewrite) }

package enginetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The end-of-test store check for the tests outside package engine (the
// engine's own are engine/checked_test.go's, the same check): OpenStore
// opens a store and registers, once per test and directory, a cleanup
// that runs after the test's own closes and checks what the test left
// there: engine.Check finds no problem, a read-only open succeeds, and
// every session it lists reads in full. A test that leaves a store broken
// on purpose says so (KeepBroken) or what the check must report
// (ExpectProblem). internal/lint's TestStoresChecked fails on a test that
// calls engine.Open itself.

var checkedStores sync.Map // testing.TB -> *testStores

type testStores struct {
	mu   sync.Mutex
	dirs map[string]*checkedStore
}

type checkedStore struct {
	opts   engine.Options // of the last open: FS, index path, catalog
	broken string         // why the test leaves it broken; "" checks it
	expect string         // what the check must report
}

// storeFor returns the record of dir in t, registering its check on the
// first call; the caller changes it under the returned mutex.
func storeFor(t testing.TB, dir string) (*checkedStore, *sync.Mutex) {
	t.Helper()
	v, _ := checkedStores.LoadOrStore(t, &testStores{dirs: map[string]*checkedStore{}})
	ts := v.(*testStores)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if s, ok := ts.dirs[dir]; ok {
		return s, &ts.mu
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
		err := CheckStore(dir, &o)
		switch {
		case expect == "" && err != nil:
			t.Errorf("the store the test left in %s: %v", dir, err)
		case expect != "" && err == nil:
			t.Errorf("the store the test damaged in %s: the check found nothing, want %q", dir, expect)
		case expect != "" && !strings.Contains(err.Error(), expect):
			t.Errorf("the store the test damaged in %s: the check found %v, want %q", dir, err, expect)
		}
	})
	return s, &ts.mu
}

// CheckedDir returns a new temporary directory for a store, with the
// end-of-test store check registered on it (the OS, default options).
func CheckedDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	storeFor(t, dir)
	return dir
}

// CheckAtEnd registers the end-of-test store check of dir, a store on the
// OS with default options that something other than OpenStore made (a
// seglog command the test runs in process).
func CheckAtEnd(t testing.TB, dir string) {
	t.Helper()
	storeFor(t, dir)
}

// OpenStore is engine.Open for tests: it also registers the end-of-test
// store check of dir, made with the options of the last OpenStore of dir
// in t (its FS, index path and catalog).
func OpenStore(t testing.TB, dir string, o *engine.Options) (*engine.DB, error) {
	t.Helper()
	s, mu := storeFor(t, dir)
	var c engine.Options
	if o != nil {
		c = engine.Options{FS: o.FS, IndexPath: o.IndexPath, NoIndex: o.NoIndex, Catalog: o.Catalog}
	}
	mu.Lock()
	s.opts = c
	mu.Unlock()
	return engine.Open(dir, o)
}

// OpenUnchecked is engine.Open for a store no end-of-test check can see
// (one a peer process or a workload outside a test opens); why says which.
func OpenUnchecked(why, dir string, o *engine.Options) (*engine.DB, error) {
	if why == "" {
		return nil, errors.New("enginetest: OpenUnchecked needs the reason no check sees the store")
	}
	return engine.Open(dir, o)
}

// KeepBroken turns off the end-of-test store check of dir in t: the test
// leaves the store there broken on purpose, for the reason why.
func KeepBroken(t testing.TB, dir, why string) {
	t.Helper()
	if why == "" {
		t.Fatal("KeepBroken needs the reason the test leaves the store broken")
	}
	s, mu := storeFor(t, dir)
	mu.Lock()
	s.broken = why
	mu.Unlock()
}

// ExpectProblem makes the end-of-test store check of dir in t expect the
// damage the test made: what it reports must contain want.
func ExpectProblem(t testing.TB, dir, want string) {
	t.Helper()
	if want == "" {
		t.Fatal("ExpectProblem needs what the check must report")
	}
	s, mu := storeFor(t, dir)
	mu.Lock()
	s.expect = want
	mu.Unlock()
}

// CheckStore checks the closed store in dir: engine.Check finds no
// problem, a read-only open succeeds, and every session it lists reads in
// full (as many events as it lists, for a session in the current
// format). o gives the FS, index path and catalog (nil: the OS,
// defaults); a *vfs.FaultFS has its faults cleared first. The error names
// what failed.
func CheckStore(dir string, o *engine.Options) error {
	var c engine.Options
	if o != nil {
		c = engine.Options{FS: o.FS, IndexPath: o.IndexPath, NoIndex: o.NoIndex, Catalog: o.Catalog}
	}
	if f, ok := c.FS.(*vfs.FaultFS); ok {
		f.Clear() // the test is over: its injected faults are not the store's
	}
	rep, err := engine.Check(dir, &c)
	if err != nil {
		return fmt.Errorf("Check: %w", err)
	}
	var errs []error
	for _, p := range rep.Problems {
		errs = append(errs, fmt.Errorf("Check: %v", p))
	}
	ro := c
	ro.ReadOnly, ro.Logger, ro.CompactInterval = true, slog.New(slog.DiscardHandler), -1
	db, err := engine.Open(dir, &ro)
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

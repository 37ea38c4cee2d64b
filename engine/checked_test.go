package engine

import (
	"testing"

	"github.com/seglog/seglog/index"
)

// checkedDir returns a new temporary directory for a store, and registers
// a check of the store the test leaves there (Check, as bbolt's tests
// check every database they leave): a test after which Check finds a
// problem fails. The store must be closed when the test ends (a deferred
// Close, or a Cleanup registered after checkedDir).
func checkedDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		rep, err := Check(dir, nil)
		if err != nil {
			t.Errorf("checking the store the test left: %v", err)
			return
		}
		for _, p := range rep.Problems {
			t.Errorf("the store the test left: %v", p)
		}
	})
	return dir
}

// CheckedDir is checkedDir, for the external tests.
var CheckedDir = checkedDir

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

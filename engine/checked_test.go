package engine

import (
	"testing"
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

package engine

import (
	"sync"
	"time"

	"github.com/seglog/seglog/index"
)

// indexFile is the store's index between its uses. The index is shared by
// every process that has the store open, and bbolt locks a file open for
// writing against every other open of it, by any process: so once Open's
// recovery is done, no process holds the index open. Each use (a
// checkpoint, a session's first read, a compaction's relocation) opens it,
// for reading or for writing, and closes it again (docs/MULTIPROCESS.md, Many
// processes).
type indexFile struct {
	path string
	// mu guards the uses of the file: within this process a writing use
	// excludes the others (bbolt's file lock would make them poll for
	// it). After DB.layoutMu, before DB.mu.
	mu sync.RWMutex
	// fail, if set, fails every use (tests of a failing index)
	fail error
}

// indexWait bounds how long a use waits for another process's use of the
// index (a checkpoint or a compaction's relocation: one bbolt commit).
const indexWait = 10 * time.Second

// use opens the index (for writing, with write), runs fn on it, and
// closes it.
func (f *indexFile) use(write bool, fn func(*index.Index) error) error {
	if write {
		f.mu.Lock()
		defer f.mu.Unlock()
	} else {
		f.mu.RLock()
		defer f.mu.RUnlock()
	}
	if f.fail != nil {
		return f.fail
	}
	x, err := index.Open(f.path, &index.Options{ReadOnly: !write, NoCheck: true, Timeout: indexWait})
	if err != nil {
		return err
	}
	err = fn(x)
	if cerr := x.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkpoint reads the checkpoint the index holds now (another process
// may have committed it).
func (f *indexFile) checkpoint() (index.Checkpoint, error) {
	var cp index.Checkpoint
	err := f.use(false, func(x *index.Index) error {
		var err error
		cp, err = x.Checkpoint()
		return err
	})
	return cp, err
}

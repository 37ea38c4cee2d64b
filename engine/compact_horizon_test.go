package engine

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/seglog/seglog/vfs"
)

// listHookFS runs hook (once, when armed) as the directory is first
// listed: a write open's recovery, before it reads the index.
type listHookFS struct {
	vfs.FS
	hook atomic.Pointer[func()]
}

func (l *listHookFS) List(dir string) ([]string, error) {
	if h := l.hook.Swap(nil); h != nil {
		(*h)()
	}
	return l.FS.List(dir)
}

// TestCompactWhileAWriterOpens: a writing process that is opening the
// store (it holds its follow slot, which says position 0 until its
// recovery is done: it is reading the index and the segments as they
// are) holds every compaction back: one that runs meanwhile drops and
// rewrites nothing. The opener then reads every session; once it is
// open, a compaction reclaims what it could not.
func TestCompactWhileAWriterOpens(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts()) // the checkpointer, and the compactor
	w2 := liveOpen(t, dir, besideOpts())
	want := mixedIndexed(t, w1, w2)
	w2.Close()

	var ran atomic.Bool
	var during *CompactReport
	var duringErr error
	lfs := &listHookFS{FS: vfs.Default}
	hook := func() {
		// The joiner holds its slot (position 0) and reads the index and
		// the segments next.
		ran.Store(true)
		during, duringErr = w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1})
	}
	lfs.hook.Store(&hook)
	o := besideOpts()
	o.FS, o.IndexPath = lfs, defaultIndexPath(dir)
	j := liveOpen(t, dir, o)
	if !ran.Load() {
		t.Fatal("the joiner's open never listed the directory")
	}
	if !j.joined || j.shared.Slot() < 0 {
		t.Fatalf("joined %v, slot %d: want a joiner with a follow slot", j.joined, j.shared.Slot())
	}
	if duringErr != nil {
		t.Fatalf("compaction while a writer opens: %v", duringErr)
	}
	if len(during.Dropped)+len(during.Rewritten) > 0 {
		t.Errorf("a compaction while a writer was opening changed segments: %+v", during)
	}
	checkBoth(t, "after a compaction during the open", []*DB{j, w1}, want)

	rep, err := w1.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1})
	if err != nil || len(rep.Dropped)+len(rep.Rewritten) == 0 {
		t.Fatalf("compaction once the writer is open: %+v, %v; want segments reclaimed", rep, err)
	}
	checkBoth(t, "after a compaction once it is open", []*DB{j, w1}, want)
	j.Close()
	w1.Close()
	reopenAndCheck(t, dir, besideOpts(), want)
}

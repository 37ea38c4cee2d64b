package segment

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

// TestLostWriteKeepsItsCause: every Sync whose frames a failed write took
// gets the loss with its cause (a full disk), also one that was waiting
// and returns only after Recover; the frames before the loss stay durable
// and appending resumes at the loss.
func TestLostWriteKeepsItsCause(t *testing.T) {
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	if err := mem.MkdirAll("/s", 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := Create(ff, "/s/0000000000000001.seg", 1, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev := []event.Event{{Seq: 0, Type: "turn/start", Time: 1, Data: []byte(`{"a":1}`)}}
	if _, err := w.Append("k", 0, ev); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := w.Durable()
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Nth: 1, Err: syscall.ENOSPC})
	ev[0].Seq = 1
	if _, err := w.Append("k", 1, ev); err != nil {
		t.Fatal(err)
	}
	// Several syncers of the lost frame; some may run after Recover.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = w.Sync() })
	}
	wg.Wait()
	var lost *LostError
	if !errors.As(errs[0], &lost) || lost.From != durable {
		t.Fatalf("sync of a lost write: %v", errs[0])
	}
	if err := w.Recover(); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("syncer %d: %v, want the loss wrapping ENOSPC", i, err)
		}
	}
	// A late syncer of the old epoch, after Recover, still gets the cause.
	if l := w.lostSince(0, durable+1); l == nil || !errors.Is(l, syscall.ENOSPC) {
		t.Fatalf("late syncer: %v", l)
	}
	if got := w.Durable(); got != durable {
		t.Fatalf("durable %d after the loss, was %d", got, durable)
	}
	ev[0].Seq = 1
	loc, err := w.Append("k", 1, ev)
	if err != nil || loc.Offset != durable {
		t.Fatalf("append after recover at %d, %v; want at %d", loc.Offset, err, durable)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
}

package bench

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestWindowed: what is handed over is written without a Flush once the
// window ends, once; a Flush writes at once and closes the window; a
// window's failed write is the next Flush's error.
func TestWindowed(t *testing.T) {
	var writes, kept atomic.Int32
	var fail atomic.Bool
	w := Windowed{Write: func() error {
		if fail.Load() {
			return errors.New("disk full")
		}
		writes.Add(1)
		kept.Store(0)
		return nil
	}}
	w.Hand(func() { kept.Add(1) })
	w.Hand(func() { kept.Add(1) })
	for i := 0; writes.Load() == 0; i++ {
		if i == 500 {
			t.Fatal("nothing written 5 s after two items were handed over, without a Flush")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if kept.Load() != 0 || writes.Load() != 1 {
		t.Fatalf("after the window: %d writes, %d items still kept; want one write of both", writes.Load(), kept.Load())
	}

	w.Hand(func() { kept.Add(1) })
	if err := w.Flush(); err != nil || writes.Load() != 2 {
		t.Fatalf("Flush: %v, %d writes, want 2", err, writes.Load())
	}
	time.Sleep(ReferenceWindow + 100*time.Millisecond)
	if writes.Load() != 2 {
		t.Fatalf("the window a Flush closed wrote again: %d writes", writes.Load())
	}

	fail.Store(true)
	w.Hand(func() { kept.Add(1) })
	time.Sleep(ReferenceWindow + 100*time.Millisecond)
	fail.Store(false)
	if err := w.Flush(); err == nil {
		t.Fatal("a window's failed write was not returned by the next Flush")
	}
}

package engine_test

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// survivors opens what a power cut at this moment leaves of mem (nothing
// that was not synced survives) and returns session id's events, or nil
// if the session is not there.
func survivors(t *testing.T, mem *vfs.MemFS, id string) []event.Event {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem.CrashClone(vfs.CrashConfig{}), CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Open(ctx, id, store.Read)
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestWindowMakesDurable: events handed to Append or Enqueue and never
// flushed survive a power cut once their durability window has ended
// (Options.WriteBehindWindow), and only then; each window ends with one
// background flush (Metrics.WindowFlushes), and the first event handed
// over after it opens the next. With FlushOnly the window's end makes
// nothing durable: the enqueued events are appended, and lost in the cut.
func TestWindowMakesDurable(t *testing.T) {
	for _, flushOnly := range []bool{false, true} {
		name := map[bool]string{false: "window", true: "flush-only"}[flushOnly]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			clock := &testclock.Clock{}
			db, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem, NoPreallocate: true, CompactInterval: -1,
				AfterFunc: clock.AfterFunc, FlushOnly: flushOnly})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			appended, enqueued := testgen.Events(0, 3, 200), testgen.Events(3, 2, 200)
			if err := h.Append(ctx, appended...); err != nil {
				t.Fatal(err)
			}
			if err := h.Enqueue(enqueued...); err != nil {
				t.Fatal(err)
			}
			if got := survivors(t, mem, "s"); got != nil {
				t.Fatalf("a cut inside the first window kept %d events: nothing was synced", len(got))
			}
			clock.Advance(handle.DefaultWindow - 1)
			if got := survivors(t, mem, "s"); got != nil {
				t.Fatalf("a cut just before the window's end kept %d events", len(got))
			}
			clock.Advance(1) // the window ends
			want := append(appended, enqueued...)
			got := survivors(t, mem, "s")
			if flushOnly {
				if got != nil {
					t.Fatalf("FlushOnly: the window's end made %d events durable", len(got))
				}
				if m := db.Metrics(); m.WindowFlushes != 0 {
					t.Fatalf("FlushOnly: %d window flushes", m.WindowFlushes)
				}
				return
			}
			engine.SameEvents(t, "after the window, what survives the cut", got, want)
			if m := db.Metrics(); m.WindowFlushes != 1 || m.WindowFlushErrors != 0 || m.Flushes != 0 {
				t.Fatalf("window flushes %d (errors %d), flushes %d; want 1, 0, 0", m.WindowFlushes, m.WindowFlushErrors, m.Flushes)
			}
			// A quiet handle opens no window; the next event opens one.
			clock.Advance(10 * handle.DefaultWindow)
			if m := db.Metrics(); m.WindowFlushes != 1 {
				t.Fatalf("a handle with nothing handed over flushed: %d window flushes", m.WindowFlushes)
			}
			more := testgen.Events(5, 2, 200)
			if err := h.Append(ctx, more...); err != nil {
				t.Fatal(err)
			}
			clock.Advance(handle.DefaultWindow)
			want = append(want, more...)
			engine.SameEvents(t, "after the second window", survivors(t, mem, "s"), want)
			// A window whose events a Flush made durable ends without a
			// sync.
			if err := h.Append(ctx, testgen.Events(7, 1, 200)...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			before := db.Metrics()
			clock.Advance(handle.DefaultWindow)
			if m := db.Metrics(); m.WindowFlushes != before.WindowFlushes+1 || m.Fsyncs != before.Fsyncs {
				t.Fatalf("the window after a Flush: %d window flushes and %d fsyncs, want %d and %d",
					m.WindowFlushes, m.Fsyncs, before.WindowFlushes+1, before.Fsyncs)
			}
			// A closed handle's window does not fire (its Close flushed).
			if err := h.Append(ctx, testgen.Events(8, 1, 200)...); err != nil {
				t.Fatal(err)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			clock.Advance(handle.DefaultWindow)
			if m := db.Metrics(); m.WindowFlushes != 3 {
				t.Fatalf("after the handle's Close: %d window flushes, want 3", m.WindowFlushes)
			}
		})
	}
}

// TestWindowFlushOnAFullDisk: a window's flush that meets a full disk
// fails without failing anything the host called: it is counted and
// logged, the events stay the session's, and the host's next Flush
// returns the error; once space is back a Flush writes them all.
func TestWindowFlushOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	clock := &testclock.Clock{}
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: ff, NoPreallocate: true, CompactInterval: -1, AfterFunc: clock.AfterFunc})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 4, 300)
	if err := h.Append(ctx, want...); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
	clock.Advance(handle.DefaultWindow)
	if m := db.Metrics(); m.WindowFlushes != 1 || m.WindowFlushErrors != 1 {
		t.Fatalf("window flushes %d, errors %d; want 1, 1", m.WindowFlushes, m.WindowFlushErrors)
	}
	if err := h.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on the full disk: %v, want %v", err, syscall.ENOSPC)
	}
	ff.Clear()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	checkLogs(t, db, map[string][]event.Event{"s": want})
}

package engine_test

// An Append that fills frames returns while they are compressed and
// placed behind it: the events are readable at once, the handle's next
// Flush (or Close, or the DB's) waits for them, and a write behind that
// fails leaves them with the handle for that flush.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestAppendWritesBehindReadable: batches of several frames each, read
// right after each Append through the writer, a read handle and
// ReadRange; after Close and a reopen, every event is as appended.
func TestAppendWritesBehindReadable(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := func() *engine.Options {
		return &engine.Options{FS: mem, SegmentSize: 1 << 20, FrameBytes: 8 << 10, CompactInterval: -1}
	}
	db, err := engine.OpenStore(t, "/db", opts())
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "bulk", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "bulk", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	var want []event.Event
	for b := range 20 { // ~1.2 MiB: rolls a segment
		evs := testgen.Events(uint64(len(want)), 200, 300)
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		want = append(want, evs...)
		for name, rd := range map[string]*engine.Handle{"writer": h, "reader": r} {
			from := max(len(want)-250, 0)
			got, err := rd.Read(ctx, from, -1)
			if err != nil {
				t.Fatalf("batch %d, %s: %v", b, name, err)
			}
			if reflect.DeepEqual(want[from:], got) {
				continue
			}
			if diff := cmp.Diff(want[from:], got); diff != "" {
				t.Fatalf("batch %d, %s reads right after Append (-want +got):\n%s", b, name, diff)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, "/db", opts())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkLogs(t, db, map[string][]event.Event{"bulk": want})
}

// TestAppendWritesBehindOnAFullDisk: the writes behind two Appends meet a
// full disk. Append returns nil (the events are the session's), the
// failure is logged, and the Flush fails with ENOSPC while the disk stays
// full; once space is back the next Flush stores every event, and a power
// cut then keeps them.
func TestAppendWritesBehindOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	var logged bytes.Buffer
	opts := &engine.Options{FS: ff, NoPreallocate: true, SegmentSize: 1 << 20, FrameBytes: 8 << 10, CompactInterval: -1,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 10, 300)
	if err := h.Append(ctx, want...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Name: ".seg", Err: syscall.ENOSPC})
	for range 2 {
		evs := testgen.Events(uint64(len(want)), 100, 300) // ~30 KiB: frames to write
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatalf("Append on a full disk: %v, want nil (its frames are written behind it)", err)
		}
		want = append(want, evs...)
	}
	if got, err := h.Read(ctx, 0, -1); err != nil || len(got) != len(want) {
		t.Fatalf("read with the writes failing: %d events, %v; want %d", len(got), err, len(want))
	}
	err = h.Flush(ctx)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush on a full disk: %v, want ENOSPC", err)
	}
	if !strings.Contains(logged.String(), "writing a session's frames failed") {
		t.Errorf("the failed write behind the second Append was not logged; log:\n%s", logged.String())
	}
	ff.Clear()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("Flush once space is back: %v", err)
	}
	checkLogs(t, db, map[string][]event.Event{"s": want})
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: true, CompactInterval: -1})
	if err != nil {
		t.Fatalf("reopen after a power cut: %v", err)
	}
	defer db2.Close()
	checkLogs(t, db2, map[string][]event.Event{"s": want})
}

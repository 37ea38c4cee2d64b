package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/wal"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// TestForkWithoutItsMarker: a crash that kept a fork's header but not its
// marker (the two frames of one placement, split by a roll, or a torn
// write) leaves a fork that never was: a read-only open does not list
// it, a write open ends it with a tombstone, and its ID can be created
// again.
func TestForkWithoutItsMarker(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := &Options{FS: mem}
	db, err := openStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.Create(ctx, store.Header{ID: "p", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, event.Event{Seq: 0, Type: "turn/start", Time: 1, Data: json.RawMessage(`{"turn":0}`)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	puid := db.mu.sessions["p"].uid
	db.mu.Unlock()
	hdr, err := store.PrepareForkHeader(store.Header{ID: "c", CreatedAt: 2}, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.HeaderRecord{Header: hdr, UID: store.NewIncarnation(), Inherited: 1, Events: 2, Fork: []store.ForkLink{{ID: "p", UID: puid, Cut: 1}}}
	he, err := db.encoder(false).Header("c", store.MarshalHeaderRecord(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.log.Place(&wal.Placement{Frames: []*segment.Encoded{he}}); err != nil {
		t.Fatal(err)
	}
	if err := db.sync(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db.Close()

	ro, err := openStore(t, "/db", &Options{FS: crashed, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Stat(ctx, "c"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("read-only open: the fork without its marker is %v, want not found", err)
	}
	ro.Close()
	db, err = openStore(t, "/db", &Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Stat(ctx, "c"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("write open: the fork without its marker is %v, want not found", err)
	}
	c, err := db.Fork(ctx, "p", 1, store.Header{ID: "c", CreatedAt: 3})
	if err != nil {
		t.Fatalf("fork again onto the abandoned id: %v", err)
	}
	if evs, err := c.Read(ctx, 0, -1); err != nil || len(evs) != 2 {
		t.Errorf("the new fork: %d events, %v", len(evs), err)
	}
	db.Close()
	db, err = openStore(t, "/db", &Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if st, err := db.Stat(ctx, "c"); err != nil || st.EventCount != 2 {
		t.Errorf("after a reopen: %+v, %v", st, err)
	}
}

// TestForkBesideACompaction: a compaction that moves the parent's frames
// between Fork's look at them and its placement: the fork takes them as
// they are at its placement (before, it kept the old offsets, and its
// reads failed).
func TestForkBesideACompaction(t *testing.T) {
	ctx := context.Background()
	db, err := openStore(t, t.TempDir(), &Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Interleaved, so that dropping "dead" moves every frame of "p".
	p, err := db.Create(ctx, store.Header{ID: "p", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := db.Create(ctx, store.Header{ID: "dead", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(100) {
		for _, h := range []*Handle{d, p} {
			e := event.Event{Seq: seq, Type: "user/message", Time: 1, Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"%x"}`, seq, sha256.Sum256([]byte(h.ID()+fmt.Sprint(seq)))))}
			if err := h.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
			if seq%10 == 9 {
				if err := h.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	d.Close()
	if err := db.Delete(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	want, err := p.Read(ctx, 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: -1}); err != nil { // (only seals)
		t.Fatal(err)
	}
	moved := false
	db.knobs.forkPlacing = func() {
		rep, err := db.Compact(ctx, CompactOptions{LiveRatio: 0.99})
		moved = err == nil && len(rep.Rewritten) > 0
	}
	defer func() { db.knobs.forkPlacing = nil }()
	c, err := db.Fork(ctx, "p", 50, store.Header{ID: "c", CreatedAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Fatal("the compaction moved nothing: the test tests nothing")
	}
	got, err := c.Read(ctx, 0, 50)
	if err != nil {
		t.Fatalf("read of the fork: %v", err)
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("fork event %d differs from its parent's", i)
		}
	}
}

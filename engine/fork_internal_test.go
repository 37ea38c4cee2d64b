package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/vfs"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
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
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.Create(ctx, Header{ID: "p", CreatedAt: 1})
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
	hdr, err := store.PrepareForkHeader(Header{ID: "c", CreatedAt: 2}, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.HeaderRecord{Header: hdr, UID: store.NewIncarnation(), Inherited: 1, Events: 2, Fork: []store.ForkLink{{ID: "p", UID: puid, Cut: 1}}}
	he, err := db.enc.Header("c", store.MarshalHeaderRecord(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.log.place(&placement{frames: []*segment.Encoded{he}}); err != nil {
		t.Fatal(err)
	}
	if err := db.sync(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db.Close()

	ro, err := Open("/db", &Options{FS: crashed, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Stat(ctx, "c"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("read-only open: the fork without its marker is %v, want not found", err)
	}
	ro.Close()
	db, err = Open("/db", &Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Stat(ctx, "c"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("write open: the fork without its marker is %v, want not found", err)
	}
	c, err := db.Fork(ctx, "p", 1, Header{ID: "c", CreatedAt: 3})
	if err != nil {
		t.Fatalf("fork again onto the abandoned id: %v", err)
	}
	if evs, err := c.Read(ctx, 0, -1); err != nil || len(evs) != 2 {
		t.Errorf("the new fork: %d events, %v", len(evs), err)
	}
	db.Close()
	db, err = Open("/db", &Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if st, err := db.Stat(ctx, "c"); err != nil || st.EventCount != 2 {
		t.Errorf("after a reopen: %+v, %v", st, err)
	}
}

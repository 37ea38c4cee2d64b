package compat_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/compat"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
)

func openStore(t *testing.T) (store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return store.Wrap[*engine.Handle](db), dir
}

func ev(seq uint64, typ, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: 1000 + int64(seq), Data: json.RawMessage(data)}
}

// cutTurn is a turn a crash cut inside its step: a call asked for and
// started, no result.
func cutTurn() []event.Event {
	return []event.Event{
		ev(0, "turn/start", `{"turn":0}`),
		ev(1, "step/start", `{"turn":0,"step":0}`),
		ev(2, "assistant/message", `{"turn":0,"step":0,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}]}}`),
		ev(3, "tool/call", `{"turn":0,"step":0,"callId":"c1","name":"ls","arguments":"{}"}`),
	}
}

// put makes session id holding evs, flushed, its handle closed.
func put(t *testing.T, s store.Store, id string, evs []event.Event) {
	t.Helper()
	ctx := context.Background()
	h, err := s.Create(ctx, store.Header{ID: id, CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// Locate is the session's log in the reference layout under root, an
// absolute path, and creates nothing.
func TestLocate(t *testing.T) {
	root := t.TempDir()
	rel, err := filepath.Rel(mustWd(t), root)
	if err != nil {
		t.Fatal(err)
	}
	h := store.Header{Version: 3, ID: "agent/7", CreatedAt: 1, Cwd: "/repo/x"}
	got, err := compat.Locate(rel, h, false)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "--repo-x--", "agent~002F7", "session.v3.jsonl")
	if got != want {
		t.Errorf("Locate = %s, want %s", got, want)
	}
	if z, _ := compat.Locate(root, h, true); z != want+".zstd" {
		t.Errorf("Locate compressed = %s", z)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("Locate created %d entries", len(ents))
	}
	if _, err := compat.Locate(root, store.Header{ID: ""}, false); err == nil {
		t.Error("Locate of an empty ID: no error")
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// ReadRaw is the session's reference JSONL text: it parses back to the
// stored header and events, byte for byte; a missing session is
// ErrSessionNotFound.
func TestReadRaw(t *testing.T) {
	if !compat.SupportsRawArtifacts {
		t.Fatal("SupportsRawArtifacts is false")
	}
	s, _ := openStore(t)
	evs := enginetest.OneTurn()
	put(t, s, "s", evs)
	raw, err := compat.ReadRaw(context.Background(), s, "s")
	if err != nil {
		t.Fatal(err)
	}
	log, err := jsonl.Parse(raw.Content, false)
	if err != nil {
		t.Fatalf("ReadRaw's text does not parse: %v\n%s", err, raw.Content)
	}
	if log.Header.ID != "s" || log.Header.Version != jsonl.Version || raw.Header.ID != "s" {
		t.Errorf("header %+v, artifact header %+v", log.Header, raw.Header)
	}
	if diff := cmp.Diff(evs, log.Events); diff != "" {
		t.Errorf("ReadRaw's events (-stored +raw):\n%s", diff)
	}
	if want, _ := jsonl.Encode(raw.Header, evs, false, nil); string(want) != string(raw.Content) {
		t.Errorf("ReadRaw is not export's text:\n%s\nwant\n%s", raw.Content, want)
	}
	if _, err := compat.ReadRaw(context.Background(), s, "nope"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("ReadRaw of a missing session: %v", err)
	}
}

// Prepare after Inspect reuses the kept view (the log is not read again)
// and appends the closers Inspect showed; a session written since is read
// again; the cache keeps the 5 most recently inspected.
func TestPreparer(t *testing.T) {
	ctx := context.Background()
	s, _ := openStore(t)
	p := compat.NewPreparer(s, 0)
	put(t, s, "cut", cutTurn())
	in, err := p.Inspect(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Events) != 4 || len(in.Closers) != 3 || p.Len() != 1 {
		t.Fatalf("Inspect: %d events, %d closers, %d kept", len(in.Events), len(in.Closers), p.Len())
	}
	again, err := p.Inspect(ctx, "cut")
	if err != nil || &again.Events[0] != &in.Events[0] {
		t.Errorf("a second Inspect of an unchanged session was read again (%v)", err)
	}
	pr, err := p.Prepare(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Reused || len(pr.Closers) != 3 || len(pr.Events) != 7 || p.Len() != 0 {
		t.Errorf("Prepare after Inspect: reused %v, %d closers, %d events, %d kept", pr.Reused, len(pr.Closers), len(pr.Events), p.Len())
	}
	if _, err := p.Prepare(ctx, "cut"); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Errorf("Prepare of a prepared session: %v, want ErrAlreadyOwned", err)
	}
	if err := pr.Handle.Close(); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Open(ctx, "cut", store.Read)
	stored, err := r.Read(ctx, 0, -1)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(cutTurn(), in.Closers...), stored); diff != "" {
		t.Errorf("stored after Prepare (-want +got):\n%s", diff)
	}

	// Written after the Inspect: Prepare reads the log again, and closes
	// the turn as it now is.
	put(t, s, "moving", cutTurn()[:2])
	if in, err = p.Inspect(ctx, "moving"); err != nil || len(in.Closers) != 2 {
		t.Fatalf("Inspect: %v, %d closers", err, len(in.Closers))
	}
	h, err := s.Open(ctx, "moving", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, cutTurn()[2:]...); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if in, err = p.Inspect(ctx, "moving"); err != nil || len(in.Events) != 4 || len(in.Closers) != 3 {
		t.Fatalf("Inspect of a session written since its last Inspect: %v, %d events, %d closers (the old view?)", err, len(in.Events), len(in.Closers))
	}
	// Deleted and made again with as many events: another revision, the
	// view is not the session's.
	if err := s.Delete(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	put(t, s, "moving", append(cutTurn()[:3], ev(3, "step/end", `{"turn":0,"step":0}`)))
	pr, err = p.Prepare(ctx, "moving")
	if err != nil {
		t.Fatal(err)
	}
	if pr.Reused || len(pr.Closers) != 1 || len(pr.Events) != 5 {
		t.Errorf("Prepare of a session made again since its Inspect: reused %v, %d closers, %d events", pr.Reused, len(pr.Closers), len(pr.Events))
	}
	pr.Handle.Close()

	// Least recently used out, at 5.
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		put(t, s, id, cutTurn())
		if _, err := p.Inspect(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if p.Len() != compat.DefaultCacheSize {
		t.Errorf("%d kept, want %d", p.Len(), compat.DefaultCacheSize)
	}
	for _, c := range []struct {
		id     string
		reused bool
	}{{"a", false}, {"f", true}, {"b", true}} {
		pr, err := p.Prepare(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Reused != c.reused {
			t.Errorf("Prepare %s: reused %v, want %v", c.id, pr.Reused, c.reused)
		}
		pr.Handle.Close()
	}
}

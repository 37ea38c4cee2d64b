package engine

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
	"github.com/seglog/seglog/testgen"
)

// turnLogs are the logs of the sessions of TestTurnStateFromTheIndex:
// agent-loop logs of a few hundred events, cut at various places (most
// inside a turn).
func turnLogs() map[string][]event.Event {
	logs := map[string][]event.Event{}
	for i := range 8 {
		logs[fmt.Sprintf("s%d", i)] = testgen.AgentLog(uint64(100+i), 150+i*61, 24)
	}
	return logs
}

// openTurnLen is how many events a fold of log's open turn reads: from
// its last turn boundary on, or the whole log if it has none.
func openTurnLen(log []event.Event) uint64 {
	b := recovery.LastTurnBoundary(log)
	if b == 0 {
		return uint64(len(log))
	}
	return uint64(len(log)) - (b - 1)
}

// wantTurnOf checks that Inspect of id (its events left out) gives the
// turn state and the closers of a fold of the whole log, and, if most
// >= 0, that it read at most most events to fold them.
func wantTurnOf(t *testing.T, what string, db *DB, id string, log []event.Event, most int) {
	t.Helper()
	ctx := context.Background()
	st, err := recovery.Fold(log)
	if err != nil {
		t.Fatal(err)
	}
	before := db.Metrics().TurnEvents
	in, err := db.Inspect(ctx, id, store.InspectEvents(0, 0))
	if err != nil {
		t.Fatalf("%s: Inspect(%s): %v", what, id, err)
	}
	read := db.Metrics().TurnEvents - before
	if want := storekit.TurnStateOf(st); !reflect.DeepEqual(in.Turn, want) {
		t.Errorf("%s: %s's turn state %+v, the whole log's %+v", what, id, in.Turn, want)
	}
	if want := recovery.Closers(st); !reflect.DeepEqual(in.Closers, want) {
		t.Errorf("%s: %s's closers %+v, the whole log's %+v", what, id, in.Closers, want)
	}
	if most >= 0 && read > uint64(most) {
		t.Errorf("%s: Inspect(%s) read %d events to fold its open turn, want at most %d (of %d)", what, id, read, most, len(log))
	}
}

// rewriteTurnHints sets the TurnFrom of every session record in the
// index of the closed store in dir to what hint makes of it.
func rewriteTurnHints(t *testing.T, dir string, hint func(s index.Session) uint64) {
	t.Helper()
	x, err := index.Open(dir+"/index.db", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	cp, err := x.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	u := &index.Update{Checkpoint: cp}
	err = x.Sessions(func(s index.Session) error {
		s.TurnFrom = hint(s)
		u.Sessions = append(u.Sessions, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Apply(u); err != nil {
		t.Fatal(err)
	}
}

// The index keeps where each session's open turn starts: after a restart
// Inspect (and Resume) read that turn, not the log, and give what a fold
// of the whole log gives, whatever the index holds (a record of an older
// build without the hint, a hint that names no boundary, no index at
// all), after compaction and for forks.
func TestTurnStateFromTheIndex(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	logs := turnLogs()
	db, err := openStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, log := range logs {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		for at := 0; at < len(log); at += 50 {
			if err := h.Append(ctx, log[at:min(at+50, len(log))]...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	reopen := func() {
		t.Helper()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = openStore(t, dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	each := func(what string, most func(log []event.Event) int) {
		t.Helper()
		for id, log := range logs {
			wantTurnOf(t, what, db, id, log, most(log))
		}
	}
	openTurn := func(log []event.Event) int { return int(openTurnLen(log)) }
	whole := func(log []event.Event) int { return len(log) }

	each("in the writing process", openTurn)
	reopen()
	each("after a restart", openTurn)

	// An index an older build wrote has no hint: the first fold reads
	// the log whole, and records the boundary it found.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteTurnHints(t, dir, func(index.Session) uint64 { return 0 })
	if db, err = openStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	each("an older build's index", openTurn) // (read back from the end)
	each("an older build's index, folded once", openTurn)
	reopen()
	each("an older build's index, folded once, after a restart", openTurn)

	// A hint that names an event that is no turn boundary (damage the
	// index cannot see) is checked, and the log folded from seq 0.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// (A hint just past the last event that is no turn boundary.)
	noBoundary := func(s index.Session) uint64 {
		log := logs[s.ID]
		for i := len(log) - 1; i > 0; i-- {
			if !recovery.IsTurnBoundary(log[i].Type) {
				return uint64(i) + 1
			}
		}
		return 0
	}
	rewriteTurnHints(t, dir, noBoundary)
	if db, err = openStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	// (Through a handle's TurnState first: it keeps the hint it found, as
	// Inspect does.)
	byHandle := func(what string, most func(log []event.Event) int) {
		t.Helper()
		for id, log := range logs {
			st, err := recovery.Fold(log)
			if err != nil {
				t.Fatal(err)
			}
			h, err := db.Open(ctx, id, store.Read)
			if err != nil {
				t.Fatal(err)
			}
			before := db.Metrics().TurnEvents
			ts, err := h.TurnState(ctx)
			read := db.Metrics().TurnEvents - before
			if err != nil || !reflect.DeepEqual(ts, storekit.TurnStateOf(st)) {
				t.Errorf("%s: %s's TurnState %+v, %v; the whole log's %+v", what, id, ts, err, storekit.TurnStateOf(st))
			}
			if read > uint64(most(log)) {
				t.Errorf("%s: TurnState of %s read %d events, want at most %d (of %d)", what, id, read, most(log), len(log))
			}
			h.Close()
		}
	}
	byHandle("a hint that is no boundary, by TurnState", whole)
	byHandle("a hint that is no boundary, by TurnState, folded once", openTurn)
	each("a hint that is no boundary, by TurnState, then Inspect", openTurn)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteTurnHints(t, dir, noBoundary)
	if db, err = openStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	each("a hint that is no boundary", whole)
	each("a hint that is no boundary, folded once", openTurn)

	// No index: rebuilt from the segments, it holds no hint.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := index.Remove(dir + "/index.db"); err != nil {
		t.Fatal(err)
	}
	if db, err = openStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	each("a rebuilt index", openTurn)
	reopen()
	each("a rebuilt index, folded once, after a restart", openTurn)

	// A hint many turns behind, as a process killed after writing turns
	// its index never checkpointed leaves it: a real boundary, the first;
	// the fold reads back from the log's end to the open turn, not
	// forward from the hint.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteTurnHints(t, dir, func(s index.Session) uint64 {
		for _, e := range logs[s.ID] {
			if recovery.IsTurnBoundary(e.Type) {
				return e.Seq + 1
			}
		}
		return 0
	})
	if db, err = openStore(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	each("a hint turns behind", openTurn)

	// Compaction moves frames, not seqs: the hints hold.
	for _, id := range []string{"s0", "s3"} {
		if err := db.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		delete(logs, id)
	}
	if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
		t.Fatal(err)
	}
	each("after a compaction", openTurn)
	reopen()
	each("after a compaction and a restart", openTurn)

	// A fork inherits its parent's first n events and, where it is
	// before the cut, its parent's hint.
	for _, n := range []uint64{1, 40, uint64(len(logs["s5"]) - 1), uint64(len(logs["s5"]))} {
		id := fmt.Sprintf("f%d", n)
		f, err := db.Fork(ctx, "s5", n, store.Header{ID: id, CreatedAt: 2})
		if err != nil {
			t.Fatal(err)
		}
		log, err := f.Read(ctx, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		logs[id] = log
		wantTurnOf(t, "a fork", db, id, log, -1)
	}
	reopen()
	each("forks after a restart", openTurn)

	// Resume appends the closers a fold of the whole log asks for; its
	// turn/end is the next fold's start.
	for id, log := range logs {
		st, _ := recovery.Fold(log)
		before := db.Metrics().TurnEvents
		h, closers, err := db.Resume(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if read := db.Metrics().TurnEvents - before; read > openTurnLen(log) {
			t.Errorf("Resume(%s) read %d events, its open turn has %d", id, read, openTurnLen(log))
		}
		if want := recovery.Closers(st); !reflect.DeepEqual(closers, want) {
			t.Errorf("Resume(%s): closers %+v, want %+v", id, closers, want)
		}
		if logs[id], err = h.Read(ctx, 0, -1); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	each("resumed, after a restart", openTurn)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

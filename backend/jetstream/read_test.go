package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// writeShort writes session id through st: msgs flushes of 3 events each
// (a message each, after the header). It returns the events.
func writeShort(t *testing.T, st *Store, id string, msgs int) []event.Event {
	t.Helper()
	ctx := context.Background()
	h, err := st.Create(ctx, enginetest.Meta(id))
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 3*msgs, 100)
	for i := 0; i < len(evs); i += 3 {
		if err := h.Append(ctx, evs[i:i+3]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// reader opens another store instance over o's stream, on a connection of
// its own, and returns it with the connection (whose sent messages count
// its requests).
func reader(t *testing.T, url string, o *Options) (*Store, *nats.Conn) {
	t.Helper()
	ro := *o
	ro.Host, ro.Create = "", false
	nc := connect(t, url)
	st, err := Open(context.Background(), nc, &ro)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, nc
}

// readAll opens session id for read through st and reads it whole.
func readAll(t *testing.T, st *Store, id string) []event.Event {
	t.Helper()
	ctx := context.Background()
	h, err := st.Open(ctx, id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func sameEvents(t *testing.T, what string, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("%s: event %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestReadBatched: a session of 41 messages is indexed and read whole by
// another store instance in 3 requests (the last message and a direct
// batch for the open; the last message for the read, which takes the
// batches the open read), and a part of it read again in 2 (before, one
// request per message, twice over: 82; and 4). On the cluster, where a
// replica that is behind may answer, the events are all there.
func TestReadBatched(t *testing.T) { onServerAndCluster(t, testReadBatched) }

func testReadBatched(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	want := writeShort(t, openStoreAt(t, url, o), "s", 40)
	st, nc := reader(t, url, o)
	before := nc.Stats().OutMsgs
	h, err := st.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	opened := nc.Stats().OutMsgs - before
	sameEvents(t, "read whole", got, want)
	before = nc.Stats().OutMsgs
	part, err := h.Read(ctx, 30, 9)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read of 30..38", part, want[30:39])
	read := nc.Stats().OutMsgs - before
	t.Logf("open and read: %d requests; read of a part: %d", opened, read)
	if url == srvURL && (opened > 3 || read > 2) {
		t.Errorf("open and read whole: %d requests, want at most 3; read of a part: %d, want at most 2", opened, read)
	}
}

// TestReadBehindReplica: a direct get answered by a replica that holds
// only a prefix of the stream (directHook) ends early; the read goes on
// with the leader's gets and returns every event, whether the replica
// holds part of the session, none of it, or all but its last message.
func TestReadBehindReplica(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	want := writeShort(t, openStore(t, o), "s", 20)
	probe, _ := reader(t, srvURL, o)
	m, err := probe.lastMsg(ctx, probe.subject("s"))
	if err != nil {
		t.Fatal(err)
	}
	last := m.Sequence
	for _, c := range []struct {
		name  string
		holds uint64
	}{
		{"half", last - 10},
		{"nothing", 1}, // (the stream's first message is the session's header)
		{"all but the last", last - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, nc := reader(t, srvURL, o)
			hook := func(string, uint64) uint64 { return c.holds }
			st.directHook.Store(&hook)
			before := nc.Stats().OutMsgs
			sameEvents(t, "read", readAll(t, st, "s"), want)
			t.Logf("%d requests", nc.Stats().OutMsgs-before)
			// The same view again, a replica that has all: nothing is
			// indexed twice or missed.
			st.directHook.Store(nil)
			sameEvents(t, "read again", readAll(t, st, "s"), want)
		})
	}
}

// TestReadDamagedIndex: a batch message that does not continue the
// session (a gap, an overlap), or whose index headers are not its frame's,
// is reported as corruption at its stream sequence, by a store that
// indexes the session from the start and by one that had read it before.
func TestReadDamagedIndex(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		first, n    uint64 // the index headers
		frameFirst  uint64 // the frame's first seq
		atOpen      bool   // reported by the open (the index), else by the read
		wantMessage string
	}{
		{"gap", 8, 2, 8, true, "batch starts at seq 8, expected 6"},
		{"overlap", 4, 2, 4, true, "batch starts at seq 4, expected 6"},
		{"headers not the frame's", 6, 2, 7, false, "does not hold the indexed events 6..8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := freshOptions()
			w := openStore(t, o)
			writeShort(t, w, "s", 2) // events 0..5
			seen, _ := reader(t, srvURL, o)
			readAll(t, seen, "s")
			e, err := w.enc.Events("s", c.frameFirst, testgen.Events(c.frameFirst, int(c.n), 100))
			if err != nil {
				t.Fatal(err)
			}
			ack, err := w.js.PublishMsg(ctx, natsMsg(w.subject("s"), segment.MarshalFrame(e), c.first, int(c.n)))
			if err != nil {
				t.Fatal(err)
			}
			fresh, _ := reader(t, srvURL, o)
			for name, st := range map[string]*Store{"fresh": fresh, "seen": seen} {
				h, err := st.Open(ctx, "s", store.Read)
				if err == nil {
					_, err = h.Read(ctx, 0, -1)
					h.Close()
					if c.atOpen && name == "fresh" {
						t.Errorf("%s: the open took the damaged index", name)
					}
				}
				var ce *store.CorruptionError
				if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("%s: %v, want a CorruptionError", name, err)
				}
				if where := fmt.Sprintf("#%d", ack.Sequence); !strings.HasSuffix(ce.Path, where) || !strings.Contains(ce.Reason, c.wantMessage) {
					t.Errorf("%s: %v, want %q at %s", name, err, c.wantMessage, where)
				}
			}
		})
	}
}

// TestClusterReadAfterFlush: on a 3-node cluster with 3 replicas, a
// reader connected to each server (so that its direct gets go to that
// server's replica, the leader's or a follower's that may be behind)
// reads every event as soon as another host's Flush acknowledged it, 60
// times over.
func TestClusterReadAfterFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	ctx := context.Background()
	c, nc := startCluster(t)
	o := freshOptions()
	o.Replicas = 3
	w, err := openCluster(t, nc, o).Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var hs []*Handle
	for _, srv := range c.Servers {
		st, _ := reader(t, srv.ClientURL(), o)
		if err := w.Flush(ctx); err != nil { // (the header: the session exists)
			t.Fatal(err)
		}
		h, err := st.Open(ctx, "s", store.Read)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hs = append(hs, h)
	}
	want := testgen.Events(0, 3*60, 100)
	for i := 0; i < len(want); i += 3 {
		if err := w.Append(ctx, want[i:i+3]...); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for j, h := range hs {
			got, err := h.Read(ctx, 0, -1)
			if err != nil {
				t.Fatalf("reader on server %d: %v", j, err)
			}
			sameEvents(t, fmt.Sprintf("reader on server %d after flush %d", j, i/3), got, want[:i+3])
		}
	}
}

// TestReadDamagedLong: a read of many batches (decoded on several
// goroutines) over a message whose frame was damaged in flight reports it
// at its stream sequence; the intact prefix reads.
func TestReadDamagedLong(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	w := openStore(t, o)
	want := writeShort(t, w, "s", 40) // events 0..119
	e, err := w.enc.Events("s", 120, testgen.Events(120, 2, 100))
	if err != nil {
		t.Fatal(err)
	}
	data := segment.MarshalFrame(e)
	data[len(data)-9] ^= 0x40
	ack, err := w.js.PublishMsg(ctx, natsMsg(w.subject("s"), data, 120, 2))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := reader(t, srvURL, o)
	h, err := st.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.Read(ctx, 0, -1)
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || !strings.HasSuffix(ce.Path, fmt.Sprintf("#%d", ack.Sequence)) {
		t.Fatalf("read over the damaged message: %v, want a CorruptionError at #%d", err, ack.Sequence)
	}
	got, err := h.Read(ctx, 0, 120)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "the intact prefix", got, want)
}

// TestReadWithoutDirectAnswers (issue 44, point 5): a replica that never
// answers a direct get (nats-server sends a client's direct gets to any
// replica of the stream, a silent server's too) costs a read one
// Options.Timeout, then the store reads through the leader's gets: a
// fresh host opens and reads the session, and its Wait wakes on the next
// flush, where each used to fail with "direct get ... context deadline
// exceeded". For directQuiet the store asks no replica again: one get
// goes unanswered, not one per look.
func TestReadWithoutDirectAnswers(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	w := openStoreAt(t, srvURL, o)
	h, err := w.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := h.Append(ctx, testgen.Events(uint64(i*3), 3, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ro := *o
	ro.Host, ro.Timeout = "reader", 300*time.Millisecond
	r := openStoreAt(t, srvURL, &ro)
	r.directDrop.Store(true)
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatalf("a read open with no direct get answered: %v", err)
	}
	evs, err := rh.Read(ctx, 0, -1)
	if err != nil || len(evs) != 15 {
		t.Fatalf("read %d events, %v; want 15", len(evs), err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		n, err := rh.Wait(wctx, 15)
		if err == nil && n != 18 {
			err = fmt.Errorf("woke at %d events, want 18", n)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := h.Append(ctx, testgen.Events(15, 3, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait with no direct get answered: %v", err)
	}
	if evs, err := rh.Read(ctx, 15, -1); err != nil || len(evs) != 3 {
		t.Fatalf("read %d events after the Wait, %v; want 3", len(evs), err)
	}
	if n := r.directDropped.Load(); n != 1 {
		t.Errorf("%d direct gets went unanswered, want 1 (then the store asks the leader for %v)", n, directQuiet)
	}
}

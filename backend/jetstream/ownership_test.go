package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

func openStore(t *testing.T, o *Options) *Store {
	t.Helper()
	st, err := Open(context.Background(), connect(t, srvURL), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Two hosts share the stream: one writer per session at a time; the other
// reads what the writer flushed and takes over once the writer closes.
func TestTwoHosts(t *testing.T) {
	ctx := context.Background()
	oa := freshOptions()
	ob := *oa
	oa.Host, ob.Host = "host-a", "host-b"
	a, b := openStore(t, oa), openStore(t, &ob)
	w, err := a.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, enginetest.Meta("s")); !errors.Is(err, store.ErrSessionExists) {
		t.Errorf("create on host b while host a creates: %v, want ErrSessionExists", err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = b.Open(ctx, "s", store.Write)
	var owned *store.OwnedError
	if !errors.Is(err, store.ErrAlreadyOwned) || !errors.As(err, &owned) || owned.Host != "host-a" || !strings.Contains(err.Error(), `on host "host-a"`) {
		t.Errorf("write open on host b: %v, want ErrAlreadyOwned naming host-a", err)
	}
	r, err := b.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Read(ctx, 0, -1); err != nil || len(got) != 6 {
		t.Fatalf("host b reads %d events, %v", len(got), err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	wb, err := b.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatalf("write open on host b after host a closed: %v", err)
	}
	if err := wb.Append(ctx, enginetest.Turn2()...); err != nil {
		t.Fatal(err)
	}
	if err := wb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ra, err := a.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ra.Read(ctx, 0, -1); err != nil || len(got) != 8 || got[7].Seq != 7 {
		t.Fatalf("host a reads %d events, %v", len(got), err)
	}
	sa, _ := a.Stat(ctx, "s")
	sb, _ := b.Stat(ctx, "s")
	if sa.Revision != sb.Revision || sa.EventCount != 8 {
		t.Errorf("revisions differ across hosts: %+v vs %+v", sa, sb)
	}
}

// A writer whose lease expired (it stopped renewing: a paused or
// partitioned host) and was taken by another host gets ErrOwnershipLost,
// both from its lease and from the expected-sequence check of its next
// publish; the new writer's events are the ones kept.
func TestStaleWriter(t *testing.T) {
	ctx := context.Background()
	oa := freshOptions()
	oa.LeaseTTL = time.Second
	ob := *oa
	oa.Host, ob.Host = "host-a", "host-b"
	a, b := openStore(t, oa), openStore(t, &ob)
	w, err := a.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	w.Append(ctx, enginetest.OneTurn()[:2]...)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Host a stalls: no renewal, its lease expires.
	a.stopRenewing()
	var wb *Handle
	deadline := time.Now().Add(10 * time.Second)
	for wb == nil && time.Now().Before(deadline) {
		if wb, err = b.Open(ctx, "s", store.Write); err != nil {
			if !errors.Is(err, store.ErrAlreadyOwned) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if wb == nil {
		t.Fatal("host b never got the expired lease")
	}
	if err := wb.Append(ctx, enginetest.OneTurn()[2:]...); err != nil {
		t.Fatal(err)
	}
	if err := wb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The stale writer's lease is past its time: it refuses to write.
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("stale writer's append: %v, want ErrOwnershipLost", err)
	}
	// Were its clock wrong (it thinks its lease still holds), its publish
	// is refused by the stream: it expects the subject's old last message.
	w.remote.live.until.Store(math.MaxInt64)
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("stale writer's flush: %v, want ErrOwnershipLost", err)
	}
	// Its renewal (at the old revision) also fails once it resumes.
	a.renewNow()
	if err := w.Append(ctx, enginetest.Turn2()...); !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("stale writer's append after renewal: %v, want ErrOwnershipLost", err)
	}
	r, _ := b.Open(ctx, "s", store.Read)
	got, err := r.Read(ctx, 0, -1)
	if err != nil || len(got) != 6 {
		t.Fatalf("after the takeover: %d events, %v", len(got), err)
	}
	for i := range got {
		if string(got[i].Data) != string(enginetest.OneTurn()[i].Data) {
			t.Errorf("event %d is not the new writer's", i)
		}
	}
}

// A message that fails its checksum is reported with subject and stream
// sequence, never skipped.
func TestDamagedMessage(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	st := openStore(t, o)
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	w.Append(ctx, enginetest.OneTurn()...)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A second batch whose frame is damaged in flight (bytes flipped after
	// the checksum was computed), published with valid index headers.
	e, err := st.enc.Events("s", 6, enginetest.Turn2())
	if err != nil {
		t.Fatal(err)
	}
	data := segment.MarshalFrame(e)
	data[len(data)-9] ^= 0x40
	msg := natsMsg(st.subject("s"), data, 6, 2)
	if _, err := st.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	other := openStore(t, func() *Options { c := *o; c.Host = "reader"; return &c }())
	r, err := other.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Read(ctx, 0, 6); err != nil || len(got) != 6 {
		t.Errorf("the intact prefix: %d events, %v", len(got), err)
	}
	_, err = r.Read(ctx, 0, -1)
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("read over the damaged message: %v, want a CorruptionError", err)
	}
	t.Logf("reported: %v", err)
}

// An event larger than one message can carry is refused at Append, naming
// it, and nothing is written.
func TestEventTooLarge(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, freshOptions())
	h, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	big := enginetest.OneTurn()[:1]
	big[0].Data = []byte(`{"text":"` + strings.Repeat("x", int(st.nc.MaxPayload())) + `"}`)
	for op, err := range map[string]error{"append": h.Append(ctx, big...), "enqueue": h.Enqueue(big...)} {
		var te *EventTooLargeError
		switch {
		case !errors.Is(err, store.ErrInvalidEvent):
			t.Fatalf("%s of a %d-byte event: %v, want ErrInvalidEvent", op, len(big[0].Data), err)
		case !errors.As(err, &te) || te.Seq != 0 || te.Limit != int(st.nc.MaxPayload()) || te.Size <= te.Limit || te.Size < len(big[0].Data):
			t.Fatalf("%s of a %d-byte event: %v, want an *EventTooLargeError of seq 0 over the limit %d", op, len(big[0].Data), err, st.nc.MaxPayload())
		}
		t.Logf("%s: %v", op, err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatalf("seq 0 is still free: %v", err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A batch message never exceeds the server's max_payload: a large event
// that alone fits, appended after small ones (under FrameBytes), goes in a
// message of its own. (A batch grew while under FrameBytes, and a
// compressed batch can only pass max_payload if FrameBytes is near it and
// the events hardly compress: then its publish failed and poisoned the
// handle.)
func TestSplitAtMaxPayload(t *testing.T) { onServerAndCluster(t, testSplitAtMaxPayload) }

func testSplitAtMaxPayload(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	o.FrameBytes = 8 << 20
	st := openStoreAt(t, url, o)
	limit := int(st.nc.MaxPayload())
	if o.FrameBytes < limit*3/4 {
		t.Skipf("max_payload %d: the batch of small events would be published before the large one", limit)
	}
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	text := func(n int) string { // printable ASCII, but for " and \: zstd saves under a fifth
		b := make([]byte, n)
		for i := range b {
			for b[i] = byte(' ' + rng.IntN(95)); b[i] == '"' || b[i] == '\\'; b[i] = byte(' ' + rng.IntN(95)) {
			}
		}
		return string(b)
	}
	var evs []event.Event
	at := func(seq int, data string) event.Event {
		e := enginetest.OneTurn()[0]
		e.Seq, e.Data = uint64(seq), []byte(`{"text":"`+data+`"}`)
		return e
	}
	for range limit * 3 / 4 / 1000 { // staged under FrameBytes, not published
		evs = append(evs, at(len(evs), text(1000)))
	}
	small := len(evs)
	big := at(len(evs), text(limit-2048)) // fits a message alone
	evs = append(evs, big)
	if err := w.Append(ctx, evs[:small]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, big); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush of %d small events and one of %d bytes: %v", small, len(big.Data), err)
	}
	r := openStoreAt(t, url, func() *Options { c := *o; c.Host = "reader"; return &c }())
	h, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Read(ctx, 0, -1)
	if err != nil || len(got) != len(evs) {
		t.Fatalf("read back %d events, %v; want %d", len(got), err, len(evs))
	}
	for i := range got {
		if !bytes.Equal(got[i].Data, evs[i].Data) {
			t.Fatalf("event %d differs", i)
		}
	}
	for _, ref := range h.s.frames {
		m, err := r.stream.GetMsg(ctx, ref.seq)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(m.Data) + natsHeaderSize(m.Header); n > limit {
			t.Errorf("message %d (events %d..%d) takes %d bytes, over max_payload %d", ref.seq, ref.first, ref.first+uint64(ref.count), n, limit)
		}
	}
	if len(h.s.frames) != 2 {
		t.Errorf("%d batch messages, want 2 (the small events, the large one)", len(h.s.frames))
	}
}

// natsHeaderSize is about the bytes of h as NATS sends it.
func natsHeaderSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// A writer whose renewals time out (rather than find the entry changed)
// keeps its lease only until it may have expired: from then on its
// appends and flushes fail with ErrOwnershipLost and nothing is
// published, though no other host took the session.
func TestExpiredLease(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	o.LeaseTTL = time.Second
	st := openStore(t, o)
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	last := func() uint64 {
		m, err := st.stream.GetLastMsgForSubject(ctx, st.subject("s"))
		if err != nil {
			t.Fatal(err)
		}
		return m.Sequence
	}
	before := last()
	timeout := func(func() (uint64, error)) (uint64, error) {
		return 0, fmt.Errorf("renewal timed out (injected): %w", context.DeadlineExceeded)
	}
	st.renewHook.Store(&timeout)
	st.renewNow()
	time.Sleep(o.LeaseTTL + 100*time.Millisecond)
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("append %v after the last renewal: %v, want ErrOwnershipLost", o.LeaseTTL, err)
	}
	if err := w.Flush(ctx); !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("flush %v after the last renewal: %v, want ErrOwnershipLost", o.LeaseTTL, err)
	}
	if got := last(); got != before {
		t.Errorf("the subject's last message moved from %d to %d", before, got)
	}
}

// Closing a write handle whose lease lapsed (its renewals time out) with
// events it had not published (appended, and enqueued) drops them and
// says so: ErrOwnershipLost, a *store.DroppedError counting them, in a
// *store.SessionError naming the session; nothing is published.
func TestCloseLapsed(t *testing.T) { onServerAndCluster(t, testCloseLapsed) }

func testCloseLapsed(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	o.LeaseTTL = time.Second
	clock := &enginetest.Clock{} // the write-behind window never ends by itself
	o.AfterFunc = clock.AfterFunc
	st := openStoreAt(t, url, o)
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Enqueue(enginetest.OneTurn()[4:5]...); err != nil {
		t.Fatal(err)
	}
	before := lastSubjectSeq(t, st, "s")
	timeout := func(func() (uint64, error)) (uint64, error) {
		return 0, fmt.Errorf("renewal timed out (injected): %w", context.DeadlineExceeded)
	}
	st.renewHook.Store(&timeout)
	st.renewNow()
	time.Sleep(o.LeaseTTL + 100*time.Millisecond)
	err = w.Close()
	var se *store.SessionError
	var de *store.DroppedError
	switch {
	case !errors.Is(err, store.ErrOwnershipLost):
		t.Fatalf("close %v after the last renewal: %v, want ErrOwnershipLost", o.LeaseTTL, err)
	case !errors.As(err, &se) || se.ID != "s" || se.Op != "close":
		t.Errorf("close: %v, want a *SessionError of session s, op close", err)
	case !errors.As(err, &de) || de.Dropped != 3:
		t.Errorf("close: %v, want a *DroppedError of 3 events", err)
	}
	t.Logf("reported: %v", err)
	if got := lastSubjectSeq(t, st, "s"); got != before {
		t.Errorf("the subject's last message moved from %d to %d", before, got)
	}
	// The dropped events are gone from this store's view too: once the
	// renewals work again, the next write open of the session (in the same
	// store) starts from what the stream holds, and publishes only its own
	// events, at their seqs. (The campaign found a write open that
	// published the events an earlier one had dropped, at its own seqs.)
	st.renewHook.Store(nil)
	st.renewNow()
	h, err := st.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatalf("write open once renewals work again: %v", err)
	}
	if h.Len() != 2 {
		t.Errorf("the write open after the drop has %d events, want the 2 acknowledged", h.Len())
	}
	if err := h.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "the session after the drop and a new write open", readAll(t, st, "s"), enginetest.OneTurn()[:4])
}

// lastSubjectSeq is the stream sequence of the last message on session
// id's subject.
func lastSubjectSeq(t *testing.T, st *Store, id string) uint64 {
	t.Helper()
	m, err := st.stream.GetLastMsgForSubject(context.Background(), st.subject(id))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sequence
}

// Two stores (two processes) under the same Host never take each other's
// sessions: by default each has a Host of its own; a Host set in both is
// refused to the second (store.ErrLocked); once the first is dead, a
// store under its Host takes its leases over at once.
func TestSameHost(t *testing.T) {
	ctx := context.Background()
	write := func(st *Store, id string) *Handle {
		t.Helper()
		w, err := st.Create(ctx, enginetest.Meta(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, enginetest.OneTurn()...); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return w
	}
	t.Run("default", func(t *testing.T) {
		o := freshOptions()
		o.Host = ""
		a, b := openStore(t, o), openStore(t, o)
		write(a, "s")
		if _, err := b.Open(ctx, "s", store.Write); !errors.Is(err, store.ErrAlreadyOwned) {
			t.Fatalf("write open of a session another store of the default Host writes: %v, want ErrAlreadyOwned", err)
		}
	})
	t.Run("set", func(t *testing.T) {
		o := freshOptions()
		o.LeaseTTL = time.Minute // the takeover below must not wait for it
		a := openStore(t, o)
		write(a, "s")
		b, err := Open(ctx, connect(t, srvURL), o)
		if err == nil {
			defer b.Close()
			_, err = b.Open(ctx, "s", store.Write)
			t.Fatalf("a second store under Host %q opened (its write open: %v), want ErrLocked", o.Host, err)
		}
		if !errors.Is(err, store.ErrLocked) {
			t.Fatalf("a second store under Host %q: %v, want ErrLocked", o.Host, err)
		}
		t.Logf("reported: %v", err)
		a.abandon() // its process dies
		c := openStore(t, o)
		w, err := c.Open(ctx, "s", store.Write)
		if err != nil {
			t.Fatalf("write open under the dead store's Host: %v", err)
		}
		if err := w.Append(ctx, enginetest.Turn2()...); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// The same Host set on two machines: a lease of the other machine's
	// is never taken over (its store may be alive).
	t.Run("another machine", func(t *testing.T) {
		o := freshOptions()
		st := openStore(t, o)
		v, err := json.Marshal(leaseValue{Host: o.Host, Instance: "elsewhere", Machine: st.machine + "-other"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.leases.Create(ctx, token("s"), v); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, enginetest.Meta("s")); !errors.Is(err, store.ErrSessionExists) {
			t.Fatalf("create of a session whose lease the same Host holds on another machine: %v, want ErrSessionExists", err)
		}
	})
}

// A publish refused because the subject's previous message is still in
// process on the server (error 10164: a replicated stream's leader
// acknowledges a message before it stops counting it as in process) was
// never stored: it is published again, not reported as a lost session;
// unless the subject moved meanwhile.
func TestInProcessRefusal(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, freshOptions())
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	inProcess := &natsjs.APIError{Code: 400, ErrorCode: natsjs.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence: unknown"}
	refusals := 0
	refuse := func(n int, meanwhile func()) {
		refusals = 0
		hook := publishFunc(func(ctx context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error) {
			if refusals < n {
				refusals++
				if meanwhile != nil {
					meanwhile()
				}
				return nil, inProcess
			}
			return st.js.PublishMsg(ctx, msg, natsjs.WithMsgID(msgID), natsjs.WithExpectLastSequencePerSubject(expect))
		})
		st.publishHook.Store(&hook)
	}
	defer st.publishHook.Store(nil)
	refuse(2, nil)
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush refused twice as in process: %v", err)
	}
	r := openStore(t, func() *Options { o := st.opts; o.Host = "reader"; return &o }())
	h, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Read(ctx, 0, -1); err != nil || len(got) != 4 {
		t.Fatalf("read back: %d events, %v; want 4", len(got), err)
	}
	// The subject moves while the publish is refused: another writer's.
	refuse(1, func() {
		other := natsMsg(st.subject("s"), []byte("x"), 4, 1)
		if _, err := st.js.PublishMsg(ctx, other); err != nil {
			t.Error(err)
		}
	})
	if err := w.Append(ctx, enginetest.OneTurn()[4:]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); !errors.Is(err, store.ErrOwnershipLost) {
		t.Fatalf("flush refused as in process while another message landed: %v, want ErrOwnershipLost", err)
	}
}

// A store holds one lease per host, whatever the number of its sessions:
// a renewal is one write to the lease bucket (each session lease used to
// be renewed on its own, a write each).
func TestOneLeasePerHost(t *testing.T) { onServerAndCluster(t, testOneLeasePerHost) }

func testOneLeasePerHost(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	st := openStoreAt(t, url, o)
	st.stopRenewing()
	const n = 20
	for i := range n {
		if _, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	last := func() uint64 {
		bucket, err := st.js.Stream(ctx, "KV_"+o.LeaseBucket)
		if err != nil {
			t.Fatal(err)
		}
		return bucket.CachedInfo().State.LastSeq
	}
	before := last()
	st.renewNow()
	if writes := last() - before; writes != 1 {
		t.Errorf("a renewal with %d sessions held made %d writes to the lease bucket, want 1", n, writes)
	}
}

// A write open (and a Create) on a host lease that lapsed (its renewals
// time out) but that no renewal found gone yet is refused with
// ErrOwnershipLost, publishing nothing (no fence): a host used to open,
// fence, and fail its first flush, again and again. Once a renewal
// succeeds, it opens again.
func TestOpenLapsedLease(t *testing.T) { onServerAndCluster(t, testOpenLapsedLease) }

func testOpenLapsedLease(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	o.LeaseTTL = time.Second
	st := openStoreAt(t, url, o)
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before := lastSubjectSeq(t, st, "s")
	timeout := func(func() (uint64, error)) (uint64, error) {
		return 0, fmt.Errorf("renewal timed out (injected): %w", context.DeadlineExceeded)
	}
	st.renewHook.Store(&timeout)
	st.renewNow()
	time.Sleep(o.LeaseTTL + 100*time.Millisecond)
	if h, err := st.Open(ctx, "s", store.Write); !errors.Is(err, store.ErrOwnershipLost) {
		if err == nil {
			h.Close()
		}
		t.Fatalf("write open %v after the last renewal: %v, want ErrOwnershipLost", o.LeaseTTL, err)
	} else {
		t.Logf("refused: %v", err)
	}
	if h, err := st.Create(ctx, enginetest.Meta("t")); !errors.Is(err, store.ErrOwnershipLost) {
		if err == nil {
			h.Close()
		}
		t.Fatalf("create %v after the last renewal: %v, want ErrOwnershipLost", o.LeaseTTL, err)
	}
	if got := lastSubjectSeq(t, st, "s"); got != before {
		t.Fatalf("the refused open published: the subject's last message moved from %d to %d", before, got)
	}
	// The renewals work again: the host lease is renewed if the bucket
	// still held it, or found gone and made anew; either way it opens.
	st.renewHook.Store(nil)
	st.renewNow()
	h, err := st.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatalf("write open once renewals work again: %v", err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// Group commit: the flushes of many sessions go out as one atomic batch;
// one of them expecting a message the subject no longer ends with (another
// writer appended) makes the stream refuse the batch, and only that
// session's flush fails (ErrOwnershipLost); the others' events are stored.
func TestGroupCommitRefusalIsolated(t *testing.T) {
	onServerAndCluster(t, testGroupCommitRefusalIsolated)
}

func testGroupCommitRefusalIsolated(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	st := openStoreAt(t, url, o)
	if !st.commit.atomic {
		t.Fatal("the stream was created without atomic publishes")
	}
	const n = 8
	hs := make([]*Handle, n)
	for i := range hs {
		h, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	// Another writer appends to s3 behind this store's back.
	victim := hs[3]
	js, err := natsjs.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(victim.s.subj)
	m.Header.Set(hdrFence, "intruder")
	if _, err := js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(victim.s.lastSubj)); err != nil {
		t.Fatal(err)
	}
	// Every session's next flush waits in one round.
	hold := func(queued func() int) {
		for deadline := time.Now().Add(10 * time.Second); queued() < n && time.Now().Before(deadline) && st.commit.beforeRound.Load() != nil; {
			time.Sleep(time.Millisecond)
		}
	}
	st.commit.beforeRound.Store(&hold)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			if err := h.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
				errs[i] = err
				return
			}
			errs[i] = h.Flush(ctx)
		})
	}
	wg.Wait()
	st.commit.beforeRound.Store(nil)
	for i, err := range errs {
		if i == 3 {
			if !errors.Is(err, store.ErrOwnershipLost) {
				t.Errorf("the flush of the session another writer appended to: %v, want ErrOwnershipLost", err)
			}
		} else if err != nil {
			t.Errorf("s%d's flush: %v", i, err)
		}
	}
	if got := st.commit.refused.Load(); got != 1 {
		t.Errorf("%d atomic batches refused, want 1", got)
	}
	// Another host reads every other session whole.
	ob := *o
	ob.Host = "reader"
	b := openStoreAt(t, url, &ob)
	for i := range hs {
		if i == 3 {
			continue
		}
		r, err := b.Open(ctx, fmt.Sprintf("s%d", i), store.Read)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(ctx, 0, -1)
		if err != nil || len(got) != 4 {
			t.Fatalf("s%d: %d events, %v; want 4", i, len(got), err)
		}
		for j := range got {
			if string(got[j].Data) != string(enginetest.OneTurn()[j].Data) {
				t.Errorf("s%d event %d is not the writer's", i, j)
			}
		}
		r.Close()
	}
}

// Without a refusal, a round of many sessions' flushes is one atomic batch:
// each session's messages land at the sequences its acknowledgement gives.
func TestGroupCommitBatch(t *testing.T) { onServerAndCluster(t, testGroupCommitBatch) }

func testGroupCommitBatch(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	st := openStoreAt(t, url, o)
	const n = 16
	hs := make([]*Handle, n)
	for i := range hs {
		h, err := st.Create(ctx, enginetest.Meta(fmt.Sprintf("s%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	hold := func(queued func() int) {
		for deadline := time.Now().Add(10 * time.Second); queued() < n && time.Now().Before(deadline) && st.commit.beforeRound.Load() != nil; {
			time.Sleep(time.Millisecond)
		}
	}
	st.commit.beforeRound.Store(&hold)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			if err := h.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
				errs[i] = err
				return
			}
			errs[i] = h.Flush(ctx)
		})
	}
	wg.Wait()
	st.commit.beforeRound.Store(nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := st.commit.batches.Load(); got < 1 {
		t.Errorf("%d atomic batches, want at least 1", got)
	}
	for i, h := range hs {
		for _, ref := range h.s.frames {
			if _, err := st.fetch(ctx, h.s.subj, h.s.id, ref); err != nil {
				t.Errorf("s%d: the message at %d: %v", i, ref.seq, err)
			}
		}
		if len(h.s.frames) != 1 {
			t.Errorf("s%d: %d batches stored, want 1", i, len(h.s.frames))
		}
	}
}

// TestSessionBatch: a flush of many messages of one session goes out as
// one atomic batch (its first message expecting the subject's last, the
// others nothing) and reads back on another host; after another writer
// appended behind its back, the next such flush fails with
// ErrOwnershipLost and stores nothing (the batch is refused whole, and its
// first message alone again).
func TestSessionBatch(t *testing.T) { onServerAndCluster(t, testSessionBatch) }

func testSessionBatch(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	o.FrameBytes = 4 << 10 // many messages per flush
	st := openStoreAt(t, url, o)
	if !st.commit.atomic {
		t.Fatal("the stream was created without atomic publishes")
	}
	h, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 200, 300)
	if err := h.Append(ctx, evs[:100]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := st.commit.batches.Load(); got != 1 {
		t.Errorf("%d atomic batches, want 1", got)
	}
	if len(h.s.frames) < 5 {
		t.Fatalf("%d messages: FrameBytes does not cut the batch", len(h.s.frames))
	}
	ro := *o
	ro.Host = "reader"
	r := openStoreAt(t, url, &ro)
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rh.Read(ctx, 0, -1)
	if err != nil || len(got) != 100 {
		t.Fatalf("read on another host: %d events, %v; want 100", len(got), err)
	}

	// Another writer appends behind this one's back.
	js, err := natsjs.New(connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(h.s.subj)
	m.Header.Set(hdrFence, "intruder")
	ack, err := js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(h.s.lastSubj))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs[100:]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); !errors.Is(err, store.ErrOwnershipLost) {
		t.Fatalf("flush after another writer's message: %v, want ErrOwnershipLost", err)
	}
	if got := st.commit.refused.Load(); got != 1 {
		t.Errorf("%d batches refused, want 1", got)
	}
	last, err := st.lastMsg(ctx, h.s.subj)
	if err != nil {
		t.Fatal(err)
	}
	if last.Sequence != ack.Sequence {
		t.Errorf("the subject ends at %d, after the intruder's message at %d", last.Sequence, ack.Sequence)
	}
}

// onServerAndCluster runs test on the package's server and (unless
// -short) on the shared 3-node cluster with 3 replicas.
func onServerAndCluster(t *testing.T, test func(t *testing.T, url string, o *Options)) {
	t.Run("server", func(t *testing.T) { test(t, srvURL, freshOptions()) })
	t.Run("cluster-R3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a 3-node cluster")
		}
		c, err := startClusterOnce()
		if err != nil {
			t.Fatal(err)
		}
		o := freshOptions()
		o.Replicas = 3
		test(t, c.URLs(), o)
	})
}

func openStoreAt(t *testing.T, url string, o *Options) *Store {
	t.Helper()
	st, err := Open(context.Background(), connect(t, url), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

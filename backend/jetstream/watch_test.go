package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// TestWaitIdle: a Wait on a session another host writes sends no request
// while nothing comes (when it polled, every 2 to 50 ms: about 25 a
// second), and wakes when the other host flushes, when that host deletes
// the session, and when its handle is closed, each before its next idle
// look at the session (waitIdle). On the cluster the writer and the
// reader are connected to different servers.
func TestWaitIdle(t *testing.T) { onServerAndCluster(t, testWaitIdle) }

func testWaitIdle(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	urls := strings.Split(url, ",")
	w := openStoreAt(t, urls[0], o)
	h, err := w.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	turn := enginetest.OneTurn()
	appendFlush := func(i int) {
		t.Helper()
		if err := h.Append(ctx, turn[i]); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	appendFlush(0)
	ro := *o
	ro.Host = "reader"
	ro.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	ncR := connect(t, urls[len(urls)-1])
	r, err := Open(ctx, ncR, &ro)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(n uint64) <-chan error {
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			got, err := rh.Wait(wctx, n)
			if err == nil && got != n+1 {
				err = errors.New("woke with another count")
			}
			done <- err
		}()
		return done
	}
	woke := func(what string, done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(waitIdle / 2):
			t.Fatalf("%s: the Wait did not wake", what)
			return nil
		}
	}

	done := wait(1)
	for deadline := time.Now().Add(10*time.Second + watchDegraded); !r.watch.running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store's consumer does not run")
		}
	}
	before := ncR.Stats()
	time.Sleep(time.Second)
	after := ncR.Stats()
	sent := after.OutMsgs - before.OutMsgs
	t.Logf("a Wait idle for 1 s: %d messages sent", sent)
	if sent > 2 {
		t.Errorf("a Wait idle for 1 s sent %d messages (requests), want at most 2", sent)
	}
	appendFlush(1)
	if err := woke("another host's flush", done); err != nil {
		t.Fatalf("Wait: %v", err)
	}

	// The other host deletes the session.
	done = wait(2)
	time.Sleep(20 * time.Millisecond) // (let it wait)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := woke("another host's Delete", done); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("Wait after another host's Delete: %v, want ErrSessionNotFound", err)
	}

	// The handle is closed while a Wait waits on it.
	h, err = w.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	appendFlush(0)
	if rh, err = r.Open(ctx, "s", store.Read); err != nil {
		t.Fatal(err)
	}
	done = wait(1)
	time.Sleep(20 * time.Millisecond)
	if err := rh.Close(); err != nil {
		t.Fatal(err)
	}
	if err := woke("its handle's Close", done); !errors.Is(err, store.ErrHandleClosed) {
		t.Errorf("Wait through a handle closed meanwhile: %v, want ErrHandleClosed", err)
	}
}

// TestWaitWithoutConsumer: a store whose consumer cannot be made (here
// refused by a hook, as a host without the permission to make consumers
// is refused) polls the stream, and its Waits still wake on another
// host's flush.
func TestWaitWithoutConsumer(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	w := openStoreAt(t, srvURL, o)
	h, err := w.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ro := *o
	ro.Host = "reader"
	r := openStoreAt(t, srvURL, &ro)
	refuse := func() error { return errors.New("permissions violation (injected)") }
	r.watch.makeHook.Store(&refuse)
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := rh.Wait(wctx, 0)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if r.watch.running() {
		t.Fatal("the consumer runs")
	}
	if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitIdle / 2):
		t.Fatal("the Wait did not wake")
	}
}

// TestWaitSameStore: events appended through the same store (not
// flushed, so no message is stored) wake a Wait on a read handle of it.
func TestWaitSameStore(t *testing.T) {
	ctx := context.Background()
	st := openStoreAt(t, srvURL, freshOptions())
	h, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rh, err := st.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := rh.Wait(wctx, 0)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !st.watch.running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store's consumer does not run")
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := h.Append(ctx, enginetest.OneTurn()[:1]...); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitIdle / 2):
		t.Fatal("the Wait did not wake")
	}
}

// testWriter writes a store's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestWaitThroughElection (issue 44, point 5): a Wait whose looks at the
// session are answered "JetStream system temporarily unavailable" (503,
// err_code 10008: the stream or the cluster electing a leader, a quorum
// lost for a while) or "cluster can not handle request" (10009) keeps
// looking, and wakes on the writer's flush once the leader answers again;
// it used to end with that error. An error that is no election (a
// permission refused) still ends it.
func TestWaitThroughElection(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	w := openStoreAt(t, srvURL, o)
	h, err := w.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	turn := enginetest.OneTurn()
	if err := h.Append(ctx, turn[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ro := *o
	ro.Host = "reader"
	r := openStoreAt(t, srvURL, &ro)
	rh, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(1)
	for i, code := range []natsjs.ErrorCode{errCodeClusterNotAvail, errCodeClusterNotLeader} {
		var refused atomic.Int64
		electing := func() error {
			refused.Add(1)
			return &natsjs.APIError{Code: 503, ErrorCode: code, Description: "JetStream system temporarily unavailable"}
		}
		r.getHook.Store(&electing)
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			got, err := rh.Wait(wctx, n)
			if err == nil && got <= n {
				err = fmt.Errorf("woke at %d, waiting past %d", got, n)
			}
			done <- err
		}()
		for refused.Load() < 3 {
			select {
			case err := <-done:
				t.Fatalf("err_code %d: the Wait ended during the election: %v", code, err)
			case <-time.After(time.Millisecond):
			}
		}
		if err := h.Append(ctx, turn[1+i]); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		r.getHook.Store(nil) // (a leader is elected)
		if err := <-done; err != nil {
			t.Fatalf("err_code %d: %v", code, err)
		}
		n++
	}
	// Another refusal ends the Wait, as before.
	denied := func() error {
		return &natsjs.APIError{Code: 403, ErrorCode: 10000, Description: "denied"}
	}
	r.getHook.Store(&denied)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var api *natsjs.APIError
	if _, err := rh.Wait(wctx, n); !errors.As(err, &api) || api.Code != 403 {
		t.Fatalf("a Wait refused with a 403: %v, want that error", err)
	}
}

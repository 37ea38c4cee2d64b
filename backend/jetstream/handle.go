package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
)

// Handle is a read or write handle on one session, as engine.Handle.
type Handle struct {
	front store.Front // what every backend's handle does the same
	st    *Store
	s     *session

	// writer names this write open (random, see newWriter): it starts
	// the id of every message the handle publishes, so that no other
	// writer's message ever has the id of one of its own.
	writer string

	mu     sync.Mutex // guards the leases
	local  *handle.Lease
	remote *lease
}

func (st *Store) newHandle(s *session, access store.Access, local *handle.Lease, remote *lease, writer string) *Handle {
	h := &Handle{st: st, s: s, local: local, remote: remote, writer: writer}
	var w store.Writer
	if access == store.Write {
		w = handleWriter{h}
	}
	cfg := store.FrontConfig{
		Catalog: st.opts.Catalog, Window: st.opts.WriteBehindWindow, Logger: st.opts.Logger, AfterFunc: st.opts.AfterFunc,
		Surface: storekit.SurfaceRulesChecker(st.opts.SurfaceRules, st.opts.Catalog),
	}
	if access == store.Write && !st.opts.FlushOnly {
		cfg.Flush = h.flush
	}
	h.front.Init(s.id, s.hdr, s.inherited, access, w, cfg)
	st.handles[h] = struct{}{}
	return h
}

// ID returns the session id.
func (h *Handle) ID() string { return h.front.ID() }

// Header returns the session header.
func (h *Handle) Header() store.Header { return h.front.Header() }

// InheritedEventCount returns the seeded prefix length (0 if unseeded).
func (h *Handle) InheritedEventCount() uint64 { return h.front.InheritedEventCount() }

// Len returns the session's length as the handle knows it. On a write
// handle it is the seq the next Append (or Enqueue) must carry: stored,
// appended and enqueued events all count, so a host (and the plan
// controller) can number its next event without tracking Enqueue itself.
// On a read handle it is the length of the longest log a read through it
// returned.
func (h *Handle) Len() uint64 { return h.front.Len() }

// Events iterates over the session's events from seq from on, reading
// them a chunk at a time (store.Iterate), for logs too long to load
// whole. Each chunk is a Read: the same checks, the same errors (the
// iteration ends with the first, yielded once).
func (h *Handle) Events(ctx context.Context, from int) iter.Seq2[event.Event, error] {
	return store.Iterate(ctx, h.Read, from)
}

// Access returns the handle's access mode.
func (h *Handle) Access() store.Access { return h.front.Access() }

// handleWriter is a write handle's side of its store.Front: the
// backend's steps of Append, Flush and Close, called with the Front's
// lock held. It is the Handle under a type of its own, so that these
// exported methods stay off Handle's API.
type handleWriter struct{ h *Handle }

// Writable fails once either lease is lost, or the remote one may have
// expired (a renewal that fails for another reason than a changed entry
// does not lose it).
func (w handleWriter) Writable() error {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.h.local.Check() != nil {
		return store.ErrOwnershipLost
	}
	return w.h.st.check(w.h.remote)
}

func (w handleWriter) Next() uint64 {
	w.h.st.mu.Lock()
	defer w.h.st.mu.Unlock()
	return w.h.s.next()
}

// Check refuses an event too large for one message.
func (w handleWriter) Check(evs []event.Event) error { return w.h.st.checkSizes(w.h.s.id, evs) }

// Stage takes evs (the store's copies) into the session's open batch.
func (w handleWriter) Stage(evs []event.Event) (bool, error) {
	st := w.h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	w.h.s.open = append(w.h.s.open, evs...)
	for i := range evs {
		w.h.s.openBytes += rawSize(&evs[i])
	}
	st.watch.notify(w.h.s.subj, 0) // (a Wait here sees them at once)
	cut := st.opts.FrameBytes
	if st.commit.atomic {
		cut *= groupFrames
	}
	return w.h.s.openBytes >= cut, nil
}

func (w handleWriter) Cut(ctx context.Context) error { return w.h.publish(ctx) }

// Read returns the events at offset..offset+limit-1 (limit < 0: to the
// end), as the caller's copies; see engine.Handle.Read. Events appended
// through this instance are seen at once; those of a writer elsewhere once
// published.
func (h *Handle) Read(ctx context.Context, offset, limit int) ([]event.Event, error) {
	if err := h.front.CheckRead(ctx, offset); err != nil {
		return nil, err
	}
	out, err := h.read(ctx, offset, limit)
	if err != nil {
		return nil, err
	}
	for i := range out { // fail closed on events this build does not know
		if err := h.st.opts.Catalog.Check(&out[i]); err != nil {
			return nil, sessionErr(h.s.id, "read", err)
		}
	}
	if err := h.front.CheckSeeds(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (h *Handle) read(ctx context.Context, offset, limit int) ([]event.Event, error) {
	st := h.st
	// The batches the view indexes already are fetched while the load asks
	// the stream for newer messages: a round trip for both (the fetched
	// ones stay good if the view is still the same session's after it).
	st.mu.Lock()
	s0 := h.view()
	var refs0 []frameRef
	var off0, end0 uint64
	if s0 != nil {
		refs0 = s0.frames
		off0, end0 = store.ReadRange(s0.framed, offset, limit)
	}
	st.mu.Unlock()
	lo0, hi0 := frameRange(refs0, off0, end0)
	got := make([][]event.Event, hi0-lo0) // the events of refs0[lo0:hi0]
	var preErr error
	var wg sync.WaitGroup
	if lo0 < hi0 {
		wg.Go(func() {
			preErr = st.fetchFrames(ctx, s0.subj, h.s.id, refs0[lo0:hi0], func(i int, _ frameRef, evs []event.Event) { got[i] = evs })
		})
	}
	_, err := st.load(ctx, h.s.id, "read")
	wg.Wait()
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	s := h.view()
	if s == nil {
		st.mu.Unlock()
		return nil, sessionErr(h.s.id, "read", store.ErrSessionNotFound)
	}
	refs, framed, open := s.frames, s.framed, s.open
	st.mu.Unlock()
	if s != s0 { // another session's view now: what was fetched is not its
		lo0, hi0, preErr = 0, 0, nil
	}
	if preErr != nil {
		return nil, sessionErr(h.s.id, "read", preErr)
	}
	n := framed + uint64(len(open))
	if err := h.front.Observe(n); err != nil {
		return nil, sessionErr(h.s.id, "read", err)
	}
	off, end := store.ReadRange(n, offset, limit)
	if off >= end {
		return []event.Event{}, nil
	}
	out := make([]event.Event, end-off)
	put := func(ref frameRef, evs []event.Event) {
		for j, e := range evs {
			if seq := ref.first + uint64(j); seq >= off && seq < end {
				out[seq-off] = e
			}
		}
	}
	// (refs starts with refs0: a view's frames are only appended to.)
	lo, hi := frameRange(refs, off, end)
	for i := max(lo, lo0); i < min(hi, hi0); i++ {
		put(refs[i], got[i-lo0])
	}
	// The rest, in direct batches (a request per directMaxBytes).
	for _, r := range [][2]int{{lo, min(hi, lo0)}, {max(lo, hi0), hi}} {
		if r[0] >= r[1] {
			continue
		}
		err := st.fetchFrames(ctx, s.subj, h.s.id, refs[r[0]:r[1]], func(_ int, ref frameRef, evs []event.Event) { put(ref, evs) })
		if err != nil {
			return nil, sessionErr(h.s.id, "read", err)
		}
	}
	for seq := max(off, framed); seq < end; seq++ {
		out[seq-off] = open[seq-framed].Clone()
	}
	return out, nil
}

// view returns the view the handle reads: its session's, as this
// instance knows it now, or nil if the session is gone (deleted, or
// another incarnation under its id). Called with st.mu held.
func (h *Handle) view() *session {
	st, s := h.st, h.s
	if cur := st.sessions[s.id]; cur != nil && cur.uid == s.uid {
		s = cur
	}
	if s.erased || st.sessions[s.id] != s {
		return nil
	}
	return s
}

// frameRange returns the indices [lo, hi) of the batches of refs that
// hold events of the seqs [off, end).
func frameRange(refs []frameRef, off, end uint64) (lo, hi int) {
	if off >= end {
		return 0, 0
	}
	lo = sort.Search(len(refs), func(i int) bool { return refs[i].first+uint64(refs[i].count) > off })
	hi = lo
	for hi < len(refs) && refs[hi].first < end {
		hi++
	}
	return lo, hi
}

// Wait waits until the session holds more than n events that a Read
// through this handle would return (see store.Handle.Wait): events another
// instance writes count once it published them. It sends no request while
// nothing happens: the store's consumer on the stream (watch.go) wakes it
// when a message is stored on the session's subject, and it then loads
// the session (one request to the stream's leader); events appended
// through this store wake it at once. Until the consumer runs (or if it
// cannot be made), it asks the stream for the session's last message
// every waitMin to waitMax, as it did before the consumer. A look that
// gets no answer within Options.Timeout (its server died, the stream is
// electing a leader) is made again, over the connection as it is then,
// until ctx ends; any other error ends the Wait.
func (h *Handle) Wait(ctx context.Context, n uint64) (uint64, error) {
	st := h.st
	wt := st.watch.add(h.s.subj)
	defer st.watch.remove(wt)
	delay := waitMin
	var t *time.Timer
	for {
		if err := h.front.CheckRead(ctx, 0); err != nil {
			return 0, err
		}
		if _, err := st.load(ctx, h.s.id, "wait"); err != nil {
			if ctx.Err() != nil || !st.lookAgain(err) {
				return 0, err
			}
			// No answer within Options.Timeout (its server died, the
			// connection is coming back), or the stream or the cluster
			// electing a leader (a 503): ask again over what the
			// connection is now.
			st.opts.Logger.Warn("jetstream: Wait's look at the session got no answer; looking again", "session", h.s.id, "error", err)
			if t == nil {
				t = time.NewTimer(delay)
				defer t.Stop()
			} else {
				t.Reset(delay)
			}
			delay = min(2*delay, waitMax)
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-t.C:
			}
			continue
		}
		st.mu.Lock()
		s := h.s
		if cur := st.sessions[h.s.id]; cur != nil && cur.uid == s.uid {
			s = cur
		}
		gone := s.erased || st.sessions[h.s.id] != s
		count := s.framed + uint64(len(s.open))
		last := s.lastSubj
		st.mu.Unlock()
		if gone {
			return 0, sessionErr(h.s.id, "wait", store.ErrSessionNotFound)
		}
		if count > n {
			return count, nil
		}
		// Poll while the consumer does not run, and while it told of a
		// message the load did not find (a leader that has not applied
		// it yet); else wait for it, looking every waitIdle.
		d := waitIdle
		if live, seen := st.watch.live(wt); !live || seen > last {
			d, delay = delay, min(2*delay, waitMax)
		} else {
			delay = waitMin
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-wt.ch:
		case <-t.C:
		}
	}
}

// unanswered reports whether err is a request that got no answer in
// time, or found no server to answer (Wait asks again).
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrNoStreamResponse)
}

// lookAgain reports whether a Wait's look that failed with err is worth
// another: no answer in time (unanswered); an answer that the stream or
// the cluster has no leader now (an election, a quorum lost for a while:
// "JetStream system temporarily unavailable", 503 err_code 10008, or
// "cluster can not handle request", 10009), where the look used to end
// the Wait with that error; or a request that failed because the
// connection was lost under it (nats.go fails the requests in flight when
// it reconnects), unless the connection is closed for good.
func (st *Store) lookAgain(err error) bool {
	if unanswered(err) {
		return true
	}
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) {
		return !st.nc.IsClosed()
	}
	var api *natsjs.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case errCodeClusterNotAvail, errCodeClusterNotLeader:
			return true
		}
	}
	return false
}

// nats-server's API error codes of a cluster without a leader (its
// errors.json: JSClusterNotAvailErr, JSClusterNotLeaderErr).
const (
	errCodeClusterNotAvail  natsjs.ErrorCode = 10008
	errCodeClusterNotLeader natsjs.ErrorCode = 10009
)

// Wait's polling interval, when it polls, grows from waitMin to waitMax
// while nothing comes (each poll is one request to the stream).
const (
	waitMin = 2 * time.Millisecond
	waitMax = 50 * time.Millisecond
)

// checkLog is a write open's check of the stored log: every event's type
// against the catalog, and the seed marker rules.
func (h *Handle) checkLog(ctx context.Context) error {
	st := h.st
	st.mu.Lock()
	from, n := h.s.checked, h.s.next()
	st.mu.Unlock()
	if err := store.CheckLog(ctx, h.s.id, h.front.Header().IsSeeded, h.front.InheritedEventCount(), from, n, h.Read); err != nil {
		return err
	}
	if err := h.front.CheckSurfaceLog(ctx, n, h.Read); err != nil {
		return err
	}
	st.mu.Lock()
	if h.s.checked < n {
		h.s.checked = n
	}
	st.mu.Unlock()
	return nil
}

// Append adds events to the session; see engine.Handle.Append. They are
// published when the open batch reaches Options.FrameBytes, else at the
// next Flush.
func (h *Handle) Append(ctx context.Context, evs ...event.Event) error {
	return h.front.Append(ctx, evs...)
}

// Enqueue hands events to the write-behind buffer; see engine.Handle.
// Enqueue.
func (h *Handle) Enqueue(evs ...event.Event) error { return h.front.Enqueue(evs...) }

// Flush publishes everything appended or enqueued through this handle and
// returns once the stream acknowledged it all; see engine.Handle.Flush.
func (h *Handle) Flush(ctx context.Context) error { return h.front.Flush(ctx, h.flush) }

// flush is Flush without the failure rule's bookkeeping (store.Front.Flush):
// the durability window's flush (store.FrontConfig.Flush), whose end the
// Front records itself.
func (h *Handle) flush(ctx context.Context) error { return h.front.WriteOut(ctx, "flush", nil) }

// publish sends the session's header (if not yet published) and its open
// events, in batches of about FrameBytes, one message each, and waits for
// every acknowledgement. Each publish expects the last message it knows on
// the subject, so a writer that lost the session cannot append after
// another. A message's id is the writer's and the message's: "<writer>:h"
// for the header, "<writer>:<first seq>" for a batch (the server's
// deduplication then only ever matches a retry of the same message).
// Two messages or more go out as atomic batches if the stream allows them
// (sendGroup), else one after another. Called by the owner, under its
// Front's lock.
func (h *Handle) publish(ctx context.Context) error {
	st := h.st
	s := h.s
	st.mu.Lock()
	if s.failed != nil {
		err := s.failed
		st.mu.Unlock()
		return sessionErr(h.s.id, "flush", fmt.Errorf("an earlier publish failed, its outcome unknown (reopen the session): %w", err))
	}
	pending, batch, first := s.pending, s.open, s.framed
	st.mu.Unlock()
	var out []outMsg
	if pending {
		e, err := st.enc.Header(h.s.id, store.MarshalHeaderRecord(store.HeaderRecord{Header: s.hdr, UID: s.uid, Inherited: s.inherited}))
		if err != nil {
			return sessionErr(h.s.id, "flush", err)
		}
		msg := nats.NewMsg(s.subj)
		msg.Data = segment.MarshalFrame(e)
		out = append(out, outMsg{msg, h.writer + ":h", frameRef{header: true}})
	}
	// A message carries about FrameBytes, and never more than the server
	// takes in one (max_payload): a large event after small ones starts
	// a message of its own. (Append refused any event that cannot travel
	// alone.)
	_, room := st.msgLimits(h.s.id)
	var cuts [][]event.Event // each message's events
	for len(batch) > 0 {
		n, size, bound := 0, 0, 0
		for n < len(batch) && (n == 0 || size < st.opts.FrameBytes) {
			b := segment.RecordBound(&batch[n])
			if n > 0 && bound+b > room {
				break
			}
			size += rawSize(&batch[n])
			bound += b
			n++
		}
		cuts = append(cuts, batch[:n])
		batch = batch[n:]
	}
	// The messages are encoded on up to GOMAXPROCS goroutines (as the
	// local engine encodes a large batch's frames).
	encoded, err := st.enc.EventsFrames(h.s.id, first, cuts)
	if err != nil {
		return sessionErr(h.s.id, "flush", err)
	}
	for i, evs := range cuts {
		msg := natsMsg(s.subj, segment.MarshalFrame(encoded[i]), first, len(evs))
		encoded[i].Release() // (MarshalFrame copied it)
		out = append(out, outMsg{msg, h.writer + ":" + strconv.FormatUint(first, 10), frameRef{first: first, count: uint32(len(evs))}})
		first += uint64(len(evs))
	}
	for len(out) > 0 {
		n := 1
		if st.commit.atomic {
			for size := len(out[0].msg.Data); n < len(out) && n < maxAtomicBatch && size+len(out[n].msg.Data) <= groupBytes; n++ {
				size += len(out[n].msg.Data)
			}
		}
		var err error
		if n > 1 {
			err = h.sendGroup(ctx, out[:n])
		} else {
			err = h.send(ctx, out[0].msg, out[0].id, out[0].ref)
		}
		if err != nil {
			return err
		}
		out = out[n:]
	}
	return nil
}

// outMsg is one message of a publish, with its id and what it holds.
type outMsg struct {
	msg *nats.Msg
	id  string
	ref frameRef
}

// groupBytes bounds the data of one session's atomic batch.
const groupBytes = 8 << 20

// groupFrames: on a stream that allows atomic batches, appended events are
// published once groupFrames times FrameBytes of them wait (else once
// FrameBytes do), as one atomic batch of messages of about FrameBytes.
const groupFrames = 16

// sendGroup publishes msgs, two messages or more of the session, in one
// atomic batch (the group commit's next, with other sessions' publishes):
// the first expects the last message known on the subject
// (as a single publish does), the others expect nothing (the server
// refuses an expectation on a subject already written in the batch), and
// the stream stores them all, one after another, or none: so none lands
// unless the first's expectation held, and none lands after another
// writer's message. A batch the stream refuses stored nothing: its
// messages go again one by one (send: the same ids, each expecting the
// one before), which tells a lost session (store.ErrOwnershipLost) from
// a refusal of the batch itself. A batch without a response in time
// poisons the session, as a single publish does.
func (h *Handle) sendGroup(ctx context.Context, msgs []outMsg) error {
	st, s := h.st, h.s
	if st.failPublish.Load() || st.publishHook.Load() != nil {
		return h.sendEach(ctx, msgs) // (tests: their hooks see every publish)
	}
	h.mu.Lock()
	remote := h.remote
	h.mu.Unlock()
	if err := st.check(remote); err != nil {
		return sessionErr(h.s.id, "flush", err)
	}
	rctx, cancel := st.req(ctx, s.subj)
	defer cancel()
	st.mu.Lock()
	expect := s.lastSubj
	st.mu.Unlock()
	reqs := make([]*pubReq, len(msgs))
	for i, m := range msgs {
		reqs[i] = &pubReq{ctx: rctx, msg: m.msg, msgID: m.id, expect: expect, noExpect: i > 0}
	}
	reqs[0].more = reqs[1:]
	st.commit.publishGroup(reqs[0])
	if errors.Is(reqs[0].err, errBatchRefused) {
		return h.sendEach(ctx, msgs)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, r := range reqs {
		if r.err == nil && r.ack == nil {
			r.err = errors.New("jetstream: publish without an outcome")
		}
		if r.err != nil {
			r.err = st.refused(rctx, r.err)
			s.failed = r.err
			return sessionErr(h.s.id, "flush", r.err)
		}
		h.record(msgs[i].msg, msgs[i].ref, r.ack.Sequence)
	}
	return nil
}

// sendEach publishes msgs one after another.
func (h *Handle) sendEach(ctx context.Context, msgs []outMsg) error {
	for _, m := range msgs {
		if err := h.send(ctx, m.msg, m.id, m.ref); err != nil {
			return err
		}
	}
	return nil
}

// natsMsg is the message of a batch of n events from seq first.
func natsMsg(subj string, frame []byte, first uint64, n int) *nats.Msg {
	msg := nats.NewMsg(subj)
	msg.Data = frame
	msg.Header.Set(hdrFirst, strconv.FormatUint(first, 10))
	msg.Header.Set(hdrCount, strconv.Itoa(n))
	return msg
}

// send publishes one message of the session and records it once
// acknowledged. A failure poisons the session in this instance.
func (h *Handle) send(ctx context.Context, msg *nats.Msg, msgID string, ref frameRef) error {
	st, s := h.st, h.s
	h.mu.Lock()
	remote := h.remote
	h.mu.Unlock()
	if err := st.check(remote); err != nil { // (right before the publish: batches take time)
		return sessionErr(h.s.id, "flush", err)
	}
	st.mu.Lock()
	expect := s.lastSubj
	st.mu.Unlock()
	ack, err := st.publishMsg(ctx, msg, msgID, expect)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		s.failed = err
		return sessionErr(h.s.id, "flush", err)
	}
	h.record(msg, ref, ack.Sequence)
	return nil
}

// record takes the message msg, holding ref, as stored at stream sequence
// seq. Called with st.mu held.
func (h *Handle) record(msg *nats.Msg, ref frameRef, seq uint64) {
	s := h.s
	s.lastSubj = seq
	s.size += int64(len(msg.Data))
	if ref.header {
		s.pending = false
		return
	}
	ref.seq = seq
	s.frames = append(s.frames, ref)
	s.framed += uint64(ref.count)
	s.noteBatch(ref.first, s.open[:ref.count])
	if b := recovery.LastTurnBoundary(s.open[:ref.count]); b > s.turnFrom {
		s.turnFrom = b
	}
	for i := range ref.count {
		s.openBytes -= rawSize(&s.open[i])
	}
	s.open = s.open[ref.count:]
}

// publishMsg sends msg with message id msgID, expecting the stream sequence
// expect as the last on its subject, and returns the acknowledgement. A
// refusal of the expectation is store.ErrOwnershipLost; a refusal because
// the subject's previous message is still in process on the server (error
// 10164, refused before it was stored) is retried a few times while the
// subject's last message is still expect. An
// acknowledgement as a duplicate is taken only once the stored message it
// names is read back and is msg (same subject, id, headers and data): on
// a replicated stream the server looks the id up before it checks the
// expected sequence, so a message that is not this one would otherwise
// acknowledge it (also store.ErrOwnershipLost).
func (st *Store) publishMsg(ctx context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error) {
	rctx, cancel := st.req(ctx, msg.Subject)
	defer cancel()
	var ack *natsjs.PubAck
	var err error
	for attempt := 1; ; attempt++ {
		if st.failPublish.Load() {
			err = errors.New("jetstream: publish failed (injected)")
		} else if f := st.publishHook.Load(); f != nil {
			ack, err = (*f)(rctx, msg, msgID, expect)
		} else {
			ack, err = st.commit.publish(rctx, msg, msgID, expect)
		}
		var apiErr *natsjs.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != natsjs.JSErrCodeStreamWrongLastSequenceConstant {
			break
		}
		// Refused before it was proposed, so not stored: a replicated
		// stream's leader acknowledges a message before it stops counting
		// it as in process on its subject, and a publish expecting it
		// that comes in between is refused so. Read the subject's last
		// message: if it is still the one expected, publish again.
		if attempt == inProcessAttempts {
			return nil, fmt.Errorf("jetstream: the stream kept refusing the publish: %w", err)
		}
		t := time.NewTimer(time.Millisecond << (attempt - 1))
		select {
		case <-rctx.Done():
			t.Stop()
			return nil, fmt.Errorf("jetstream: %w (after %v)", rctx.Err(), err)
		case <-t.C:
		}
		last, lerr := st.lastMsg(rctx, msg.Subject)
		switch {
		case lerr == nil && last.Sequence != expect:
			return nil, fmt.Errorf("%w: another writer appended to the session (message %d, expected %d)", store.ErrOwnershipLost, last.Sequence, expect)
		case lerr != nil && !(errors.Is(lerr, natsjs.ErrMsgNotFound) && expect == 0):
			return nil, fmt.Errorf("jetstream: reading the subject's last message after %v: %w", err, lerr)
		}
	}
	if err != nil {
		err = st.refused(rctx, err)
		var apiErr *natsjs.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence {
			err = fmt.Errorf("%w: another writer appended to the session (%v)", store.ErrOwnershipLost, err)
		}
		return nil, err
	}
	if ack.Duplicate {
		// The stream says it holds this message already, at ack.Sequence:
		// a retry of a publish that had landed, if that message is ours.
		m, err := st.leaderGet(rctx, msgGetRequest{Seq: ack.Sequence})
		if err != nil {
			return nil, fmt.Errorf("jetstream: the publish was acknowledged as a duplicate of message %d, which could not be read to check it: %w", ack.Sequence, err)
		}
		if !sameMsg(m, msg, msgID) {
			return nil, fmt.Errorf("%w: the stream took the publish for a duplicate of message %d, which is another writer's", store.ErrOwnershipLost, ack.Sequence)
		}
		st.opts.Logger.Warn("jetstream: duplicate publish acknowledged (a retry of one that had landed)", "subject", msg.Subject, "msg_id", msgID)
	}
	return ack, nil
}

// inProcessAttempts bounds the publishes of one message that the stream
// refuses because the subject's previous message is still in process
// (error 10164); they wait 1, 2, 4 and 8 ms.
const inProcessAttempts = 5

// sameMsg reports whether the stored message m is msg, published with
// message id msgID.
func sameMsg(m *natsjs.RawStreamMsg, msg *nats.Msg, msgID string) bool {
	if m.Subject != msg.Subject || m.Header.Get(natsjs.MsgIDHeader) != msgID || !bytes.Equal(m.Data, msg.Data) {
		return false
	}
	for _, k := range []string{hdrFirst, hdrCount, hdrFence} {
		if m.Header.Get(k) != msg.Header.Get(k) {
			return false
		}
	}
	return true
}

// publishFunc publishes msg with message id msgID, expecting the stream
// sequence expect as the last on its subject (tests: Store.publishHook).
type publishFunc func(ctx context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error)

// checkSizes refuses a batch holding an event that could not travel in
// one message even alone (*EventTooLargeError).
func (st *Store) checkSizes(id string, evs []event.Event) error {
	limit, room := st.msgLimits(id)
	for i := range evs {
		if b := segment.RecordBound(&evs[i]); b > room {
			return &EventTooLargeError{Index: i, Seq: evs[i].Seq, Size: msgOverhead(id) + b, Limit: limit}
		}
	}
	return nil
}

// msgLimits returns the most bytes one message may take, headers
// included: the server's max_payload (from the connection's server info),
// or the stream's max_msg_size if smaller; and room, the most bytes of
// event records (segment.RecordBound) one message of session id may carry
// within it (and within a frame's limit).
func (st *Store) msgLimits(id string) (limit, room int) {
	limit = int(st.nc.MaxPayload())
	if m := int(st.stream.CachedInfo().Config.MaxMsgSize); m > 0 {
		limit = min(limit, m)
	}
	return limit, min(limit-msgOverhead(id), segment.DefaultMaxFrameRaw)
}

// msgOverhead is the most bytes a batch message of session id takes
// besides its event records: the frame's header, key and padding, and the
// NATS headers (natsHeaderBytes).
func msgOverhead(id string) int { return segment.FrameOverhead(len(id)) + natsHeaderBytes }

// natsHeaderBytes bounds the NATS headers of a batch message: the index
// headers, the message id, the expected subject sequence and an atomic
// batch's three headers take under 300 bytes.
const natsHeaderBytes = 512

// rawSize is about the bytes an event takes in a batch before compression.
func rawSize(e *event.Event) int {
	return len(e.Type) + len(e.Data) + len(e.SurfaceOp) + 8*len(e.SourceEventSeqs) + 16
}

// Close drains and publishes what is buffered, releases the session's
// leases and invalidates the handle; see engine.Handle.Close. A session
// created by this handle and never written to vanishes. A handle that can
// no longer write (its lease lapsed or was taken, or its store closed)
// drops the events it holds unpublished, and returns a
// *store.DroppedError (store.ErrOwnershipLost) saying how many, or nil
// if it holds none. Close is idempotent.
func (h *Handle) Close() error {
	return h.front.Close(func(err error) error {
		if h.front.Access() == store.Write {
			h.st.mu.Lock()
			untouched := h.s.pending && len(h.s.open) == 0 && h.s.owner == h
			h.st.mu.Unlock()
			if err == nil && !untouched { // an untouched creation is never written
				if err = (handleWriter{h}).Writable(); err == nil {
					err = h.publish(context.Background())
				}
			}
			if errors.Is(err, store.ErrOwnershipLost) || errors.Is(err, store.ErrHandleClosed) {
				// Nothing of this handle's can be written any more: what
				// it holds is dropped, and Close says how much.
				h.st.mu.Lock()
				staged := 0
				if h.s.owner == h {
					staged = len(h.s.open)
				}
				h.st.mu.Unlock()
				err = h.front.Dropped(staged)
			}
		}
		h.release()
		return err
	})
}

// abandon invalidates the handle and gives its leases up without writing.
// A pending session it created, never published, is erased; the local
// view of a session whose publish failed is dropped.
func (h *Handle) abandon() {
	h.front.MarkClosed()
	h.release()
}

// release gives the handle's leases up; a pending session it created,
// never published, is erased, and the local view of a session whose
// publish failed dropped.
func (h *Handle) release() {
	st := h.st
	h.mu.Lock()
	local, remote := h.local, h.remote
	h.local, h.remote = nil, nil
	h.mu.Unlock()
	st.mu.Lock()
	delete(st.handles, h)
	s := h.s
	if s.owner == h {
		s.owner = nil
		switch {
		case s.pending && len(s.open) == 0:
			s.erased = true
			delete(st.sessions, s.id)
		case s.failed != nil || len(s.open) > 0:
			// What this writer could not publish is lost (it was never
			// acknowledged: a failed publish, or a lease lost before
			// one, whose events Close dropped), and what it published
			// has an unknown outcome: forget the local view; the next
			// use reads the stream. (Kept, the dropped events were the
			// next write open's: it published them at its own seqs.)
			delete(st.sessions, s.id)
		}
	}
	st.mu.Unlock()
	if local != nil {
		local.Release()
	}
	if remote != nil {
		st.releaseLease(remote)
	}
	st.watch.notify(s.subj, 0) // (a Wait through the handle returns)
}

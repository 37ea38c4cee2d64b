package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// committer is a store's group commit: the publishes of every session that
// flushes at the same time go out together, as asynchronous publishes
// written to the connection one after another and acknowledged together,
// in rounds. While a round waits for its acknowledgements the next one
// gathers; a goroutine runs the rounds while there are publishes waiting
// and ends when none are.
//
// It only carries single publishes: each keeps its own message id and
// expected last subject sequence, and its outcome is its own (a refused
// publish fails only its caller; the others of its round are not
// affected). What the caller does with an outcome (publishMsg: the retry
// of error 10164, the check of a duplicate acknowledgement, poisoning on
// an unknown outcome) is unchanged.
type committer struct {
	nc     *nats.Conn
	js     natsjs.JetStream
	stream string
	// atomic: the stream allows atomic batch publishes (AllowAtomicPublish,
	// server 2.12 or later); a round's publishes then go out as one batch,
	// which a single server with sync_interval always stores with one fsync.
	atomic bool

	mu      sync.Mutex
	queue   []*pubReq
	running bool
	grew    chan struct{} // while gather waits: signalled when the queue grows

	batches, refused atomic.Int64 // atomic batches committed, and refused
	rounds           atomic.Int64 // rounds published
	// Tests: beforeRound, if set, runs before each round is taken, with
	// the number of publishes waiting.
	beforeRound atomic.Pointer[func(queued func() int)]
}

// newCommitter returns the committer of a stream of configuration cfg.
func newCommitter(nc *nats.Conn, js natsjs.JetStream, cfg natsjs.StreamConfig) *committer {
	return &committer{nc: nc, js: js, stream: cfg.Name, atomic: cfg.AllowAtomicPublish}
}

// pubReq is one publish waiting in the committer.
type pubReq struct {
	ctx    context.Context // its deadline bounds the wait for its acknowledgement
	msg    *nats.Msg
	msgID  string
	expect uint64
	// noExpect: the message carries no expected last subject sequence
	// (in an atomic batch, a session's messages after its first).
	noExpect bool
	// more: the session's messages after this one, which go in the same
	// atomic batch right after it, expecting nothing (a group, see
	// publishGroup); each gets its own ack.
	more []*pubReq

	ack  *natsjs.PubAck
	err  error
	done chan struct{}
}

// publish sends msg with message id msgID, expecting expect as the last
// stream sequence on its subject, in the next round, and returns its
// acknowledgement or error (an *natsjs.APIError if the stream refused it;
// any other error leaves the outcome unknown). It returns once the round
// has its outcome, so the message is never in flight after publish
// returned unless its outcome is unknown (its context ended first).
func (c *committer) publish(ctx context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error) {
	r := &pubReq{ctx: ctx, msg: msg, msgID: msgID, expect: expect, done: make(chan struct{})}
	c.enqueue(r)
	<-r.done
	return r.ack, r.err
}

// enqueue queues r for the next round, starting the rounds if they are
// not running.
func (c *committer) enqueue(r *pubReq) {
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if !c.running {
		c.running = true
		go c.run()
	}
	grew := c.grew
	c.mu.Unlock()
	if grew != nil {
		select {
		case grew <- struct{}{}:
		default:
		}
	}
}

// publishGroup publishes r and r.more, messages of one session, in the
// next round's atomic batch, one after another; r expects r.expect, the
// others nothing (noExpect). Each gets its ack, or the error, in its own
// request. If the stream refused the batch (nothing of it was stored),
// r.err is errBatchRefused, and the caller publishes the messages again
// one by one. It needs a stream with atomic batches.
func (c *committer) publishGroup(r *pubReq) {
	r.done = make(chan struct{})
	c.enqueue(r)
	<-r.done
}

// errBatchRefused: the stream refused the atomic batch a group was in.
var errBatchRefused = errors.New("jetstream: the stream refused the atomic batch")

// run publishes rounds until the queue is empty.
func (c *committer) run() {
	var last int           // publishes in the last round
	var took time.Duration // its time
	for {
		if last > 1 {
			c.gather(last, min(took/2, maxGather))
		}
		if f := c.beforeRound.Load(); f != nil {
			(*f)(func() int {
				c.mu.Lock()
				defer c.mu.Unlock()
				return len(c.queue)
			})
		}
		c.mu.Lock()
		round := c.queue
		c.queue = nil
		if len(round) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		t0 := time.Now()
		c.round(round)
		last, took = len(round), time.Since(t0)
	}
}

// gather waits, up to wait, until n more publishes than the queue held
// when the last round ended are queued, or none came for gatherGap: the
// sessions of the last round,
// woken by its outcome, come back with their next flush within
// microseconds, and each round costs the server about the same whatever
// its size (on one server it stages the batch in a file store of its own).
// Without it, a round took whoever had come back when the last ended, and
// the rest waited for the next: 64 sessions flushing on their own made
// about two rounds per flush each.
func (c *committer) gather(n int, wait time.Duration) {
	c.mu.Lock()
	want := len(c.queue) + n
	if len(c.queue) >= want || wait <= 0 {
		c.mu.Unlock()
		return
	}
	grew := make(chan struct{}, 1)
	c.grew = grew
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.grew = nil
		c.mu.Unlock()
	}()
	deadline := time.Now().Add(wait)
	t := time.NewTimer(min(wait, gatherGap))
	defer t.Stop()
	for {
		select {
		case <-grew:
		case <-t.C:
			return // (nothing came for gatherGap, or the wait is over)
		}
		c.mu.Lock()
		got := len(c.queue)
		c.mu.Unlock()
		left := time.Until(deadline)
		if got >= want || left <= 0 {
			return
		}
		t.Reset(min(left, gatherGap))
	}
}

// gatherGap: gather stops waiting once no publish came for this long.
const gatherGap = 300 * time.Microsecond

// maxGather bounds gather's wait.
const maxGather = 2 * time.Millisecond

// round publishes the requests of round and waits for each one's outcome
// (an acknowledgement, an error, or the end of its context). With atomic
// batches, those that can go in one go out as one, each group (a session's
// messages, publishGroup) whole and in order; if the stream refuses the
// batch (a publish of it that one of them alone would have got refused, a
// duplicate id), nothing of it was stored, and each single publish is sent
// again on its own, the same message with the same id and expectation, so
// that a refusal fails only its own session (a group's caller does the
// same with its messages).
func (c *committer) round(round []*pubReq) {
	c.rounds.Add(1)
	var live, batch, single []*pubReq
	msgs := 0 // in batch
	for _, r := range round {
		if err := r.ctx.Err(); err != nil {
			r.setErr(err) // never sent: the caller's context ended while it queued
			continue
		}
		live = append(live, r)
		if c.atomic && r.msg.Header.Get(natsjs.MsgRollup) == "" {
			batch = append(batch, r)
			msgs += 1 + len(r.more)
		} else {
			single = append(single, r)
		}
	}
	if msgs < 2 {
		single, batch = live, nil
	}
	var refused []*pubReq
	if len(batch) > 0 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for len(batch) > 0 {
			// Whole groups, up to maxAtomicBatch messages (a group is
			// at most that long).
			n, size := 1, 1+len(batch[0].more)
			for n < len(batch) && size+1+len(batch[n].more) <= maxAtomicBatch {
				size += 1 + len(batch[n].more)
				n++
			}
			part := batch[:n]
			batch = batch[n:]
			wg.Go(func() {
				if !c.publishBatch(part) {
					mu.Lock()
					refused = append(refused, part...)
					mu.Unlock()
				}
			})
		}
		c.publishEach(single)
		wg.Wait()
		single = nil
	}
	for _, r := range refused {
		if len(r.more) > 0 {
			r.err = errBatchRefused
		} else {
			single = append(single, r)
		}
	}
	c.publishEach(single)
	for _, r := range round {
		if r.ack == nil && r.err == nil {
			r.err = errors.New("jetstream: publish without an outcome")
		}
		close(r.done)
	}
}

// setErr sets err as the outcome of r and of its group.
func (r *pubReq) setErr(err error) {
	r.err = err
	for _, m := range r.more {
		m.err = err
	}
}

// maxAtomicBatch bounds the messages of one atomic batch (the server's
// default limit is 1000).
const maxAtomicBatch = 256

// publishEach publishes each request asynchronously, then waits for
// every outcome.
func (c *committer) publishEach(reqs []*pubReq) {
	futures := make([]natsjs.PubAckFuture, len(reqs))
	for i, r := range reqs {
		f, err := c.js.PublishMsgAsync(copyMsg(r.msg), natsjs.WithExpectLastSequencePerSubject(r.expect), natsjs.WithMsgID(r.msgID))
		if err != nil {
			r.err = err
			continue
		}
		futures[i] = f
	}
	for i, r := range reqs {
		f := futures[i]
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			r.ack = ack
		case err := <-f.Err():
			r.err = err
		case <-r.ctx.Done():
			r.err = fmt.Errorf("jetstream: no acknowledgement: %w", r.ctx.Err())
		}
	}
}

// publishBatch publishes units (with their groups) as one atomic batch:
// each message with its id and expected last subject sequence (none if
// noExpect), the last one committing it. It
// reports false, with no outcome set, if the stream refused the batch (an
// error response: nothing of it was stored). Any other failure (no
// response in time, a response that does not account for the batch)
// leaves every message's outcome unknown: each request gets the error.
// On success the batch's messages are stored one after another, so each
// one's sequence follows from the last one's.
func (c *committer) publishBatch(units []*pubReq) bool {
	ctx := units[0].ctx
	for _, r := range units[1:] {
		if d, ok := r.ctx.Deadline(); ok {
			if cur, ok := ctx.Deadline(); !ok || d.Before(cur) {
				ctx = r.ctx
			}
		}
	}
	var reqs []*pubReq // the messages in order: each unit, then its group's
	for _, r := range units {
		reqs = append(reqs, r)
		reqs = append(reqs, r.more...)
	}
	id := nuidLike()
	fail := func(err error) bool {
		for _, r := range reqs {
			r.err = err
		}
		return true
	}
	var resp *nats.Msg
	for i, r := range reqs {
		m := copyMsg(r.msg)
		m.Header.Set(natsjs.MsgIDHeader, r.msgID)
		if !r.noExpect {
			m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.expect, 10))
		}
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(reqs)-1 {
			if err := c.nc.PublishMsg(m); err != nil {
				// Nothing committed without the last message: the
				// server abandons the batch.
				return fail(fmt.Errorf("jetstream: atomic batch: %w", err))
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		var err error
		if resp, err = c.nc.RequestMsgWithContext(ctx, m); err != nil {
			return fail(fmt.Errorf("jetstream: atomic batch of %d publishes, outcome unknown: %w", len(reqs), err))
		}
	}
	var pa struct {
		Stream string           `json:"stream"`
		Seq    uint64           `json:"seq"`
		Batch  string           `json:"batch"`
		Count  int              `json:"count"`
		Error  *natsjs.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &pa); err != nil {
		return fail(fmt.Errorf("jetstream: atomic batch of %d publishes, outcome unknown: the response %q: %w", len(reqs), resp.Data, err))
	}
	if pa.Error != nil {
		c.refused.Add(1)
		return false
	}
	n := uint64(len(reqs))
	if pa.Stream != c.stream || pa.Batch != id || pa.Count != len(reqs) || pa.Seq < n {
		return fail(fmt.Errorf("jetstream: atomic batch of %d publishes, outcome unknown: the response %q does not account for it", len(reqs), resp.Data))
	}
	c.batches.Add(1)
	for i, r := range reqs {
		r.ack = &natsjs.PubAck{Stream: pa.Stream, Sequence: pa.Seq - n + 1 + uint64(i)}
	}
	return true
}

// The headers of an atomic batch publish (nats-server 2.12).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// nuidLike is a random batch id (at most 64 characters).
func nuidLike() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// copyMsg is a copy of msg to publish: a publish sets headers of its own.
func copyMsg(msg *nats.Msg) *nats.Msg {
	m := nats.NewMsg(msg.Subject)
	m.Data = msg.Data
	for k, v := range msg.Header {
		m.Header[k] = v
	}
	return m
}

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

	batches, refused atomic.Int64 // atomic batches committed, and refused
	// Tests: beforeRound, if set, runs before each round is taken, with
	// the number of publishes waiting.
	beforeRound atomic.Pointer[func(queued func() int)]
}

// pubReq is one publish waiting in the committer.
type pubReq struct {
	ctx    context.Context // its deadline bounds the wait for its acknowledgement
	msg    *nats.Msg
	msgID  string
	expect uint64

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
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	<-r.done
	return r.ack, r.err
}

// run publishes rounds until the queue is empty.
func (c *committer) run() {
	for {
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
		c.round(round)
	}
}

// round publishes the requests of round and waits for each one's outcome
// (an acknowledgement, an error, or the end of its context). With atomic
// batches, those that can go in one go out as one; if the stream refuses
// the batch (a publish of it that one of them alone would have got
// refused, a duplicate id), nothing of it was stored, and each is
// published again on its own, the same message with the same id and
// expectation, so that a refusal fails only its own session.
func (c *committer) round(round []*pubReq) {
	var live, batch, single []*pubReq
	for _, r := range round {
		if err := r.ctx.Err(); err != nil {
			r.err = err // never sent: the caller's context ended while it queued
			continue
		}
		live = append(live, r)
		if c.atomic && r.msg.Header.Get(natsjs.MsgRollup) == "" {
			batch = append(batch, r)
		} else {
			single = append(single, r)
		}
	}
	if len(batch) < 2 {
		single, batch = live, nil
	}
	var refused []*pubReq
	if len(batch) > 0 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for len(batch) > 0 {
			n := min(len(batch), maxAtomicBatch)
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
	c.publishEach(append(single, refused...))
	for _, r := range round {
		if r.ack == nil && r.err == nil {
			r.err = errors.New("jetstream: publish without an outcome")
		}
		close(r.done)
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

// publishBatch publishes reqs as one atomic batch: each message with its
// id and expected last subject sequence, the last one committing it. It
// reports false, with no outcome set, if the stream refused the batch (an
// error response: nothing of it was stored). Any other failure (no
// response in time, a response that does not account for the batch)
// leaves every message's outcome unknown: each request gets the error.
// On success the batch's messages are stored one after another, so each
// one's sequence follows from the last one's.
func (c *committer) publishBatch(reqs []*pubReq) bool {
	ctx := reqs[0].ctx
	for _, r := range reqs[1:] {
		if d, ok := r.ctx.Deadline(); ok {
			if cur, ok := ctx.Deadline(); !ok || d.Before(cur) {
				ctx = r.ctx
			}
		}
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
		m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(r.expect, 10))
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

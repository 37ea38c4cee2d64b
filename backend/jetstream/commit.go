package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	js natsjs.JetStream

	mu      sync.Mutex
	queue   []*pubReq
	running bool
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

// round publishes every request of round asynchronously, then waits for
// each one's acknowledgement (or error, or the end of its context).
func (c *committer) round(round []*pubReq) {
	futures := make([]natsjs.PubAckFuture, len(round))
	for i, r := range round {
		if err := r.ctx.Err(); err != nil {
			r.err = err // never sent: the caller's context ended while it queued
			continue
		}
		// A copy per publish: PublishMsgAsync sets the message's headers.
		m := nats.NewMsg(r.msg.Subject)
		m.Data = r.msg.Data
		for k, v := range r.msg.Header {
			m.Header[k] = v
		}
		f, err := c.js.PublishMsgAsync(m, natsjs.WithExpectLastSequencePerSubject(r.expect), natsjs.WithMsgID(r.msgID))
		if err != nil {
			r.err = err
			continue
		}
		futures[i] = f
	}
	for i, r := range round {
		if f := futures[i]; f != nil {
			select {
			case ack := <-f.Ok():
				r.ack = ack
			case err := <-f.Err():
				r.err = err
			case <-r.ctx.Done():
				r.err = fmt.Errorf("jetstream: no acknowledgement: %w", r.ctx.Err())
			}
		}
		if r.ack == nil && r.err == nil {
			r.err = errors.New("jetstream: publish without an outcome")
		}
		close(r.done)
	}
}

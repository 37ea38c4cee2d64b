package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// Reading a subject. Two kinds of request (backend/jetstream/DESIGN.md, "Reads"):
//
//   - the stream leader's message get ($JS.API.STREAM.MSG.GET): one
//     message, as the stream holds it now. It answers what must be current
//     (a subject's last message, a message just stored, a message a
//     direct get did not return).
//   - the direct get ($JS.API.DIRECT.GET, a stream with allow_direct): up
//     to a batch of a subject's messages from a stream sequence on, in
//     order, in one request. Any replica that is nearly caught up answers,
//     so an answer may end early (a replica behind the leader holds a
//     prefix of the stream); what it returns is right (a stream sequence
//     names one message on every replica). A batch that ends before the
//     message wanted is continued by the leader's get.

// msgGetRequest is the body of both gets (nats-server's
// JSApiMsgGetRequest).
type msgGetRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	LastFor  string `json:"last_by_subj,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// msgGetResponse is the leader's answer.
type msgGetResponse struct {
	Error   *natsjs.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// leaderGet asks the stream's leader for one message: req names it by
// sequence (Seq; with NextFor, the first message of that subject from
// Seq on) or as the last of a subject (LastFor). A message that is not
// there is natsjs.ErrMsgNotFound. (natsjs.Stream.GetMsg would take a
// direct get on a stream that allows them, which a replica behind the
// leader may answer.)
func (st *Store) leaderGet(ctx context.Context, req msgGetRequest) (*natsjs.RawStreamMsg, error) {
	if h := st.getHook.Load(); h != nil {
		if err := (*h)(); err != nil {
			return nil, err
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	subj := natsjs.DefaultAPIPrefix + "STREAM.MSG.GET." + st.opts.Stream
	ctx, cancel := st.req(ctx, subj)
	defer cancel()
	r, err := st.nc.RequestWithContext(ctx, subj, body)
	if err != nil {
		return nil, st.refused(ctx, err)
	}
	var resp msgGetResponse
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, fmt.Errorf("jetstream: a message get's response: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == natsjs.JSErrCodeMessageNotFound:
		return nil, natsjs.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, natsjs.ErrInvalidJetStreamResponse
	}
	m := resp.Message
	var hdr nats.Header
	if len(m.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("jetstream: message %d: %w", m.Sequence, err)
		}
	}
	return &natsjs.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}

// lastMsg returns the last message on subject subj, as the leader has it.
func (st *Store) lastMsg(ctx context.Context, subj string) (*natsjs.RawStreamMsg, error) {
	return st.leaderGet(ctx, msgGetRequest{LastFor: subj})
}

// numPendingHeader is on every message of a direct get's batch.
const numPendingHeader = "Nats-Num-Pending"

// maxBatch bounds the messages of one direct get.
const maxBatch = 1 << 20

// directMaxBytes bounds the bytes of one direct get's answer (the server
// sends at least one message, whatever its size).
const directMaxBytes = 8 << 20

// directBatch asks for up to n messages of subject subj from stream
// sequence from on in one direct get, and calls f with each, in order,
// until f returns false. It returns the number of messages f got: fewer
// than n if the subject ends (on the replica that answered: a replica
// behind the leader ends early), the answer reached directMaxBytes, or f
// stopped. Each message of a batch names the one sent before it, so a
// message lost on the way is an error, never a gap.
func (st *Store) directBatch(ctx context.Context, subj string, from uint64, n int, f func(m *natsjs.RawStreamMsg) (bool, error)) (int, error) {
	body, err := json.Marshal(msgGetRequest{Seq: from, NextFor: subj, Batch: n, MaxBytes: directMaxBytes})
	if err != nil {
		return 0, err
	}
	api := natsjs.DefaultAPIPrefix + "DIRECT.GET." + st.opts.Stream
	ctx, cancel := st.req(ctx, api)
	defer cancel()
	if st.directDrop.Load() {
		st.directDropped.Add(1)
		<-ctx.Done() // (tests: a replica that never answers)
		return 0, fmt.Errorf("jetstream: direct get of %s from %d: %w", subj, from, ctx.Err())
	}
	q, err := st.replies.open()
	if err != nil {
		return 0, fmt.Errorf("jetstream: direct get: %w", err)
	}
	defer st.replies.done(q)
	if err := st.nc.PublishRequest(api, q.inbox, body); err != nil {
		return 0, fmt.Errorf("jetstream: direct get: %w", err)
	}
	var limit uint64
	if h := st.directHook.Load(); h != nil {
		limit = (*h)(subj, from)
	}
	got := 0
	var prev uint64 // the last message's sequence
	for {
		r, err := q.next(ctx)
		if err != nil {
			err = st.refused(ctx, err)
			return got, fmt.Errorf("jetstream: direct get of %s from %d: %w", subj, from, err)
		}
		if status := r.Header.Get("Status"); status != "" && len(r.Data) == 0 {
			switch status {
			case "204": // the end of the batch
				if last := r.Header.Get(natsjs.LastSequenceHeader); last != strconv.FormatUint(prev, 10) {
					return got, fmt.Errorf("jetstream: direct get of %s from %d: the batch ended after message %s, the last received was %d", subj, from, last, prev)
				}
				return got, nil
			case "404": // nothing from there on (on this replica)
				return got, nil
			case "503":
				return got, fmt.Errorf("jetstream: direct get: no responders (does stream %s allow direct gets?)", st.opts.Stream)
			default:
				return got, fmt.Errorf("jetstream: direct get of %s from %d: status %s %s", subj, from, status, r.Header.Get("Description"))
			}
		}
		if r.Header.Get(numPendingHeader) == "" {
			// A server before 2.11 answers the first message alone.
			return got, fmt.Errorf("jetstream: direct get of %s from %d: an answer without batch headers (batched direct gets need nats-server 2.11 or later)", subj, from)
		}
		seq, err := strconv.ParseUint(r.Header.Get(natsjs.SequenceHeader), 10, 64)
		if err != nil || seq < from || r.Header.Get(natsjs.LastSequenceHeader) != strconv.FormatUint(prev, 10) {
			return got, fmt.Errorf("jetstream: direct get of %s from %d: message %q after %d (a message lost on the way?)", subj, from, r.Header.Get(natsjs.SequenceHeader), prev)
		}
		if limit != 0 && seq > limit {
			return got, nil // (tests: a replica that holds the stream up to limit)
		}
		prev = seq
		got++
		more, err := f(&natsjs.RawStreamMsg{Subject: r.Header.Get(natsjs.SubjectHeader), Sequence: seq, Header: r.Header, Data: r.Data})
		if err != nil || !more {
			return got, err
		}
	}
}

// directQuiet is how long after a direct get got no answer within
// Options.Timeout the store reads through the leader's gets alone.
//
// Why a direct get goes unanswered while the stream works: nats-server
// spreads a client's direct gets at random over every replica in the
// stream's direct-get queue group, not only the one on the client's own
// server (client.go, processMsgResults: only a message that came over a
// route prefers local subscribers). A replica on a server that stopped
// answering without closing its routes (SIGSTOP, a hung machine) stays in
// the group until its routes time out (minutes), and takes about one get
// in three on a cluster of three; a replica may also drop a batched get
// without an answer (stream.go, getDirectRequest: a store error counting
// the pending messages returns with no reply). Each such get used to cost
// a whole Options.Timeout and fail the read (an open, a Read, a Wait's
// look) with "direct get ... context deadline exceeded", again at every
// try that the queue group sent there, while the stream's leader took
// writes (issue 44, point 5: a fresh host could not open two sessions for
// 60 s after a quorum loss). Now one such get costs one Options.Timeout,
// the read goes on with the leader's gets, and for directQuiet the store
// asks only the leader.
const directQuiet = 10 * time.Second

// directOK reports whether reads may use direct gets (none went
// unanswered in the last directQuiet).
func (st *Store) directOK() bool { return time.Now().UnixNano() >= st.directOff.Load() }

// directUnanswered reports whether err is a direct get that got no answer
// within Options.Timeout while ctx, the caller's, still runs; if so the
// store reads through the leader's gets for directQuiet, and the read
// goes on with them.
func (st *Store) directUnanswered(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !unanswered(err) {
		return false
	}
	st.directOff.Store(time.Now().Add(directQuiet).UnixNano())
	st.opts.Logger.Warn("jetstream: a direct get got no answer; reading through the stream leader's gets for a while", "stream", st.opts.Stream, "for", directQuiet, "error", err)
	return true
}

// scan calls f with every message of subject subj from stream sequence
// from through to, in order (f may stop it early), in direct batches
// continued by the leader's gets. It stops after a message past to (the
// subject moved on), which f gets too. A message missing from the
// subject (purged) is skipped by both kinds of get; if the leader holds
// nothing from a sequence on, the error is natsjs.ErrMsgNotFound.
func (st *Store) scan(ctx context.Context, subj string, from, to uint64, f func(m *natsjs.RawStreamMsg) (bool, error)) error {
	next := from
	stop := false
	each := func(m *natsjs.RawStreamMsg) (bool, error) {
		more, err := f(m)
		next = m.Sequence + 1
		stop = err != nil || !more || next > to
		return !stop, err
	}
	direct := st.directOK()
	for next <= to && !stop {
		if direct {
			got, err := st.directBatch(ctx, subj, next, int(min(to-next+1, maxBatch)), each)
			if err != nil && !st.directUnanswered(ctx, err) {
				return err
			}
			if stop || next > to {
				return nil
			}
			// None: the replica that answered is behind (or the subject
			// was purged), or none answered: the leader's word for the
			// rest.
			direct = err == nil && got > 0
		}
		if !direct {
			m, err := st.leaderGet(ctx, msgGetRequest{Seq: next, NextFor: subj})
			if err != nil {
				return fmt.Errorf("jetstream: message %d of %s: %w", next, subj, err)
			}
			if _, err := each(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// replyMux receives the answers of a store's direct gets on one
// subscription (<inbox>.*), each request's on an inbox of its own under
// it: no subscription per request. Its pending limits are off: an answer
// is bounded (directMaxBytes), and none of its messages may be dropped.
type replyMux struct {
	nc     *nats.Conn
	mu     sync.Mutex
	sub    *nats.Subscription
	prefix string
	next   uint64
	queues map[string]*replyQueue
	stop   chan struct{} // closed by close
	closed bool
}

// replyQueue is one request's answer as it comes.
type replyQueue struct {
	inbox string
	mu    sync.Mutex
	msgs  []*nats.Msg
	ready chan struct{} // signalled when msgs grows
	stop  chan struct{} // the mux's
}

// open returns a queue for a new request's answer, subscribing at the
// first.
func (x *replyMux) open() (*replyQueue, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, store.ErrClosed
	}
	if x.sub == nil {
		x.prefix = x.nc.NewInbox() + "."
		sub, err := x.nc.Subscribe(x.prefix+"*", x.deliver)
		if err != nil {
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			sub.Unsubscribe()
			return nil, err
		}
		x.sub, x.queues, x.stop = sub, map[string]*replyQueue{}, make(chan struct{})
	}
	x.next++
	q := &replyQueue{inbox: x.prefix + strconv.FormatUint(x.next, 10), ready: make(chan struct{}, 1), stop: x.stop}
	x.queues[q.inbox] = q
	return q, nil
}

// done forgets q: what comes for it later is dropped.
func (x *replyMux) done(q *replyQueue) {
	x.mu.Lock()
	delete(x.queues, q.inbox)
	x.mu.Unlock()
}

func (x *replyMux) deliver(m *nats.Msg) {
	x.mu.Lock()
	q := x.queues[m.Subject]
	x.mu.Unlock()
	if q == nil {
		return
	}
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// next returns the answer's next message.
func (q *replyQueue) next(ctx context.Context) (*nats.Msg, error) {
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			m := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.mu.Unlock()
			return m, nil
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.stop:
			return nil, store.ErrClosed
		}
	}
}

// close unsubscribes (Store.Close).
func (x *replyMux) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return
	}
	x.closed = true
	if x.sub != nil {
		x.sub.Unsubscribe()
		close(x.stop)
	}
}

// fetchFrames reads and verifies the batch messages refs (in stream
// order) and calls f with each one's index in refs and events; f may be
// called from several goroutines at once (a long read decodes on every
// core), never twice for one message. Messages a load read just before
// are taken from st.recent; the others come in direct batches.
func (st *Store) fetchFrames(ctx context.Context, subj, id string, refs []frameRef, f func(i int, ref frameRef, evs []event.Event)) error {
	dec := st.newFrameDecoder(subj, id, len(refs), f)
	i := 0
	each := func(m *natsjs.RawStreamMsg) (bool, error) {
		ref := refs[i]
		switch {
		case m.Sequence < ref.seq: // a fence or a header between two batches
			return true, nil
		case m.Sequence > ref.seq:
			return false, fmt.Errorf("jetstream: message %d: %w", ref.seq, natsjs.ErrMsgNotFound)
		}
		if err := dec.decode(i, ref, m); err != nil {
			return false, err
		}
		i++
		return i < len(refs), nil
	}
	err := func() error {
		direct := st.directOK()
		for i < len(refs) {
			// What the recent loads left, then a direct batch up to the
			// next message they left.
			for i < len(refs) {
				m := st.recent.take(refs[i].seq)
				if m == nil {
					break
				}
				if _, err := each(m); err != nil {
					return err
				}
			}
			n := 0
			for i+n < len(refs) && !st.recent.has(refs[i+n].seq) {
				n++
			}
			if n == 0 {
				continue
			}
			if direct {
				got, err := st.directBatch(ctx, subj, refs[i].seq, n, each)
				if err != nil && !st.directUnanswered(ctx, err) {
					return err
				}
				// (None: a replica behind the leader, or none answered;
				// ask the leader for the rest.)
				direct = err == nil && got > 0
				continue
			}
			if !direct {
				m, err := st.leaderGet(ctx, msgGetRequest{Seq: refs[i].seq})
				if err != nil {
					return fmt.Errorf("jetstream: message %d: %w", refs[i].seq, err)
				}
				if _, err := each(m); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if werr := dec.wait(); err == nil {
		err = werr
	}
	return err
}

// frameDecoder decodes the batch messages of a read: on the caller's
// goroutine, or for a long read on GOMAXPROCS goroutines.
type frameDecoder struct {
	st      *Store
	subj    string
	id      string
	f       func(i int, ref frameRef, evs []event.Event)
	jobs    chan decodeJob
	wg      sync.WaitGroup
	errOnce sync.Once
	err     atomic.Pointer[error] // the first decoding error
}

type decodeJob struct {
	i   int
	ref frameRef
	m   *natsjs.RawStreamMsg
}

// parallelRefs is the number of batch messages from which a read decodes
// on several cores.
const parallelRefs = 8

func (st *Store) newFrameDecoder(subj, id string, refs int, f func(i int, ref frameRef, evs []event.Event)) *frameDecoder {
	d := &frameDecoder{st: st, subj: subj, id: id, f: f}
	if workers := min(runtime.GOMAXPROCS(0), refs/parallelRefs*2); workers > 1 {
		d.jobs = make(chan decodeJob, 2*workers)
		for range workers {
			d.wg.Go(func() {
				for j := range d.jobs {
					if d.err.Load() != nil {
						continue
					}
					if err := d.one(j.i, j.ref, j.m); err != nil {
						d.errOnce.Do(func() { d.err.Store(&err) })
					}
				}
			})
		}
	}
	return d
}

// decode decodes message m, batch i of the read (or hands it to a
// worker); it returns the first error met so far.
func (d *frameDecoder) decode(i int, ref frameRef, m *natsjs.RawStreamMsg) error {
	if e := d.err.Load(); e != nil {
		return *e
	}
	if d.jobs == nil {
		return d.one(i, ref, m)
	}
	d.jobs <- decodeJob{i, ref, m}
	return nil
}

func (d *frameDecoder) one(i int, ref frameRef, m *natsjs.RawStreamMsg) error {
	evs, err := d.st.decodeFrame(d.subj, d.id, ref, m)
	if err != nil {
		return err
	}
	d.f(i, ref, evs)
	return nil
}

// wait waits for the workers and returns the first decoding error.
func (d *frameDecoder) wait() error {
	if d.jobs != nil {
		close(d.jobs)
		d.wg.Wait()
	}
	if e := d.err.Load(); e != nil {
		return *e
	}
	return nil
}

// recentBytes bounds the message data a store keeps from its loads for
// the reads that follow them.
const recentBytes = 16 << 20

// recentMsgs is the data of the batch messages a store's loads read
// lately (the newest recentBytes of them), so that a read that follows
// (an Open and a Read) does not fetch them again. A read takes what it
// uses out. Messages are keyed by stream sequence, which names one
// message for good.
type recentMsgs struct {
	mu    sync.Mutex
	msgs  map[uint64]*natsjs.RawStreamMsg
	order []uint64 // oldest first (some taken since)
	bytes int
}

func (r *recentMsgs) put(m *natsjs.RawStreamMsg) {
	if len(m.Data) > recentBytes/4 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = map[uint64]*natsjs.RawStreamMsg{}
	}
	if _, ok := r.msgs[m.Sequence]; ok {
		return
	}
	r.msgs[m.Sequence] = m
	r.order = append(r.order, m.Sequence)
	r.bytes += len(m.Data)
	for r.bytes > recentBytes {
		seq := r.order[0]
		r.order = r.order[1:]
		if old, ok := r.msgs[seq]; ok {
			r.bytes -= len(old.Data)
			delete(r.msgs, seq)
		}
	}
	if len(r.order) > 2*len(r.msgs)+64 { // (taken ones: compact)
		r.order = slices.DeleteFunc(r.order, func(seq uint64) bool { _, ok := r.msgs[seq]; return !ok })
	}
}

// take returns the message of stream sequence seq, if kept, and forgets
// it.
func (r *recentMsgs) take(seq uint64) *natsjs.RawStreamMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.msgs[seq]
	if m != nil {
		delete(r.msgs, seq)
		r.bytes -= len(m.Data)
	}
	return m
}

func (r *recentMsgs) has(seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.msgs[seq]
	return ok
}

// fetch reads and verifies one batch message.
func (st *Store) fetch(ctx context.Context, subj, id string, ref frameRef) ([]event.Event, error) {
	var out []event.Event
	err := st.fetchFrames(ctx, subj, id, []frameRef{ref}, func(_ int, _ frameRef, evs []event.Event) { out = evs })
	return out, err
}

// decodeFrame decodes batch message m and checks it holds what ref
// indexed.
func (st *Store) decodeFrame(subj, id string, ref frameRef, m *natsjs.RawStreamMsg) ([]event.Event, error) {
	name := fmt.Sprintf("nats:%s/%s#%d", st.opts.Stream, subj, ref.seq)
	f, err := segment.UnmarshalFrame(name, m.Data)
	if err != nil {
		return nil, err
	}
	if m.Subject != subj || f.Kind != segment.KindEvents || f.Session != id || f.FirstSeq != ref.first || len(f.Events) != int(ref.count) {
		return nil, st.corrupt(subj, ref.seq, fmt.Sprintf("message does not hold the indexed events %d..%d of %q", ref.first, ref.first+uint64(ref.count), id))
	}
	return f.Events, nil
}

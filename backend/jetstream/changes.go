package jetstream

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/store"
)

// Changes iterates over the store's change feed (store.Store.Changes):
// the session subjects' messages in stream order, read by an ordered
// consumer from the cursor's stream sequence on. A message is in the
// stream once its publish was acknowledged: every change is durable. A
// fork is a copy here (store.CopyFork): its header shows as the fork,
// and the parent's events it copies after it are left out (the cursor
// carries the forks whose copy it is still in). Fences show nothing. A
// Delete purges the subject's earlier messages: a consumer behind it
// gets the delete without the session's earlier changes.
func (st *Store) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	o := store.ChangesConfig(opts)
	return func(yield func(store.Change, error) bool) {
		fail := func(err error) { yield(store.Change{}, err) }
		st.mu.Lock()
		closed := st.closed
		st.mu.Unlock()
		if closed {
			fail(store.ErrClosed)
			return
		}
		ictx, cancel := st.req(ctx)
		info, err := st.stream.Info(ictx)
		cancel()
		if err != nil {
			fail(fmt.Errorf("changes: stream info: %w", err))
			return
		}
		c := jsCursor{created: info.Created.UnixNano(), copying: map[string]uint64{}}
		if from != "" {
			if c, err = parseJSCursor(from); err != nil {
				fail(err)
				return
			}
			if c.created != info.Created.UnixNano() {
				fail(&store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("stream %s was made at another time: another store's cursor", st.opts.Stream)})
				return
			}
			if c.seq > info.State.LastSeq {
				fail(&store.CursorError{Cursor: from, Kind: store.ErrInvalidCursor, Reason: fmt.Sprintf("stream sequence %d is past the stream's last, %d", c.seq, info.State.LastSeq)})
				return
			}
		}
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-st.stop:
				stop()
			case <-cctx.Done():
			}
		}()
		cons, err := st.stream.OrderedConsumer(cctx, natsjs.OrderedConsumerConfig{
			FilterSubjects: []string{st.opts.Prefix + ".s.*"},
			DeliverPolicy:  natsjs.DeliverByStartSequencePolicy,
			OptStartSeq:    c.seq + 1,
		})
		if err != nil {
			fail(st.feedErr(ctx, err))
			return
		}
		if !o.Follow {
			ci, err := cons.Info(cctx)
			if err != nil {
				fail(st.feedErr(ctx, err))
				return
			}
			if ci.NumPending == 0 {
				return
			}
		}
		msgs, err := cons.Messages()
		if err != nil {
			fail(st.feedErr(ctx, err))
			return
		}
		defer msgs.Stop()
		go func() {
			<-cctx.Done()
			msgs.Stop()
		}()
		for {
			m, err := msgs.Next()
			if err != nil {
				fail(st.feedErr(ctx, err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				fail(err)
				return
			}
			ch, ok, err := st.change(&c, m, md.Sequence.Stream)
			if err != nil {
				fail(err)
				return
			}
			c.seq = md.Sequence.Stream
			if ok {
				ch.Cursor = c.cursor()
				if !yield(ch, nil) {
					return
				}
			}
			if !o.Follow && md.NumPending == 0 {
				return
			}
		}
	}
}

// feedErr is the error a feed ends with: the caller's context's, the
// store's close, or err.
func (st *Store) feedErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-st.stop:
		return store.ErrClosed
	default:
	}
	return fmt.Errorf("changes: %w", err)
}

// change turns message m (stream sequence seq) into a change, if it makes
// one.
func (st *Store) change(c *jsCursor, m natsjs.Msg, seq uint64) (store.Change, bool, error) {
	subj := m.Subject()
	id, ok := st.idOf(subj)
	if !ok {
		return store.Change{}, false, st.corrupt(subj, seq, "not a session's subject")
	}
	raw := &natsjs.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Headers(), Data: m.Data()}
	ref, rec, err := st.index(subj, raw)
	if err != nil {
		return store.Change{}, false, err
	}
	switch {
	case ref.fence:
		return store.Change{}, false, nil
	case ref.tombstone:
		delete(c.copying, id)
		return store.Change{Kind: store.ChangeDelete, Session: id}, true, nil
	case ref.header:
		h := rec.Header
		if h.ParentSession != "" && h.IsSeeded && rec.Inherited > 0 {
			// A fork by copy: its parent's events follow.
			c.copying[id] = rec.Inherited
			return store.Change{Kind: store.ChangeFork, Session: id, Header: &h, Parent: h.ParentSession, N: rec.Inherited}, true, nil
		}
		return store.Change{Kind: store.ChangeCreate, Session: id, Header: &h}, true, nil
	}
	evs, err := st.decodeFrame(subj, id, ref, raw)
	if err != nil {
		return store.Change{}, false, err
	}
	if n, ok := c.copying[id]; ok {
		if ref.first+uint64(ref.count) <= n {
			return store.Change{}, false, nil // the parent's, copied
		}
		delete(c.copying, id)
		if ref.first < n {
			evs = evs[n-ref.first:]
		}
	}
	return store.Change{Kind: store.ChangeAppend, Session: id, Seq: evs[0].Seq, Events: slices.Clip(evs)}, true, nil
}

// jsCursor is what a store.Cursor of this backend holds: the stream's
// creation time (which store), the last stream sequence read, and the
// forks whose copy of their parent's events it is inside (id → events
// inherited).
type jsCursor struct {
	created int64
	seq     uint64
	copying map[string]uint64
}

const jsCursorPrefix = "j1"

func (c *jsCursor) cursor() store.Cursor {
	var b strings.Builder
	fmt.Fprintf(&b, "%s-%x-%x", jsCursorPrefix, uint64(c.created), c.seq)
	ids := make([]string, 0, len(c.copying))
	for id := range c.copying {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "-%s.%x", hex.EncodeToString([]byte(id)), c.copying[id])
	}
	return store.Cursor(b.String())
}

func parseJSCursor(s store.Cursor) (jsCursor, error) {
	bad := func(reason string) error {
		return &store.CursorError{Cursor: s, Kind: store.ErrInvalidCursor, Reason: reason}
	}
	f := strings.Split(string(s), "-")
	if f[0] != jsCursorPrefix || len(f) < 3 {
		return jsCursor{}, bad("not a cursor of this backend (\"" + jsCursorPrefix + "-<stream>-<sequence>\")")
	}
	num := func(x string) (uint64, error) {
		n, err := strconv.ParseUint(x, 16, 64)
		if err != nil || x != strconv.FormatUint(n, 16) {
			return 0, errors.New("bad number")
		}
		return n, nil
	}
	created, err1 := num(f[1])
	seq, err2 := num(f[2])
	if err1 != nil || err2 != nil {
		return jsCursor{}, bad("the stream's time or the sequence is not a hexadecimal number")
	}
	c := jsCursor{created: int64(created), seq: seq, copying: map[string]uint64{}}
	for _, x := range f[3:] {
		h, n, ok := strings.Cut(x, ".")
		id, err := hex.DecodeString(h)
		v, err2 := num(n)
		if !ok || err != nil || err2 != nil || len(id) == 0 || v == 0 {
			return jsCursor{}, bad(fmt.Sprintf("bad fork entry %q", x))
		}
		c.copying[string(id)] = v
	}
	return c, nil
}

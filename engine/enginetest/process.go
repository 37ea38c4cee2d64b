package enginetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
	"github.com/seglog/seglog/testgen"
)

// The contract across processes: a peer is the test binary started again
// as a store instance over the same directory, driven through a small
// request protocol on its stdin and stdout (JSON lines). The cases of
// RunAcrossProcesses put the second instance (or the other handle) of a
// contract case in the peer.

// PeerEnv is the environment variable under which a test binary serves as
// a peer: its value is the store directory.
const PeerEnv = "SEGLOG_ENGINETEST_PEER"

// ServePeer, called first in a test binary's TestMain, makes the process
// a peer if PeerEnv is set: it opens the store with open, serves requests
// until its stdin closes, and exits. Otherwise it returns at once.
func ServePeer(open func(dir string) (Store, error)) {
	dir := os.Getenv(PeerEnv)
	if dir == "" {
		return
	}
	s, err := open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer: open:", err)
		os.Exit(2)
	}
	serve(s, os.Stdin, os.Stdout)
	s.Close()
	os.Exit(0)
}

type request struct {
	Op     string            `json:"op"`
	H      int               `json:"h,omitempty"`
	ID     string            `json:"id,omitempty"`
	Header store.Header      `json:"header"`
	Access store.Access      `json:"access,omitempty"`
	Events []event.Event     `json:"events,omitempty"`
	Off    int               `json:"off,omitempty"`
	Limit  int               `json:"limit,omitempty"`
	N      uint64            `json:"n,omitempty"`
	List   store.ListOptions `json:"list"`
	// Fork's MarkerTime (if Marker), Delete's IfRevision (if Rev).
	Marker   bool   `json:"marker,omitempty"`
	MarkerMs int64  `json:"markerMs,omitempty"`
	Rev      string `json:"rev,omitempty"`
	// Inspect's InspectEvents, if set.
	Inspect *store.InspectOptions `json:"inspect,omitempty"`
}

type response struct {
	H      int              `json:"h,omitempty"`
	Err    string           `json:"err,omitempty"`
	Kind   string           `json:"kind,omitempty"`
	Events []event.Event    `json:"events,omitempty"`
	Snap   store.Snapshot   `json:"snap"`
	Snaps  []store.Snapshot `json:"snaps,omitempty"`
	N      uint64           `json:"n,omitempty"`
	Cursor string           `json:"cursor,omitempty"`
	// Inspection answers "inspect"
	Inspection store.Inspection `json:"inspection"`
	// Turn answers "turnstate"
	Turn store.TurnState `json:"turn"`
	// Changes answers "changes"
	Changes []store.Change `json:"changes,omitempty"`
}

// errKinds are the contract's sentinels, by the name a peer sends.
var errKinds = map[string]error{
	"exists": store.ErrSessionExists, "notfound": store.ErrSessionNotFound,
	"owned": store.ErrAlreadyOwned, "lost": store.ErrOwnershipLost,
	"handleclosed": store.ErrHandleClosed, "closed": store.ErrClosed,
	"readonly": store.ErrReadOnly, "invalid": store.ErrInvalidArgument,
	"event": store.ErrInvalidEvent, "header": store.ErrInvalidHeader,
	"locked": store.ErrLocked, "seq": store.ErrSeqMismatch,
	"revision":      store.ErrRevisionMismatch,
	"cursorexpired": store.ErrCursorExpired, "badcursor": store.ErrInvalidCursor,
}

func serve(s Store, in io.Reader, out io.Writer) {
	ctx := context.Background()
	dec := json.NewDecoder(bufio.NewReader(in))
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	handles := map[int]Session{}
	next := 1
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return
		}
		var resp response
		var err error
		h := handles[req.H]
		switch req.Op {
		case "create", "open", "fork", "resume":
			var nh Session
			if req.Op == "create" {
				nh, err = s.Create(ctx, req.Header)
			} else if req.Op == "resume" {
				nh, resp.Events, err = s.Resume(ctx, req.ID)
			} else if req.Op == "fork" {
				var opts []store.ForkOption
				if req.Marker {
					opts = append(opts, store.MarkerTime(req.MarkerMs))
				}
				nh, err = s.Fork(ctx, req.ID, req.N, req.Header, opts...)
			} else {
				nh, err = s.Open(ctx, req.ID, req.Access)
			}
			if err == nil {
				handles[next], resp.H = nh, next
				next++
			}
		case "stat":
			resp.Snap, err = s.Stat(ctx, req.ID)
		case "list":
			resp.Snaps, err = s.List(ctx)
		case "listpage":
			resp.Snaps, resp.Cursor, err = s.ListPage(ctx, req.List)
		case "inspect":
			var opts []store.InspectOption
			if o := req.Inspect; o != nil {
				opts = append(opts, store.InspectEvents(o.Offset, o.Limit))
			}
			resp.Inspection, err = s.Inspect(ctx, req.ID, opts...)
		case "changes":
			for c, cerr := range s.Changes(ctx, store.Cursor(req.ID)) {
				if cerr != nil {
					err = cerr
					break
				}
				resp.Changes = append(resp.Changes, c)
			}
		case "delete":
			var opts []store.DeleteOption
			if req.Rev != "" {
				opts = append(opts, store.IfRevision(req.Rev))
			}
			err = s.Delete(ctx, req.ID, opts...)
		case "flushall":
			err = s.Flush(ctx)
		case "append":
			err = h.Append(ctx, req.Events...)
		case "enqueue":
			err = h.Enqueue(req.Events...)
		case "flush":
			err = h.Flush(ctx)
		case "read":
			resp.Events, err = h.Read(ctx, req.Off, req.Limit)
		case "wait":
			resp.N, err = h.Wait(ctx, req.N)
		case "len":
			resp.N = h.Len()
		case "turnstate":
			resp.Turn, err = h.TurnState(ctx)
		case "close":
			err = h.Close()
		default:
			err = fmt.Errorf("peer: unknown request %q", req.Op)
		}
		if err != nil {
			resp.Err = err.Error()
			for k, sentinel := range errKinds {
				if errors.Is(err, sentinel) {
					resp.Kind = k
				}
			}
		}
		if enc.Encode(&resp) != nil || w.Flush() != nil {
			return
		}
	}
}

// Peer is a store instance in another process (see ServePeer).
type Peer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	mu  sync.Mutex
	enc *json.Encoder
	dec *json.Decoder
}

// StartPeer starts this test binary again as a peer over dir, running
// only the (empty) test pattern: ServePeer in its TestMain serves. The
// peer is stopped when the test ends.
func StartPeer(t *testing.T, dir string) *Peer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), PeerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Peer{cmd: cmd, in: in, enc: json.NewEncoder(in), dec: json.NewDecoder(bufio.NewReader(out))}
	t.Cleanup(func() { p.Close() })
	return p
}

func (p *Peer) call(req request) (response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var resp response
	if err := p.enc.Encode(&req); err != nil {
		return resp, fmt.Errorf("peer: %w", err)
	}
	if err := p.dec.Decode(&resp); err != nil {
		return resp, fmt.Errorf("peer: %w", err)
	}
	if resp.Err == "" {
		return resp, nil
	}
	if sentinel := errKinds[resp.Kind]; sentinel != nil {
		return resp, fmt.Errorf("peer: %w (%s)", sentinel, resp.Err)
	}
	return resp, fmt.Errorf("peer: %s", resp.Err)
}

// Create implements Store.
func (p *Peer) Create(_ context.Context, h store.Header, opts ...store.CreateOption) (Session, error) {
	if len(opts) > 0 {
		return nil, errors.New("peer: create options are not carried")
	}
	resp, err := p.call(request{Op: "create", Header: h})
	if err != nil {
		return nil, err
	}
	return &peerHandle{p: p, h: resp.H, id: h.ID, access: store.Write, header: h}, nil
}

// Fork implements Store.
func (p *Peer) Fork(_ context.Context, parent string, n uint64, h store.Header, opts ...store.ForkOption) (Session, error) {
	fo := store.ForkOptionsOf(opts)
	resp, err := p.call(request{Op: "fork", ID: parent, N: n, Header: h, Marker: fo.HasMarkerTime, MarkerMs: fo.MarkerTime})
	if err != nil {
		return nil, err
	}
	h, _ = store.PrepareForkHeader(h, parent, n)
	return &peerHandle{p: p, h: resp.H, id: h.ID, access: store.Write, header: h}, nil
}

// Open implements Store.
func (p *Peer) Open(_ context.Context, id string, a store.Access) (Session, error) {
	resp, err := p.call(request{Op: "open", ID: id, Access: a})
	if err != nil {
		return nil, err
	}
	return &peerHandle{p: p, h: resp.H, id: id, access: a}, nil
}

// Stat implements Store.
func (p *Peer) Stat(_ context.Context, id string) (store.Snapshot, error) {
	resp, err := p.call(request{Op: "stat", ID: id})
	return resp.Snap, err
}

// List implements Store.
func (p *Peer) List(context.Context) ([]store.Snapshot, error) {
	resp, err := p.call(request{Op: "list"})
	return resp.Snaps, err
}

// ListPage implements Store.
func (p *Peer) ListPage(_ context.Context, opts store.ListOptions) ([]store.Snapshot, string, error) {
	resp, err := p.call(request{Op: "listpage", List: opts})
	return resp.Snaps, resp.Cursor, err
}

// Inspect implements Store.
func (p *Peer) Inspect(_ context.Context, id string, opts ...store.InspectOption) (store.Inspection, error) {
	req := request{Op: "inspect", ID: id}
	if len(opts) > 0 {
		o := store.InspectOptionsOf(opts)
		req.Inspect = &o
	}
	resp, err := p.call(req)
	return resp.Inspection, err
}

// ResumeMany implements Store: Resume of each, in the peer (each with
// its own flush).
func (p *Peer) ResumeMany(ctx context.Context, ids []string) ([]store.Resumed[Session], error) {
	out := make([]store.Resumed[Session], len(ids))
	for i, id := range ids {
		out[i].ID = id
		out[i].Handle, out[i].Closers, out[i].Err = p.Resume(ctx, id)
	}
	return out, nil
}

// Changes implements Store: the peer reads the feed from the cursor up
// to its end (it does not follow: with Follow, the changes up to the end
// come, then ctx's error).
func (p *Peer) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	return func(yield func(store.Change, error) bool) {
		resp, err := p.call(request{Op: "changes", ID: string(from)})
		for _, c := range resp.Changes {
			if !yield(c, nil) {
				return
			}
		}
		if err == nil && store.ChangesConfig(opts).Follow {
			<-ctx.Done()
			err = ctx.Err()
		}
		if err != nil {
			yield(store.Change{}, err)
		}
	}
}

// Delete implements Store.
func (p *Peer) Delete(_ context.Context, id string, opts ...store.DeleteOption) error {
	_, err := p.call(request{Op: "delete", ID: id, Rev: store.DeleteOptionsOf(opts).Revision})
	return err
}

// Resume implements Store.
func (p *Peer) Resume(_ context.Context, id string) (Session, []event.Event, error) {
	resp, err := p.call(request{Op: "resume", ID: id})
	if err != nil {
		return nil, nil, err
	}
	return &peerHandle{p: p, h: resp.H, id: id, access: store.Write}, resp.Events, nil
}

// Flush implements Store.
func (p *Peer) Flush(context.Context) error {
	_, err := p.call(request{Op: "flushall"})
	return err
}

// Close ends the peer: it closes its store and exits.
func (p *Peer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == nil {
		return nil
	}
	p.in.Close()
	p.in = nil
	return p.cmd.Wait()
}

// Kill ends the peer with SIGKILL: nothing is closed.
func (p *Peer) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == nil {
		return nil
	}
	p.cmd.Process.Kill()
	p.in.Close()
	p.in = nil
	p.cmd.Wait()
	return nil
}

type peerHandle struct {
	p      *Peer
	h      int
	id     string
	access store.Access
	header store.Header
}

func (h *peerHandle) ID() string                  { return h.id }
func (h *peerHandle) Header() store.Header        { return h.header }
func (h *peerHandle) InheritedEventCount() uint64 { return 0 }
func (h *peerHandle) Access() store.Access        { return h.access }

func (h *peerHandle) Read(_ context.Context, off, limit int) ([]event.Event, error) {
	resp, err := h.p.call(request{Op: "read", H: h.h, Off: off, Limit: limit})
	return resp.Events, err
}

func (h *peerHandle) Append(_ context.Context, evs ...event.Event) error {
	_, err := h.p.call(request{Op: "append", H: h.h, Events: evs})
	return err
}

func (h *peerHandle) Enqueue(evs ...event.Event) error {
	_, err := h.p.call(request{Op: "enqueue", H: h.h, Events: evs})
	return err
}

func (h *peerHandle) Flush(context.Context) error {
	_, err := h.p.call(request{Op: "flush", H: h.h})
	return err
}

func (h *peerHandle) Wait(_ context.Context, n uint64) (uint64, error) {
	resp, err := h.p.call(request{Op: "wait", H: h.h, N: n})
	return resp.N, err
}

func (h *peerHandle) Events(ctx context.Context, from int) iter.Seq2[event.Event, error] {
	return store.Iterate(ctx, h.Read, from)
}

func (h *peerHandle) TurnState(context.Context) (store.TurnState, error) {
	resp, err := h.p.call(request{Op: "turnstate", H: h.h})
	return resp.Turn, err
}

func (h *peerHandle) Len() uint64 {
	resp, _ := h.p.call(request{Op: "len", H: h.h})
	return resp.N
}

func (h *peerHandle) Close() error {
	_, err := h.p.call(request{Op: "close", H: h.h})
	return err
}

// RunAcrossProcesses runs the contract cases that involve a second store
// instance or another handle with that instance in another OS process (a
// peer, see ServePeer): C3, C4, C5, C14 and C15 of Run, Wait, and Delete
// and Resume from the other process, where "visible"
// across processes means flushed. open opens the store in dir in this
// process; the test binary's TestMain must call ServePeer.
func RunAcrossProcesses(t *testing.T, open func(t *testing.T, dir string) Store) {
	ctx := context.Background()
	type pair struct {
		s    Store
		peer *Peer
	}
	start := func(t *testing.T) pair {
		dir := t.TempDir()
		s := open(t, dir)
		t.Cleanup(func() { s.Close() })
		return pair{s, StartPeer(t, dir)}
	}
	wantErr := func(t *testing.T, what string, err, kind error) {
		t.Helper()
		if !errors.Is(err, kind) {
			t.Errorf("%s: %v, want %v", what, err, kind)
		}
	}
	wantEvents := func(t *testing.T, what string, want, got []event.Event) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type || string(got[i].Data) != string(want[i].Data) {
				t.Fatalf("%s: event %d is %+v, want %+v", what, i, got[i], want[i])
			}
		}
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("C3/pending-id-held-by-another-process-then-free-after-close", func(t *testing.T) {
		e := start(t)
		h, err := e.s.Create(ctx, Meta("s"))
		must(t, err)
		_, err = e.peer.Create(ctx, Meta("s"))
		wantErr(t, "create in another process", err, store.ErrSessionExists)
		must(t, h.Close()) // never written: the ID is free again, everywhere
		h2, err := e.peer.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h2.Close())
	})
	t.Run("C4/concurrent-creates-in-two-processes-one-wins", func(t *testing.T) {
		e := start(t)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			s := Store(e.peer)
			if i%2 == 0 {
				s = e.s
			}
			wg.Go(func() { _, errs[i] = s.Create(ctx, Meta("s")) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				wantErr(t, "losing create", err, store.ErrSessionExists)
			}
		}
		if won != 1 {
			t.Errorf("%d creates won, want 1", won)
		}
	})
	t.Run("C5/materialized-id-exists-in-another-process", func(t *testing.T) {
		e := start(t)
		h, err := e.peer.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h.Append(ctx, OneTurn()...))
		must(t, h.Flush(ctx))
		must(t, h.Close())
		_, err = e.s.Create(ctx, Meta("s"))
		wantErr(t, "create of an ID another process made", err, store.ErrSessionExists)
	})
	t.Run("C14/readers-in-another-process-see-flushed-appends", func(t *testing.T) {
		e := start(t)
		h, err := e.s.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h.Flush(ctx))
		early, err := e.peer.Open(ctx, "s", store.Read)
		must(t, err)
		must(t, h.Append(ctx, OneTurn()...))
		must(t, h.Flush(ctx))
		late, err := e.peer.Open(ctx, "s", store.Read)
		must(t, err)
		got, err := early.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "early reader", OneTurn(), got)
		got, err = late.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "late reader", OneTurn(), got)
		_, err = e.peer.Open(ctx, "s", store.Write)
		wantErr(t, "write open while this process writes", err, store.ErrAlreadyOwned)
	})
	t.Run("wait-in-another-process", func(t *testing.T) {
		e := start(t)
		h, err := e.s.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h.Flush(ctx))
		r, err := e.peer.Open(ctx, "s", store.Read)
		must(t, err)
		done := appendTurnLater(ctx, h)
		n, err := r.Wait(ctx, 0)
		if err != nil || n == 0 {
			t.Fatalf("wait in another process: %d, %v", n, err)
		}
		must(t, <-done)
		n, err = r.Wait(ctx, 5)
		if err != nil || n != 6 {
			t.Fatalf("wait for what is there: %d, %v; want 6", n, err)
		}
	})
	t.Run("delete-and-resume-in-another-process", func(t *testing.T) {
		e := start(t)
		h, err := e.s.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h.Append(ctx, OneTurn()[:3]...)) // a turn left open
		must(t, h.Flush(ctx))
		_, _, err = e.peer.Resume(ctx, "s")
		wantErr(t, "resume in another process while this one writes", err, store.ErrAlreadyOwned)
		wantErr(t, "delete in another process while this one writes", e.peer.Delete(ctx, "s"), store.ErrAlreadyOwned)
		// Inspect in the other process names this one as the holder: the
		// turn is in progress, not interrupted.
		in, err := e.peer.Inspect(ctx, "s")
		if err != nil || in.Holder == nil || in.Holder.PID != os.Getpid() || in.Holder.Since.IsZero() || len(in.Closers) != 2 {
			t.Errorf("inspect in another process while this one writes: Holder %v, %d closers, %v; want process %d since it took the lease, 2 closers", in.Holder, len(in.Closers), err, os.Getpid())
		}
		must(t, h.Close())
		if in, err := e.peer.Inspect(ctx, "s"); err != nil || in.Holder != nil {
			t.Errorf("inspect in another process once this one closed: Holder %v, %v; want none", in.Holder, err)
		}
		w, closers, err := e.peer.Resume(ctx, "s")
		must(t, err)
		if len(closers) != 2 || closers[0].Type != "step/end" || closers[1].Type != "turn/end" {
			t.Fatalf("closers of the other process's resume: %+v", closers)
		}
		must(t, w.Close())
		r, err := e.s.Open(ctx, "s", store.Read)
		must(t, err)
		got, err := r.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "resumed in the other process", append(OneTurn()[:3], closers...), got)
		must(t, e.peer.Delete(ctx, "s"))
		_, err = e.s.Stat(ctx, "s")
		wantErr(t, "stat of a session another process deleted", err, store.ErrSessionNotFound)
		_, err = r.Wait(ctx, 0)
		wantErr(t, "wait of a session another process deleted", err, store.ErrSessionNotFound)
	})
	t.Run("C15/another-process-continues-seqs", func(t *testing.T) {
		e := start(t)
		h, err := e.s.Create(ctx, Meta("s"))
		must(t, err)
		must(t, h.Append(ctx, OneTurn()...))
		must(t, h.Flush(ctx))
		must(t, h.Close())
		w, err := e.peer.Open(ctx, "s", store.Write)
		must(t, err)
		must(t, w.Append(ctx, Turn2()...))
		must(t, w.Flush(ctx))
		got, err := w.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "0-7 in the other process", append(OneTurn(), Turn2()...), got)
		r, err := e.s.Open(ctx, "s", store.Read)
		must(t, err)
		got, err = r.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "0-7 here", append(OneTurn(), Turn2()...), got)
	})
	t.Run("C15/continues-after-a-killed-process", func(t *testing.T) {
		e := start(t)
		w, err := e.peer.Create(ctx, Meta("s"))
		must(t, err)
		must(t, w.Append(ctx, OneTurn()...))
		must(t, w.Flush(ctx))
		must(t, w.Append(ctx, Turn2()[:1]...)) // appended, never flushed
		must(t, e.peer.Kill())                 // its lease dies with it
		if in, err := e.s.Inspect(ctx, "s"); err != nil || in.Holder != nil {
			t.Errorf("inspect after the writer was killed: Holder %v, %v; want none", in.Holder, err)
		}
		h, err := e.s.Open(ctx, "s", store.Write)
		must(t, err)
		got, err := h.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "what the killed process flushed", OneTurn(), got)
		must(t, h.Append(ctx, Turn2()...))
		must(t, h.Flush(ctx))
		got, err = h.Read(ctx, 0, -1)
		must(t, err)
		wantEvents(t, "continued", append(OneTurn(), Turn2()...), got)
	})
	t.Run("turn-state-after-a-process-killed-mid-turn", func(t *testing.T) {
		// A writer process killed in the middle of a turn: this process
		// knows nothing of the session's turns (its hint is what the
		// index holds, if anything); Inspect, TurnState and Resume give
		// what a fold of the whole log gives.
		e := start(t)
		log := testgen.AgentLog(7, 400, 24)
		w, err := e.peer.Create(ctx, Meta("s"))
		must(t, err)
		for at := 0; at < len(log); at += 37 {
			must(t, w.Append(ctx, log[at:min(at+37, len(log))]...))
			must(t, w.Flush(ctx))
		}
		must(t, e.peer.Kill())
		st, err := recovery.Fold(log)
		must(t, err)
		if st.Balanced() || len(st.Pending) == 0 {
			t.Fatalf("the log ends balanced or with no call pending (%+v): no cut turn to test", st)
		}
		in, err := e.s.Inspect(ctx, "s", store.InspectEvents(0, 0))
		must(t, err)
		if diff := cmp.Diff(storekit.TurnStateOf(st), in.Turn); diff != "" {
			t.Errorf("Inspect's turn state (-whole log +got):\n%s", diff)
		}
		h, closers, err := e.s.Resume(ctx, "s")
		must(t, err)
		if diff := cmp.Diff(recovery.Closers(st), closers, cmp.Comparer(sameEvent)); diff != "" {
			t.Errorf("Resume's closers (-whole log +got):\n%s", diff)
		}
		ts, err := h.TurnState(ctx)
		must(t, err)
		if ts.Open || ts.NextTurn != storekit.TurnStateOf(st).NextTurn || ts.Len != uint64(len(log)+len(closers)) {
			t.Errorf("turn state after Resume: %+v", ts)
		}
		must(t, h.Close())
	})
	runChangesAcrossProcesses(t, open)
}

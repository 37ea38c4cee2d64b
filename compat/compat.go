package compat

import (
	"container/list"
	"context"
	"path/filepath"
	"sync"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// Locate is where session h's log lives in the reference harness's
// layout under root, as an absolute path:
// root/<project>/<encoded ID>/session.v3.jsonl (with compressed,
// session.v3.jsonl.zstd), the file seglog export writes and seglog import
// reads (jsonl.LogPath). Like the reference's locate it reads, creates and
// flushes nothing: the file may not exist, or not hold the latest events.
// A seglog store keeps its sessions in segments they share, none in a
// file of its own (as the reference's SQLite backend, whose locate
// returns nothing): this is the place of the session's reference log, not
// of its stored bytes. It fails for an ID jsonl.EncodeID refuses.
func Locate(root string, h store.Header, compressed bool) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	return jsonl.LogPath(abs, h, compressed)
}

// SupportsRawArtifacts is the reference's supportsRawArtifacts: true,
// every store gives ReadRaw.
const SupportsRawArtifacts = true

// RawArtifact is a session as the reference's JSONL backend holds it.
type RawArtifact struct {
	Header  store.Header // as stored; Version is the text's (the current format)
	Content []byte       // the session.v3.jsonl text: the header line, then an event a line
}

// ReadRaw returns session id as the reference's JSONL text: its header
// line and every stored event, a line each, as seglog export writes them
// (jsonl.Encode, uncompressed), each event's data byte for byte. Unlike
// the reference's readRaw it is rendered from the stored events, not read
// from a file: a store's own bytes are compressed frames many sessions
// share. A session of an older format reads migrated, as every read. A
// session that does not exist is store.ErrSessionNotFound (the
// reference's undefined); it takes no lease and writes nothing.
func ReadRaw(ctx context.Context, s store.Store, id string) (RawArtifact, error) {
	h, err := s.Open(ctx, id, store.Read)
	if err != nil {
		return RawArtifact{}, err
	}
	defer h.Close()
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return RawArtifact{}, err
	}
	hdr := h.Header()
	hdr.Version = jsonl.Version
	b, err := jsonl.Encode(hdr, evs, false, nil)
	if err != nil {
		return RawArtifact{}, &store.SessionError{ID: id, Op: "read", Err: err}
	}
	return RawArtifact{Header: hdr, Content: b}, nil
}

// DefaultCacheSize is how many inspected sessions a Preparer keeps when
// NewPreparer is given none: the reference's coordinator kept 5.
const DefaultCacheSize = 5

// Preparer is the reference's inspect and prepare over a store: Inspect
// reads a session's balanced view and keeps the last few (least recently
// used out) under the revision they were read at; Prepare opens the
// session for write and closes its interrupted turn, as Resume does,
// reusing a kept view when the session has not changed since (nothing is
// read again). The cache holds views, never a lease: another process may
// write the session meanwhile, and the revision tells.
type Preparer struct {
	s    store.Store
	size int

	mu    sync.Mutex
	order *list.List // of *entry, most recent first
	byID  map[string]*list.Element
}

type entry struct {
	id       string
	revision string
	in       store.Inspection
}

// NewPreparer makes a Preparer over s keeping at most size views
// (DefaultCacheSize if size <= 0).
func NewPreparer(s store.Store, size int) *Preparer {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Preparer{s: s, size: size, order: list.New(), byID: map[string]*list.Element{}}
}

// Inspect is the store's Inspect (the log and the closers of an open
// turn; no lease taken, nothing written), served from the cache when the
// session's revision is the one a kept view was read at. A view is kept
// only if the revision was the same before and after its read (a session
// another handle writes meanwhile is read, not kept), and no live writer
// held the session (Holder nil: a held session's turn is in progress, and
// who holds it is a fact of the moment, which a kept view would repeat).
// A view served from the cache says no holder, as when it was read. The
// returned Inspection's slices are shared with the cache: do not modify
// them.
func (p *Preparer) Inspect(ctx context.Context, id string) (store.Inspection, error) {
	before, err := p.s.Stat(ctx, id)
	if err != nil {
		p.forget(id)
		return store.Inspection{}, err
	}
	if in, ok := p.cached(id, before.Revision); ok {
		return in, nil
	}
	in, err := p.s.Inspect(ctx, id)
	if err != nil {
		return store.Inspection{}, err
	}
	if after, err := p.s.Stat(ctx, id); err == nil && in.Holder == nil && after.Revision == before.Revision && after.EventCount == uint64(len(in.Events)) {
		p.keep(id, before.Revision, in)
	}
	return in, nil
}

// Prepared is a session prepared for a host to go on with it: its write
// handle (the caller closes it: the reference's dispose), the log as it
// now stands (the closers included) and the closers Prepare appended
// (none if the log was balanced).
type Prepared struct {
	Handle  store.Handle
	Header  store.Header
	Events  []event.Event
	Closers []event.Event
	// Reused: the log was not read again (a view Inspect kept, at the
	// revision the session had under the lease).
	Reused bool
}

// Prepare opens session id for write and closes a turn a crash left
// open, as the store's Resume: the closers of
// recovery.InterruptedTurnClosers appended as one batch and flushed. With
// the lease held it compares the session's revision with the view
// Inspect kept: if equal, the closers are the view's and the log is not
// read again. It fails as Resume does (store.ErrAlreadyOwned, a
// *store.OwnedError naming the holder, while another write handle holds
// the session), and closes the handle when it fails after the open. The
// session's view leaves the cache (its writer changes it).
func (p *Preparer) Prepare(ctx context.Context, id string) (*Prepared, error) {
	h, err := p.s.Open(ctx, id, store.Write)
	if err != nil {
		return nil, err
	}
	pr, err := p.prepare(ctx, h)
	p.forget(id)
	if err != nil {
		h.Close()
		return nil, err
	}
	return pr, nil
}

func (p *Preparer) prepare(ctx context.Context, h store.Handle) (*Prepared, error) {
	id := h.ID()
	pr := &Prepared{Handle: h, Header: h.Header()}
	snap, err := p.s.Stat(ctx, id)
	if err != nil {
		return nil, err
	}
	in, ok := p.cached(id, snap.Revision)
	if ok && uint64(len(in.Events)) == h.Len() {
		pr.Reused = true
		pr.Events, pr.Closers = in.Events, in.Closers
	} else {
		if pr.Events, err = h.Read(ctx, 0, -1); err != nil {
			return nil, err
		}
		if pr.Closers, err = recovery.InterruptedTurnClosers(pr.Events); err != nil {
			return nil, &store.SessionError{ID: id, Op: "resume", Err: err}
		}
	}
	if len(pr.Closers) > 0 {
		if err := h.Append(ctx, pr.Closers...); err != nil {
			return nil, err
		}
		if err := h.Flush(ctx); err != nil {
			return nil, err
		}
		pr.Events = append(pr.Events[:len(pr.Events):len(pr.Events)], pr.Closers...)
	}
	return pr, nil
}

// Len is the number of views kept.
func (p *Preparer) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.order.Len()
}

func (p *Preparer) cached(id, revision string) (store.Inspection, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	el, ok := p.byID[id]
	if !ok {
		return store.Inspection{}, false
	}
	e := el.Value.(*entry)
	if e.revision != revision {
		p.order.Remove(el)
		delete(p.byID, id)
		return store.Inspection{}, false
	}
	p.order.MoveToFront(el)
	return e.in, true
}

func (p *Preparer) keep(id, revision string, in store.Inspection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if el, ok := p.byID[id]; ok {
		el.Value = &entry{id: id, revision: revision, in: in}
		p.order.MoveToFront(el)
		return
	}
	p.byID[id] = p.order.PushFront(&entry{id: id, revision: revision, in: in})
	for p.order.Len() > p.size {
		last := p.order.Back()
		p.order.Remove(last)
		delete(p.byID, last.Value.(*entry).id)
	}
}

func (p *Preparer) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if el, ok := p.byID[id]; ok {
		p.order.Remove(el)
		delete(p.byID, id)
	}
}

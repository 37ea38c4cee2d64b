package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// Options configures a Store. The zero value works against a NATS server
// with JetStream enabled.
type Options struct {
	// Stream is the stream holding every session; default "SEGLOG".
	Stream string
	// Prefix starts every session subject; default "seglog".
	Prefix string
	// LeaseBucket is the key-value bucket of write leases (a host lease
	// per store, an ownership record per session held); default
	// "SEGLOG_LEASES".
	LeaseBucket string
	// Create makes Open create the stream and the lease bucket if they
	// are missing (the host then needs the rights to create them); else
	// Open fails with ErrNotProvisioned. Open never changes an existing
	// stream or bucket: it checks their settings (*ConfigError).
	Create bool
	// Replicas of the stream and the lease bucket. Zero accepts what
	// they have (and creates them with 1); else Open checks it. Use 3 on
	// a cluster: an acknowledged flush then survives the loss of any
	// server.
	Replicas int
	// LeaseTTL is how long a store's host lease lives without renewal:
	// the bucket's TTL. Zero takes the bucket's (and creates it with
	// 30 s); else Open checks it. A host that dies holds its sessions
	// this long.
	LeaseTTL time.Duration
	// Host names this store in the leases it holds. By default it is
	// unique to the process (the machine's name, the pid and a random
	// number): a process that dies holds its sessions until their leases
	// expire (LeaseTTL). Set, it must be stable and unique to one machine
	// (e.g. "agent-host-7"): a store opened under it takes over the leases
	// of a dead earlier store of the same name on the same machine at
	// once; that it is dead is proven by a lock file in LockDir, which
	// Open holds for the store's life (a second store under the same Host
	// on the machine fails to open with store.ErrLocked). The leases of
	// a store of the same Host on another machine are taken over only
	// once its host lease is proven dead, as any other's.
	Host string
	// LockDir holds the lock files of stores opened with a Host; default
	// os.TempDir(). Every process on the machine must see the same
	// directory (a service with a private /tmp needs another).
	LockDir string
	// Timeout bounds each request to the server, whatever the caller's
	// context allows (a shorter deadline of the caller's still ends it
	// sooner): a request whose server dies before it answers fails
	// after Timeout, and the next goes over the reconnected connection;
	// default 5 s.
	Timeout time.Duration
	// FrameBytes is the raw size of the events of one message; default
	// 128 KiB (larger batches than the local engine's 32 KiB frames: a
	// message costs a write on the server). Appended events are published
	// without waiting for a flush once FrameBytes of them wait, or 16
	// times that on a stream with atomic batches (then as one batch). A
	// message never passes the server's max_payload: a larger batch is
	// cut.
	FrameBytes int
	// WriteBehindWindow is Enqueue's batching window and every write
	// handle's durability window; default handle.DefaultWindow. An event
	// handed to Append or Enqueue is acknowledged by the stream at most
	// this long (plus one publish) after it was handed over, Flush or
	// not: the handle flushes in the background at each window's end.
	WriteBehindWindow time.Duration
	// FlushOnly is the weaker promise: events reach the stream only at a
	// Flush (or FrameBytes of them, or the handle's Close), and a crash
	// loses everything appended or enqueued since.
	FlushOnly bool
	// AfterFunc arms write-behind windows; default time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) handle.Timer
	// Catalog is the set of event types reads accept; default
	// event.NewCatalog().
	Catalog *event.Catalog
	// SurfaceRules makes write handles check the v3 surface rules on
	// what they append; see engine.Options.SurfaceRules.
	SurfaceRules bool
	// Logger receives warnings; default discards.
	Logger *slog.Logger
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Stream == "" {
		c.Stream = "SEGLOG"
	}
	if c.Prefix == "" {
		c.Prefix = "seglog"
	}
	if c.LeaseBucket == "" {
		c.LeaseBucket = "SEGLOG_LEASES"
	}
	if c.Host == "" {
		machine, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("jetstream: host name: %w", err)
		}
		var r [4]byte
		if _, err := rand.Read(r[:]); err != nil {
			return c, fmt.Errorf("jetstream: %w", err)
		}
		c.Host = fmt.Sprintf("%s-%d-%s", machine, os.Getpid(), hex.EncodeToString(r[:]))
	}
	if c.LockDir == "" {
		c.LockDir = os.TempDir()
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.FrameBytes <= 0 {
		c.FrameBytes = 128 << 10
	}
	if c.WriteBehindWindow == 0 {
		c.WriteBehindWindow = handle.DefaultWindow
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) handle.Timer { return time.AfterFunc(d, f) }
	}
	if c.Catalog == nil {
		c.Catalog = event.NewCatalog()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("%w: jetstream: %d replicas (1..5)", store.ErrInvalidArgument, c.Replicas)
	case c.LeaseTTL != 0 && c.LeaseTTL < time.Second:
		return c, fmt.Errorf("%w: jetstream: lease TTL %v under 1s", store.ErrInvalidArgument, c.LeaseTTL)
	case strings.ContainsAny(c.Prefix, " *>") || strings.HasSuffix(c.Prefix, "."):
		return c, fmt.Errorf("%w: jetstream: subject prefix %q", store.ErrInvalidArgument, c.Prefix)
	}
	return c, nil
}

// Store is the store contract over a JetStream stream. It is safe for
// concurrent use.
type Store struct {
	nc       *nats.Conn
	js       natsjs.JetStream
	stream   natsjs.Stream
	leases   natsjs.KeyValue
	opts     Options
	instance string       // this instance: leases name it
	machine  string       // os.Hostname(): leases name it
	hostLock vfs.FileLock // held while open if Options.Host was set (see lockHost)
	epoch    time.Time    // when it opened (Store.now)
	enc      segment.Encoder
	owners   handle.Owners
	commit   *committer // the group commit of session publishes
	perms    *permHub   // the connection's permission violations (perms.go)
	watch    watcher    // wakes Waits (watch.go)

	createMu sync.Mutex // serializes Create (existence check, then lease)

	mu       sync.Mutex
	sessions map[string]*session
	handles  map[*Handle]struct{}
	closed   bool

	// Tests: directHook, if set, returns the last stream sequence the
	// replica answering a direct get holds (0: all), as if it were behind
	// the leader.
	directHook atomic.Pointer[func(subj string, from uint64) uint64]
	// directOff: until when (unix ns) reads use the leader's gets alone
	// (directQuiet). Tests: directDrop makes every direct get go
	// unanswered (directDropped counts them).
	directOff     atomic.Int64
	directDrop    atomic.Bool
	directDropped atomic.Int64
	// Tests: getHook, if set, runs before each of the leader's gets; an
	// error it returns is the get's (as if the leader answered it).
	getHook atomic.Pointer[func() error]
	recent  recentMsgs // what loads read lately, for the reads that follow
	replies replyMux   // the answers of direct gets

	// The host lease (see lease.go): live is the current one, liveMu
	// serializes making a new one; leaseStream is the lease bucket's
	// stream.
	live        atomic.Pointer[liveness]
	liveMu      sync.Mutex
	leaseStream natsjs.Stream

	failPublish atomic.Bool // tests: every publish fails
	// Tests: publishHook, if set, makes the publishes of session messages
	// in place of the stream (a publish whose outcome comes late);
	// afterOpenLoad, if set, runs in a write open (and a Delete) once the
	// lease is taken and the subject reread; afterTombstone, if set, runs
	// in a Delete once its tombstone is stored, and an error it returns
	// ends the Delete there, with nothing after it done (a host killed
	// then).
	publishHook    atomic.Pointer[publishFunc]
	afterOpenLoad  atomic.Pointer[func()]
	afterTombstone atomic.Pointer[func() error]
	// Tests: createLooked, if set, runs in a Create after its first look
	// at the subject, before it takes the leases.
	createLooked atomic.Pointer[func()]
	noRenew      atomic.Bool // tests: a stalled host
	// Tests: renewHook, if set, renews the host lease in place of update
	// (the renewal's request).
	renewHook atomic.Pointer[func(update func() (uint64, error)) (uint64, error)]
	stop      chan struct{}
	wg        sync.WaitGroup
}

// session is this instance's view of one session. Guarded by Store.mu;
// frames are only appended to, so a copy of the slice header is a stable
// snapshot.
type session struct {
	id, subj  string
	hdr       store.Header
	uid       uint64
	inherited uint64
	pending   bool // created here; the header is not published yet
	erased    bool // a pending session closed without a write
	frames    []frameRef
	lastSubj  uint64 // stream sequence of the newest message known on the subject
	framed    uint64 // events in published frames
	size      int64  // bytes of published messages
	open      []event.Event
	openBytes int
	owner     *Handle
	checked   uint64 // events a write open of this instance verified
	// turnFrom: the seq, plus one, of a turn/start or turn/end of the
	// log, where a fold of its open turn may start (0: from seq 0); kept
	// in memory by this instance (see turn.go)
	turnFrom uint64
	failed   error // a publish with an unknown outcome: nothing more is acked
	// What the session is listed by (Snapshot.Title, UpdatedAt), as of
	// its first metaAt events: a publish of this instance brings it past
	// its batch (noteBatch); Stat reads the batches after it
	// (refreshMeta).
	title     string
	updatedAt int64
	metaAt    uint64
}

type frameRef struct {
	first     uint64
	count     uint32
	seq       uint64 // stream sequence
	header    bool   // the header record
	fence     bool   // a write open's fence (no events)
	tombstone bool   // a Delete's tombstone: the messages before it are purged
}

func (s *session) next() uint64 { return s.framed + uint64(len(s.open)) }

// Open opens the store over the JetStream of nc: it binds to the stream
// and the lease bucket the options name, which must exist (else
// ErrNotProvisioned) unless Options.Create is set, and checks their
// settings (a *ConfigError lists those that differ from what the store
// needs); it never changes them. The connection stays the caller's: Close
// does not close it.
func Open(ctx context.Context, nc *nats.Conn, opts *Options) (*Store, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// The timeout drops an asynchronous publish's pending acknowledgement
	// that never comes (its caller stopped waiting at the same time).
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncTimeout(o.Timeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := withTimeout(ctx, 4*o.Timeout)
	defer cancel()
	perms := hubOf(nc)
	ctx, unwatch := perms.watchPerms(ctx, natsjs.DefaultAPIPrefix+"STREAM.", natsjs.DefaultAPIPrefix+"INFO")
	defer unwatch()
	named := &Store{opts: o} // (names the permissions of a refusal)
	refused := func(err error) error { return refusedOn(nc, ctx, err, named.permissionOf) }
	stream, err := bindStream(ctx, js, &o)
	if err != nil {
		return nil, refused(err)
	}
	kv, bucket, err := bindLeases(ctx, js, &o)
	if err != nil {
		return nil, refused(err)
	}
	o.LeaseTTL = bucket.Config.MaxAge
	leaseStream, err := js.Stream(ctx, bucket.Config.Name)
	if err != nil {
		return nil, fmt.Errorf("jetstream: lease bucket %s: %w", o.LeaseBucket, refused(err))
	}
	machine, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("jetstream: host name: %w", err)
	}
	var hostLock vfs.FileLock
	if opts != nil && opts.Host != "" {
		if hostLock, err = lockHost(&o, bucket); err != nil {
			return nil, err
		}
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		if hostLock != nil {
			hostLock.Close()
		}
		return nil, err
	}
	s := &Store{
		nc: nc, js: js, stream: stream, leases: kv, leaseStream: leaseStream, opts: o,
		machine: machine, hostLock: hostLock,
		instance: hex.EncodeToString(nonce[:]),
		epoch:    time.Now(),
		sessions: map[string]*session{},
		handles:  map[*Handle]struct{}{},
		stop:     make(chan struct{}),
		replies:  replyMux{nc: nc},
		perms:    perms,
		commit:   newCommitter(nc, js, stream.CachedInfo().Config),
	}
	s.watch.st = s
	s.wg.Add(1)
	go s.renewLoop()
	return s, nil
}

// withTimeout bounds ctx by d from now: the caller's deadline, if
// sooner, still holds, but a later one does not lift the bound (a request
// sent to a server that died before it answered would wait for it all
// along).
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func (st *Store) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, st.opts.Timeout)
}

// token is the subject token and lease key of a session id.
func token(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func (st *Store) subject(id string) string { return st.opts.Prefix + ".s." + token(id) }

func (st *Store) idOf(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, st.opts.Prefix+".s.")
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	return string(b), err == nil
}

func sessionErr(id, op string, err error) error {
	return &store.SessionError{ID: id, Op: op, Err: err}
}

func (st *Store) corrupt(subject string, seq uint64, reason string) error {
	return &store.CorruptionError{Path: fmt.Sprintf("nats:%s/%s#%d", st.opts.Stream, subject, seq), Reason: reason}
}

// Create makes a new session and returns a write handle on it: the rules
// of engine.DB.Create. The session exists in this instance at once and in
// the stream from its first flush (or the first batch published); closed
// without either, it vanishes. An id that exists in the stream, or that
// another instance is creating, is store.ErrSessionExists.
func (st *Store) Create(ctx context.Context, h store.Header, opts ...store.CreateOption) (*Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, inherited, err := store.PrepareHeader(h, opts...)
	if err != nil {
		return nil, err
	}
	if h.Version != store.FormatVersion {
		return nil, fmt.Errorf("%w: session %q: version %d; this backend stores only version %d", store.ErrInvalidHeader, h.ID, h.Version, store.FormatVersion)
	}
	st.createMu.Lock()
	defer st.createMu.Unlock()
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, store.ErrClosed
	}
	if s := st.sessions[h.ID]; s != nil && !s.erased && (s.pending || s.owner != nil) {
		st.mu.Unlock()
		return nil, sessionErr(h.ID, "create", store.ErrSessionExists)
	}
	st.mu.Unlock()
	// (A view of a session no handle here holds may be stale: the
	// subject says whether it exists.)
	subj := st.subject(h.ID)
	after, err := st.freeSubject(ctx, subj)
	if err != nil {
		return nil, sessionErr(h.ID, "create", err)
	}
	if f := st.createLooked.Load(); f != nil {
		(*f)()
	}
	local, err := st.owners.Acquire(h.ID)
	if err != nil {
		return nil, sessionErr(h.ID, "create", store.ErrSessionExists)
	}
	remote, err := st.acquireLease(ctx, h.ID)
	if err != nil {
		local.Release()
		if errors.Is(err, store.ErrAlreadyOwned) {
			err = store.ErrSessionExists // another instance is creating it
		}
		return nil, sessionErr(h.ID, "create", err)
	}
	// Created, written and released by another host since the check
	// above? Then it exists (ErrSessionExists). If the subject is free
	// under the lease, the header expects what ends it now: the same
	// tombstone, another (created and deleted again meanwhile), or none
	// (a janitor purged the tombstone, PurgeTombstones).
	after, err = st.freeSubject(ctx, subj)
	if err != nil {
		local.Release()
		st.releaseLease(remote)
		return nil, sessionErr(h.ID, "create", err)
	}
	writer, err := newWriter()
	if err != nil {
		local.Release()
		st.releaseLease(remote)
		return nil, sessionErr(h.ID, "create", err)
	}
	s := &session{id: h.ID, subj: subj, hdr: h, uid: store.NewIncarnation(), inherited: inherited, pending: true, lastSubj: after}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		local.Release()
		go st.releaseLease(remote) // not under st.mu: it makes a request
		return nil, store.ErrClosed
	}
	st.sessions[h.ID] = s
	hd := st.newHandle(s, store.Write, local, remote, writer)
	s.owner = hd
	return hd, nil
}

// load returns this instance's view of session id, brought up to date
// with the stream (its frames are indexed up to the newest message). A
// session being written through this instance is not re-read.
func (st *Store) load(ctx context.Context, id, op string) (*session, error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, store.ErrClosed
	}
	s := st.sessions[id]
	if s != nil && (s.pending || s.owner != nil || s.erased) {
		st.mu.Unlock()
		if s.erased {
			return nil, sessionErr(id, op, store.ErrSessionNotFound)
		}
		return s, nil
	}
	var from uint64
	if s != nil {
		from = s.lastSubj
	}
	st.mu.Unlock()
	subj := st.subject(id)
	// Without a view, the subject is read from its start: a direct batch
	// of it goes out with the request for its last message, so that a
	// short session takes one round trip.
	var early []*natsjs.RawStreamMsg
	var earlyErr error
	var wg sync.WaitGroup
	if s == nil && st.directOK() {
		wg.Go(func() {
			_, earlyErr = st.directBatch(ctx, subj, 1, maxBatch, func(m *natsjs.RawStreamMsg) (bool, error) {
				early = append(early, m)
				return true, nil
			})
		})
	}
	last, err := st.lastMsg(ctx, subj)
	wg.Wait()
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, sessionErr(id, op, store.ErrSessionNotFound)
	}
	if err != nil {
		return nil, sessionErr(id, op, err)
	}
	if last.Sequence == from {
		return s, nil
	}
	// Index the messages after what this instance knows, read in batches
	// (scan). A tombstone ends what came before it (a Delete's rollup
	// purged it), and so does the header of another incarnation: the view
	// starts again (reset) from the message after it.
	var add []frameRef
	var hdr *store.HeaderRecord
	var size int64
	reset := false
	newest := last.Sequence // (a message past it if the subject moved on meanwhile)
	var bad error           // a message that does not index
	index := func(m *natsjs.RawStreamMsg) (bool, error) {
		ref, rec, err := st.index(subj, m)
		if err != nil {
			bad = err
			return false, err
		}
		newest = max(newest, m.Sequence)
		if ref.tombstone {
			add, hdr, size, reset = nil, nil, 0, true
			return true, nil
		}
		if rec != nil {
			if s != nil && !reset && rec.UID != s.uid {
				add, size, reset = nil, 0, true // recreated after an operator's purge
			}
			hdr = rec
		}
		add = append(add, ref)
		size += int64(len(m.Data))
		if ref.count > 0 {
			st.recent.put(m) // (for the read that follows)
		}
		return true, nil
	}
	next := from + 1
	if earlyErr != nil {
		st.directUnanswered(ctx, earlyErr) // (scan asks again, or the leader)
	}
	if s == nil && earlyErr == nil { // (else scan asks again)
		for _, m := range early {
			if _, err := index(m); err != nil {
				return nil, err
			}
			next = m.Sequence + 1
		}
	}
	if next <= last.Sequence {
		err = st.scan(ctx, subj, next, last.Sequence, index)
	}
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, sessionErr(id, op, err)
	}
	st.mu.Lock()
	if cur := st.sessions[id]; cur != s || (s != nil && s.lastSubj != from) {
		// Raced with another load, a writer, or a view dropped after a
		// failed publish: start again from what is there now.
		st.mu.Unlock()
		return st.load(ctx, id, op)
	}
	defer st.mu.Unlock()
	if reset {
		// This view was of an incarnation that is gone: its handles
		// find another session (or none) under the id.
		delete(st.sessions, id)
		s = nil
		if len(add) == 0 {
			return nil, sessionErr(id, op, store.ErrSessionNotFound)
		}
	}
	if s == nil {
		if len(add) == 0 || hdr == nil || !add[0].header {
			return nil, st.corrupt(subj, add[0].seq, "the first message of a session is not its header")
		}
		s = &session{id: id, subj: subj, hdr: hdr.Header, uid: hdr.UID, inherited: hdr.Inherited}
		st.sessions[id] = s
	} else if hdr != nil {
		return nil, st.corrupt(subj, newest, "a second header for the session")
	}
	for _, ref := range add {
		if ref.header || ref.fence {
			continue
		}
		if ref.first != s.framed {
			return nil, st.corrupt(subj, ref.seq, fmt.Sprintf("batch starts at seq %d, expected %d", ref.first, s.framed))
		}
		s.frames = append(s.frames, ref)
		s.framed += uint64(ref.count)
	}
	s.size += size
	s.lastSubj = newest
	return s, nil
}

// Message headers: a batch's first seq and count, so that a session is
// indexed without decoding its batches; a fence's writer.
const (
	hdrFirst = "Seglog-First"
	hdrCount = "Seglog-Count"
	hdrFence = "Seglog-Fence"
)

// newWriter returns a random name for a write open: 16 hex digits.
func newWriter() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("jetstream: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// fence is a write open's fence: it reads the session's subject again
// (the lease is held: no other writer may start a publish now) and
// publishes a fence message, empty but for the header Seglog-Fence naming
// the writer, expecting the last message it read. A publish that an
// earlier writer started before it lost the session expects an older
// message, so once the fence is stored, none can land (it is refused); if
// one landed after the read, the fence is refused, and the subject is
// read again and fenced again, a few times. It returns the session as
// read, up to and with its fence.
func (st *Store) fence(ctx context.Context, id, writer string) (*session, error) {
	s, ack, expect, err := st.publishAfterRead(ctx, id, "open", func(s *session) (*nats.Msg, string, error) {
		msg := nats.NewMsg(s.subj)
		msg.Header.Set(hdrFence, writer)
		return msg, writer + ":f", nil
	})
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	if s.lastSubj == expect { // (else a load read up to the fence)
		s.lastSubj = ack.Sequence
	}
	st.mu.Unlock()
	return s, nil
}

// publishAfterRead is a fence's and a tombstone's publish, made under the
// session's lease: it reads the subject, publishes the message msg makes
// of the session as read (and its id) expecting the last message read,
// and if another message landed in between (a publish an earlier writer
// started), reads and publishes again, up to fenceAttempts times. It
// returns the session as read, the acknowledgement, and the stream
// sequence the publish expected.
func (st *Store) publishAfterRead(ctx context.Context, id, op string, msg func(s *session) (*nats.Msg, string, error)) (*session, *natsjs.PubAck, uint64, error) {
	what := map[string]string{"open": "fencing the session", "delete": "publishing the tombstone"}[op]
	for attempt := 1; ; attempt++ {
		s, err := st.load(ctx, id, op)
		if err != nil {
			return nil, nil, 0, err
		}
		if f := st.afterOpenLoad.Load(); f != nil {
			(*f)()
		}
		st.mu.Lock()
		expect := s.lastSubj
		st.mu.Unlock()
		m, msgID, err := msg(s)
		if err != nil {
			return nil, nil, 0, sessionErr(id, op, err)
		}
		ack, err := st.publishMsg(ctx, m, msgID, expect)
		if err == nil {
			return s, ack, expect, nil
		}
		if !errors.Is(err, store.ErrOwnershipLost) || attempt == fenceAttempts {
			return nil, nil, 0, sessionErr(id, op, fmt.Errorf("%s: %w", what, err))
		}
		st.opts.Logger.Warn("jetstream: a message landed on the session since it was read under the lease; reading it again", "session", id, "op", op, "error", err)
	}
}

// fenceAttempts bounds a write open's reads and fences of the subject.
const fenceAttempts = 4

// index reads the index headers of one message (decoding it whole only if
// it is the session's header record).
func (st *Store) index(subj string, m *natsjs.RawStreamMsg) (frameRef, *store.HeaderRecord, error) {
	if m.Header.Get(hdrFence) != "" {
		if len(m.Data) != 0 || m.Header.Get(hdrCount) != "" {
			return frameRef{}, nil, st.corrupt(subj, m.Sequence, "a fence message that holds data")
		}
		return frameRef{seq: m.Sequence, fence: true}, nil, nil
	}
	if m.Header.Get(hdrCount) == "" {
		f, err := segment.UnmarshalFrame(fmt.Sprintf("nats:%s/%s#%d", st.opts.Stream, subj, m.Sequence), m.Data)
		if err != nil {
			return frameRef{}, nil, err
		}
		if f.Kind == segment.KindDelete {
			if id, _ := st.idOf(subj); f.Session != id {
				return frameRef{}, nil, st.corrupt(subj, m.Sequence, fmt.Sprintf("a tombstone of session %q on the subject of %q", f.Session, id))
			}
			return frameRef{seq: m.Sequence, tombstone: true}, nil, nil
		}
		if f.Kind != segment.KindHeader {
			return frameRef{}, nil, st.corrupt(subj, m.Sequence, "a message without index headers that is not a header record or a tombstone")
		}
		rec, err := store.UnmarshalHeaderRecord(f.Payload)
		if err != nil {
			return frameRef{}, nil, st.corrupt(subj, m.Sequence, err.Error())
		}
		return frameRef{seq: m.Sequence, header: true}, &rec, nil
	}
	first, err1 := strconv.ParseUint(m.Header.Get(hdrFirst), 10, 64)
	count, err2 := strconv.ParseUint(m.Header.Get(hdrCount), 10, 32)
	if err1 != nil || err2 != nil || count == 0 {
		return frameRef{}, nil, st.corrupt(subj, m.Sequence, "bad index headers")
	}
	return frameRef{first: first, count: uint32(count), seq: m.Sequence}, nil, nil
}

// Open returns a handle on an existing session; see engine.DB.Open. A
// write open takes the session's leases (store.ErrAlreadyOwned if this or
// another instance holds them) and checks the stored log (event catalog,
// seed marker).
func (st *Store) Open(ctx context.Context, id string, access store.Access) (*Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := st.load(ctx, id, "open")
	if err != nil {
		return nil, err
	}
	if access != store.Write {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.closed {
			return nil, store.ErrClosed
		}
		return st.newHandle(s, store.Read, nil, nil, ""), nil
	}
	local, err := st.owners.Acquire(id)
	if err != nil {
		return nil, sessionErr(id, "open", store.ErrAlreadyOwned)
	}
	remote, err := st.acquireLease(ctx, id)
	if err != nil {
		local.Release()
		return nil, sessionErr(id, "open", err)
	}
	// Another writer may have published before the lease changed hands,
	// and a publish of one may still land: read the subject again and
	// fence it.
	writer, err := newWriter()
	if err == nil {
		s, err = st.fence(ctx, id, writer)
	}
	if err != nil {
		local.Release()
		st.releaseLease(remote)
		return nil, err
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		local.Release()
		st.releaseLease(remote)
		return nil, store.ErrClosed
	}
	h := st.newHandle(s, store.Write, local, remote, writer)
	s.owner = h
	s.failed = nil // a new owner starts from what the stream holds
	st.mu.Unlock()
	if err := h.checkLog(ctx); err != nil {
		h.abandon()
		return nil, err
	}
	return h, nil
}

// ListPage is List filtered and paged; see engine.DB.ListPage.
func (st *Store) ListPage(ctx context.Context, opts store.ListOptions) ([]store.Snapshot, string, error) {
	if err := opts.Check(); err != nil {
		return nil, "", err
	}
	all, err := st.List(ctx)
	if err != nil {
		return nil, "", err
	}
	return store.Page(all, opts)
}

// Fork creates session h.ID as a fork of session parent at n events (see
// engine.DB.Fork). JetStream messages cannot be shared between subjects:
// the parent's first n events are copied into the child's subject
// (store.CopyFork), one read and one write of them. A fork that fails
// after creating the child may leave part of the copy, which reads refuse
// (its seed marker is missing) until the host deletes it. MarkerTime
// stamps the marker with a given time (default: now).
func (st *Store) Fork(ctx context.Context, parent string, n uint64, h store.Header, opts ...store.ForkOption) (*Handle, error) {
	return store.CopyFork[*Handle](ctx, st, parent, n, h, nil, opts...)
}

// Stat describes a session; see engine.DB.Stat. The revision is the
// incarnation and the event count, so it is the same in every instance.
func (st *Store) Stat(ctx context.Context, id string) (store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return store.Snapshot{}, err
	}
	s, err := st.load(ctx, id, "stat")
	if err != nil {
		return store.Snapshot{}, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return store.Snapshot{}, store.ErrClosed
	}
	if s.erased {
		return store.Snapshot{}, sessionErr(id, "stat", store.ErrSessionNotFound)
	}
	if s.metaAt < s.framed {
		st.mu.Unlock()
		err := st.refreshMeta(ctx, s)
		st.mu.Lock()
		switch {
		case err == nil:
		case errors.Is(err, store.ErrCorrupt):
			// Listed with what is known; a read reports the damage.
			st.opts.Logger.Warn("jetstream: the title and update time of a damaged session are not read", "session", id, "error", err)
		default:
			return store.Snapshot{}, sessionErr(id, "stat", err)
		}
	}
	return s.snapshot(), nil
}

func (s *session) snapshot() store.Snapshot {
	snap := store.Snapshot{
		Header:              s.hdr,
		Revision:            store.Revision(s.uid, s.next()),
		EventCount:          s.next(),
		SizeBytes:           s.size,
		InheritedEventCount: s.inherited,
		Title:               s.title,
		UpdatedAt:           s.updatedAt,
	}
	if s.metaAt == 0 {
		snap.UpdatedAt = s.hdr.CreatedAt
	}
	return snap
}

// noteBatch brings s's listing past a batch of evs just published, if it
// was up to date before it. Called with st.mu held.
func (s *session) noteBatch(first uint64, evs []event.Event) {
	if s.metaAt != first || len(evs) == 0 {
		return // behind: refreshMeta catches up
	}
	if t, ok := store.LastTitle(evs); ok {
		s.title = t
	}
	s.updatedAt = evs[len(evs)-1].Time
	s.metaAt = first + uint64(len(evs))
}

// refreshMeta brings s's listing up to its published batches, reading
// those after it from the last one back: the last for the update time,
// back to the latest session/title for the title.
func (st *Store) refreshMeta(ctx context.Context, s *session) error {
	st.mu.Lock()
	refs, framed, from, title := s.frames, s.framed, s.metaAt, s.title
	st.mu.Unlock()
	if from >= framed {
		return nil
	}
	var updatedAt int64
	for i := len(refs) - 1; i >= 0; i-- {
		ref := refs[i]
		if ref.first+uint64(ref.count) <= from {
			break
		}
		evs, err := st.fetch(ctx, s.subj, s.id, ref)
		if err != nil {
			return err
		}
		if i == len(refs)-1 {
			updatedAt = evs[len(evs)-1].Time
		}
		if ref.first < from {
			evs = evs[from-ref.first:]
		}
		if t, ok := store.LastTitle(evs); ok {
			title = t
			break
		}
	}
	st.mu.Lock()
	if s.metaAt < framed { // (else a publish or another refresh got further)
		s.title, s.updatedAt, s.metaAt = title, updatedAt, framed
	}
	st.mu.Unlock()
	return nil
}

// List describes every session: those in the stream and those created
// here and not yet published, in id order.
func (st *Store) List(ctx context.Context) ([]store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rctx, cancel := st.req(ctx, natsjs.DefaultAPIPrefix+"STREAM.INFO."+st.opts.Stream)
	info, err := st.stream.Info(rctx, natsjs.WithSubjectFilter(st.opts.Prefix+".s.*"))
	err = st.refused(rctx, err)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("jetstream: list: %w", err)
	}
	ids := map[string]bool{}
	for subj := range info.State.Subjects {
		if id, ok := st.idOf(subj); ok {
			ids[id] = true
		}
	}
	st.mu.Lock()
	for id, s := range st.sessions {
		if s.pending && !s.erased {
			ids[id] = true
		}
	}
	st.mu.Unlock()
	var out []store.Snapshot
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range ids {
			if !yield(id) {
				return
			}
		}
	}) {
		snap, err := st.Stat(ctx, id)
		if errors.Is(err, store.ErrSessionNotFound) {
			continue // erased meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// Flush makes every write handle's appended events durable (drains the
// write-behind buffers and waits for every publish's acknowledgement),
// including the headers of sessions created here and not yet published.
func (st *Store) Flush(ctx context.Context) error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return store.ErrClosed
	}
	hs := st.writeHandles()
	st.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.Flush(ctx); err != nil && !errors.Is(err, store.ErrHandleClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (st *Store) writeHandles() []*Handle {
	var hs []*Handle
	for h := range st.handles {
		if h.Access() == store.Write {
			hs = append(hs, h)
		}
	}
	return hs
}

// Close flushes every write handle, ends their ownership (their later
// writes fail with store.ErrOwnershipLost), releases the leases and stops
// the store. It is idempotent; the NATS connection stays open.
func (st *Store) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	hs := st.writeHandles()
	st.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if err := h.Flush(context.Background()); err != nil && !errors.Is(err, store.ErrHandleClosed) {
			errs = append(errs, err)
		}
		h.front.CloseBuffer()
	}
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.owners.RevokeAll()
	for _, h := range hs {
		h.mu.Lock()
		remote := h.remote
		h.remote = nil
		h.mu.Unlock()
		if remote != nil {
			st.releaseLease(remote)
		}
	}
	close(st.stop)
	st.replies.close()
	st.watch.close()
	st.wg.Wait()
	st.releaseHost()
	st.unlockHost()
	return errors.Join(errs...)
}

// unlockHost releases the host's lock file, if held.
func (st *Store) unlockHost() {
	if st.hostLock != nil {
		st.hostLock.Close()
	}
}

// abandon stops the store as a crash of its process would: nothing is
// flushed or released (tests; a new instance under the same Host takes
// the leases over).
func (st *Store) abandon() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	st.mu.Unlock()
	st.owners.RevokeAll()
	close(st.stop)
	st.replies.close()
	st.watch.close()
	st.wg.Wait()
	st.unlockHost() // as the process's death would
}

// failWrites makes every publish fail (or work again), as a broken
// connection would (tests).
func (st *Store) failWrites(on bool) { st.failPublish.Store(on) }

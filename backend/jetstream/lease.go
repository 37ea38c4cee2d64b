package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/internal/vfs"
)

// lease is a write lease in the lease bucket: the key is the session's
// token, the value names the host and the store instance, and the
// revision fences it (renewal and release act only at the revision this
// holder last wrote).
type lease struct {
	id  string
	key string
	rev atomic.Uint64
	// lost is set when a renewal found the entry changed or gone: another
	// writer may hold the session, and this one must not write.
	lost atomic.Bool
	// until is when the lease may have expired, as Store.now: the start
	// of the last request that wrote the entry (acquisition or renewal),
	// plus the TTL, less leaseMargin. Past it, the handle does not write
	// until a renewal succeeds (one that finds the entry gone loses it).
	until atomic.Int64
}

// leaseMargin is the part of the lease TTL that a holder gives up, for
// the clocks of this host and the servers running at different rates.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// now is the time since the store opened, on the monotonic clock.
func (st *Store) now() time.Duration { return time.Since(st.epoch) }

// wrote records that a request started at sent wrote the lease's entry.
func (st *Store) wrote(l *lease, rev uint64, sent time.Duration) {
	l.rev.Store(rev)
	until := int64(sent + st.opts.LeaseTTL - leaseMargin(st.opts.LeaseTTL))
	for {
		old := l.until.Load()
		if old >= until || l.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// check returns nil while the lease may be written under: not lost, and
// not past its time.
func (st *Store) check(l *lease) error {
	switch {
	case l == nil:
		return engine.ErrOwnershipLost
	case l.lost.Load():
		return fmt.Errorf("%w: the write lease was lost (expired or taken)", engine.ErrOwnershipLost)
	case int64(st.now()) >= l.until.Load():
		return fmt.Errorf("%w: the write lease may have expired (not renewed for %v)", engine.ErrOwnershipLost, st.opts.LeaseTTL-leaseMargin(st.opts.LeaseTTL))
	}
	return nil
}

type leaseValue struct {
	Host     string `json:"host"`
	Instance string `json:"instance"`
	Machine  string `json:"machine,omitempty"`
}

func (st *Store) leaseValue() []byte {
	b, _ := json.Marshal(leaseValue{Host: st.opts.Host, Instance: st.instance, Machine: st.machine})
	return b
}

// lockHost takes the lock file of o.Host in o.LockDir for the lease
// bucket (its name and creation time tell it from another deployment's of
// the same name): while a store holds it, no other process on this
// machine has a store open under that Host, so the leases of an earlier
// store of that Host on this machine are a dead process's.
func lockHost(o *Options, bucket *natsjs.StreamInfo) (vfs.FileLock, error) {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%s", o.LeaseBucket, bucket.Created.UnixNano(), o.Host))
	path := filepath.Join(o.LockDir, "seglog-jetstream-"+hex.EncodeToString(sum[:8])+".lock")
	l, err := vfs.Default.Lock(path)
	if err != nil {
		return nil, fmt.Errorf("jetstream: host %q: another store on this machine (in this process or another) is open under this name: %w", o.Host, err)
	}
	return l, nil
}

// acquireLease takes the write lease of session id, or returns
// engine.ErrAlreadyOwned. A lease held by this host is taken over (see
// below); the caller holds the session's local lease.
func (st *Store) acquireLease(ctx context.Context, id string) (*lease, error) {
	ctx, cancel := st.rctx(ctx)
	defer cancel()
	l := &lease{id: id, key: token(id)}
	sent := st.now()
	rev, err := st.leases.Create(ctx, l.key, st.leaseValue())
	if err == nil {
		st.wrote(l, rev, sent)
		st.track(l)
		return l, nil
	}
	if !errors.Is(err, natsjs.ErrKeyExists) {
		return nil, fmt.Errorf("lease: %w", err)
	}
	e, err := st.leases.Get(ctx, l.key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, engine.ErrAlreadyOwned // it changed hands just now; let the caller retry
	}
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	// The entry may be taken over if it is this instance's own that a
	// release could not delete (the caller holds the local lease, so no
	// handle here has it), or an earlier store's of this Host on this
	// machine, which is dead: this store holds the Host's lock file.
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Host != st.opts.Host {
		return nil, engine.ErrAlreadyOwned
	}
	if v.Instance != st.instance && (st.hostLock == nil || v.Machine != st.machine) {
		if st.hostLock != nil {
			st.opts.Logger.Warn("jetstream: a write lease is held under this store's Host by another machine: a Host must be unique to one machine", "session", id, "machine", v.Machine)
		}
		return nil, engine.ErrAlreadyOwned
	}
	sent = st.now()
	rev, err = st.leases.Update(ctx, l.key, st.leaseValue(), e.Revision())
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		return nil, engine.ErrAlreadyOwned
	}
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if v.Instance != st.instance {
		st.opts.Logger.Warn("jetstream: took over the write lease of an earlier instance of this host", "session", id, "instance", v.Instance)
	}
	st.wrote(l, rev, sent)
	st.track(l)
	return l, nil
}

func (st *Store) track(l *lease) {
	st.heldMu.Lock()
	if st.held == nil {
		st.held = map[*lease]struct{}{}
	}
	st.held[l] = struct{}{}
	st.heldMu.Unlock()
}

// releaseLease deletes the lease entry if it is still this holder's.
func (st *Store) releaseLease(l *lease) {
	st.heldMu.Lock()
	delete(st.held, l)
	st.heldMu.Unlock()
	if l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	if err := st.leases.Delete(ctx, l.key, natsjs.LastRevision(l.rev.Load())); err != nil {
		st.opts.Logger.Warn("jetstream: releasing a write lease failed; it expires on its own", "session", l.id, "error", err)
	}
}

// stopRenewing stops the renewal loop, as a stalled host (tests).
func (st *Store) stopRenewing() { st.noRenew.Store(true) }

// renewNow renews every held lease at once (tests).
func (st *Store) renewNow() {
	st.noRenew.Store(false)
	st.renewAll()
}

// renewLoop renews every held lease each third of the lease TTL,
// renewParallel at a time. A lease
// whose entry changed (another holder) or vanished (expired) is lost.
func (st *Store) renewLoop() {
	defer st.wg.Done()
	t := time.NewTicker(st.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-t.C:
		}
		if !st.noRenew.Load() {
			st.renewAll()
		}
	}
}

func (st *Store) renewAll() {
	st.heldMu.Lock()
	ls := make([]*lease, 0, len(st.held))
	for l := range st.held {
		ls = append(ls, l)
	}
	st.heldMu.Unlock()
	// Each renewal is a replicated write: one at a time, a few thousand
	// leases would take longer than a TTL.
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, l := range ls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st.renew(l)
		})
	}
	wg.Wait()
}

// renewParallel is how many lease renewals are in flight at once.
const renewParallel = 32

func (st *Store) renew(l *lease) {
	if l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	sent := st.now()
	update := func() (uint64, error) { return st.leases.Update(ctx, l.key, st.leaseValue(), l.rev.Load()) }
	var rev uint64
	var err error
	if f := st.renewHook.Load(); f != nil {
		rev, err = (*f)(update)
	} else {
		rev, err = update()
	}
	switch {
	case err == nil:
		st.wrote(l, rev, sent)
	case errors.Is(err, natsjs.ErrKeyRevisionMismatch), errors.Is(err, natsjs.ErrKeyNotFound), errors.Is(err, natsjs.ErrKeyExists):
		l.lost.Store(true)
		st.opts.Logger.Warn("jetstream: a write lease was lost (expired or taken); the session's writes now fail", "session", l.id)
	default:
		// The server may be electing a leader: keep trying until the TTL
		// decides (the handle stops writing once the lease may have
		// expired: lease.until).
		st.opts.Logger.Warn("jetstream: renewing a write lease failed", "session", l.id, "error", err)
	}
}

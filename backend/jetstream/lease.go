package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// Write leases live in the lease bucket in two kinds of key:
//
//   - a host lease, h.<gen>: one per store (a new one, of a new random
//     gen, if the last one was lost), renewed every third of the TTL; the
//     bucket's TTL expires it once its store stops renewing it. Its value
//     names the host, the store instance and the machine, or, written by
//     another store that proved it had expired, says it is dead.
//   - a session's ownership record, the session's token: the host lease
//     it is held under (its gen), the host, instance and machine. It is
//     never renewed and never expires (Nats-TTL: never): the session is
//     owned while the host lease it names lives.
//
// A store takes over a session whose record names another host lease only
// once that host lease is proven dead: gone from the bucket (a write of
// the dead marker expecting it gone succeeds) or marked dead. A store
// never writes under a host lease past its validity (see liveness.until),
// which ends before the bucket can expire it.

// liveness is one host lease of this store: the key h.<gen>, renewed
// (an update at the revision last written) every third of the lease TTL.
type liveness struct {
	gen string
	key string
	rev atomic.Uint64
	// lost is set when a renewal found the key changed or gone: it
	// expired (this store stalled) and another store may have taken its
	// sessions; every session lease under it is lost for good.
	lost atomic.Bool
	// until is when the host lease may have expired, as Store.now: the
	// start of the last request that wrote its key (its creation or a
	// renewal), plus the TTL, less leaseMargin. Past it, no handle whose
	// session lease is held under it writes, until a renewal succeeds.
	until atomic.Int64
}

// lease is a session's write lease: its ownership record (key: the
// session's token), held under a host lease.
type lease struct {
	id   string
	key  string
	rev  atomic.Uint64 // the record's revision, for its release
	live *liveness
}

// leaseMargin is the part of the lease TTL that a holder gives up, for
// the clocks of this host and the servers running at different rates.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// now is the time since the store opened, on the monotonic clock.
func (st *Store) now() time.Duration { return time.Since(st.epoch) }

// wrote records that a request started at sent wrote the host lease's key.
func (st *Store) wrote(l *liveness, rev uint64, sent time.Duration) {
	l.rev.Store(rev)
	until := int64(sent + st.opts.LeaseTTL - leaseMargin(st.opts.LeaseTTL))
	for {
		old := l.until.Load()
		if old >= until || l.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// check returns nil while the lease may be written under: its host lease
// not lost, and not past its time.
func (st *Store) check(l *lease) error {
	switch {
	case l == nil:
		return store.ErrOwnershipLost
	case l.live.lost.Load():
		return fmt.Errorf("%w: the host's write lease was lost (it expired, and another host may have taken the session)", store.ErrOwnershipLost)
	case int64(st.now()) >= l.live.until.Load():
		return fmt.Errorf("%w: the host's write lease may have expired (not renewed for %v)", store.ErrOwnershipLost, st.opts.LeaseTTL-leaseMargin(st.opts.LeaseTTL))
	}
	return nil
}

// leaseValue is the value of a host lease and of an ownership record.
type leaseValue struct {
	Host     string `json:"host"`
	Instance string `json:"instance"`
	Machine  string `json:"machine,omitempty"`
	// Gen is the host lease a record is held under. A session lease of
	// an older build (one key per session, renewed, expiring with the
	// bucket's TTL) has none.
	Gen string `json:"gen,omitempty"`
	// Dead marks a host lease that another store proved expired.
	Dead bool `json:"dead,omitempty"`
}

func (st *Store) leaseValue(gen string) []byte {
	b, _ := json.Marshal(leaseValue{Host: st.opts.Host, Instance: st.instance, Machine: st.machine, Gen: gen})
	return b
}

func liveKey(gen string) string { return "h." + gen }

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

// errRevision is a write to the lease bucket refused because the key's
// last revision was not the one expected.
var errRevision = errors.New("jetstream: the lease entry changed")

// entry reads key's last message in the lease bucket: its value and
// revision, and whether it is a deletion (a released record, a host
// lease deleted at its store's Close, the marker of an expired key). It
// returns natsjs.ErrKeyNotFound if the key holds nothing.
func (st *Store) entry(ctx context.Context, key string) (val []byte, rev uint64, deleted bool, err error) {
	ctx, cancel := st.perms.watchPerms(ctx, natsjs.DefaultAPIPrefix+"DIRECT.GET.KV_"+st.opts.LeaseBucket+".", natsjs.DefaultAPIPrefix+"STREAM.MSG.GET.KV_"+st.opts.LeaseBucket)
	defer cancel()
	m, err := st.leaseStream.GetLastMsgForSubject(ctx, st.kvSubject(key))
	err = st.refused(ctx, err)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, 0, false, natsjs.ErrKeyNotFound
	}
	if err != nil {
		return nil, 0, false, err
	}
	op := m.Header.Get("KV-Operation")
	deleted = op == "DEL" || op == "PURGE" || m.Header.Get("Nats-Marker-Reason") != ""
	return m.Data, m.Sequence, deleted, nil
}

func (st *Store) kvSubject(key string) string { return "$KV." + st.opts.LeaseBucket + "." + key }

// put writes val to key expecting expect as its last revision (0: the key
// holds nothing), and returns the new revision; errRevision if the key
// changed. A record (never) is written never to expire: the bucket's TTL
// is for host leases.
func (st *Store) put(ctx context.Context, key string, val []byte, expect uint64, never bool) (uint64, error) {
	ctx, cancel := st.perms.watchPerms(ctx, st.kvSubject(key))
	defer cancel()
	for attempt := 1; ; attempt++ {
		m := nats.NewMsg(st.kvSubject(key))
		m.Data = val
		if never {
			m.Header.Set(natsjs.MsgTTLHeader, "never")
		}
		ack, err := st.js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(expect))
		err = st.refused(ctx, err)
		var apiErr *natsjs.APIError
		switch {
		case err == nil:
			return ack.Sequence, nil
		case !errors.As(err, &apiErr):
			return 0, err
		case apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant && attempt < inProcessAttempts:
			// The key's last write is still in process on a replicated
			// stream (error 10164): this one was refused unstored. Again.
			t := time.NewTimer(time.Millisecond << (attempt - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, fmt.Errorf("jetstream: %w (after %v)", ctx.Err(), err)
			case <-t.C:
			}
		case apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant:
			return 0, fmt.Errorf("%w: %v", errRevision, err)
		default:
			return 0, err
		}
	}
}

// hostLease returns the store's host lease, made if there is none or the
// last one was lost.
func (st *Store) hostLease(ctx context.Context) (*liveness, error) {
	if l := st.live.Load(); l != nil && !l.lost.Load() {
		return l, nil
	}
	st.liveMu.Lock()
	defer st.liveMu.Unlock()
	if l := st.live.Load(); l != nil && !l.lost.Load() {
		return l, nil
	}
	gen, err := newWriter()
	if err != nil {
		return nil, err
	}
	l := &liveness{gen: gen, key: liveKey(gen)}
	sent := st.now()
	rev, err := st.put(ctx, l.key, st.leaseValue(gen), 0, false)
	if err != nil {
		return nil, fmt.Errorf("lease: the host lease: %w", err)
	}
	st.wrote(l, rev, sent)
	st.live.Store(l)
	return l, nil
}

// acquireLease takes the write lease of session id, or returns
// store.ErrAlreadyOwned (a *store.OwnedError naming the holder's Host where
// its record says). The caller holds the session's local lease.
func (st *Store) acquireLease(ctx context.Context, id string) (*lease, error) {
	ctx, cancel := st.rctx(ctx)
	defer cancel()
	live, err := st.hostLease(ctx)
	if err != nil {
		return nil, err
	}
	l := &lease{id: id, key: token(id), live: live}
	// A host lease not renewed for its TTL (less the margin) may have
	// expired, though no renewal found it gone yet: a session taken under
	// it could not be written (every publish checks it), so none is.
	// The renewals decide: one that succeeds makes it valid again, one
	// that finds it gone makes a new one for the next take.
	if err := st.check(l); err != nil {
		return nil, err
	}
	val := st.leaseValue(live.gen)
	var expect uint64
	for attempt := 0; ; attempt++ {
		rev, err := st.put(ctx, l.key, val, expect, true)
		if err == nil {
			l.rev.Store(rev)
			return l, nil
		}
		if !errors.Is(err, errRevision) || attempt == 2 {
			if errors.Is(err, errRevision) {
				return nil, store.ErrAlreadyOwned // it keeps changing hands
			}
			return nil, fmt.Errorf("lease: %w", err)
		}
		cur, rev, deleted, err := st.entry(ctx, l.key)
		switch {
		case errors.Is(err, natsjs.ErrKeyNotFound):
			expect = 0 // (a released record's marker expired meanwhile)
			continue
		case err != nil:
			return nil, fmt.Errorf("lease: %w", err)
		case deleted:
			expect = rev // released: free
			continue
		}
		take, err := st.mayTake(ctx, id, cur)
		if err != nil {
			return nil, fmt.Errorf("lease: %w", err)
		}
		if !take {
			// Its holder, as the record names it (store.OwnedError: the
			// holding store's Host; nothing else is recorded).
			var v leaseValue
			json.Unmarshal(cur, &v)
			return nil, &store.OwnedError{Host: v.Host}
		}
		expect = rev
	}
}

// liveHolder names the writer that holds session id, nil if none does
// (or the records cannot be read): a write handle of this store, or the
// Host of an ownership record held under a host lease that is not gone or
// marked dead. It only reads: unlike mayTake, it proves nothing dead.
func (st *Store) liveHolder(ctx context.Context, id string) *store.OwnedError {
	if st.owners.Held(id) {
		return &store.OwnedError{Host: st.opts.Host}
	}
	ctx, cancel := st.rctx(ctx)
	defer cancel()
	b, _, deleted, err := st.entry(ctx, token(id))
	var v leaseValue
	if err != nil || deleted || json.Unmarshal(b, &v) != nil || v.Instance == st.instance {
		return nil // free, unknown, or this store's own record a release left (no handle here holds it)
	}
	if v.Gen != "" {
		hb, _, gone, err := st.entry(ctx, liveKey(v.Gen))
		var hv leaseValue
		if err != nil || gone || json.Unmarshal(hb, &hv) != nil || hv.Dead {
			return nil
		}
	}
	return &store.OwnedError{Host: v.Host}
}

// mayTake reports whether the session record v (another's, or this
// instance's that a release could not delete) may be taken over:
//
//   - this instance's own, under its live host lease (the caller holds
//     the local lease, so no handle here has the session);
//   - an earlier store's of this Host on this machine, which is dead:
//     this store holds the Host's lock file;
//   - one held under a host lease that is proven dead (hostDead).
//
// A session lease of an older build (no gen: it expires by itself) is
// taken over only in the first two cases, as that build did.
func (st *Store) mayTake(ctx context.Context, id string, b []byte) (bool, error) {
	var v leaseValue
	if json.Unmarshal(b, &v) != nil {
		return false, nil
	}
	live := st.live.Load()
	switch {
	case v.Instance == st.instance && live != nil && v.Gen == live.gen:
		return true, nil
	case v.Host == st.opts.Host && v.Instance != st.instance && st.hostLock != nil && v.Machine == st.machine:
		st.opts.Logger.Warn("jetstream: took over the write lease of an earlier instance of this host", "session", id, "instance", v.Instance)
		return true, nil
	case v.Gen == "":
		if v.Host == st.opts.Host && st.hostLock != nil && v.Machine != st.machine {
			st.opts.Logger.Warn("jetstream: a write lease is held under this store's Host by another machine: a Host must be unique to one machine", "session", id, "machine", v.Machine)
		}
		return false, nil
	}
	dead, err := st.hostDead(ctx, v.Gen)
	if err != nil || !dead {
		return false, err
	}
	st.opts.Logger.Warn("jetstream: took over the write lease of a host whose lease expired", "session", id, "host", v.Host, "instance", v.Instance)
	return true, nil
}

// hostDead reports whether host lease gen is dead: marked dead, or gone
// from the bucket, which a write of the dead marker expecting what this
// store read proves (a write to the bucket is decided by the stream's
// leader, in order; a read may come from a replica behind it). A host
// lease is never written again once gone: its store renews it only at
// the revision it last wrote, and stopped writing under it before the
// bucket could expire it.
func (st *Store) hostDead(ctx context.Context, gen string) (bool, error) {
	key := liveKey(gen)
	b, rev, deleted, err := st.entry(ctx, key)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		rev = 0
	case err != nil:
		return false, fmt.Errorf("lease: host lease %s: %w", gen, err)
	case !deleted:
		var v leaseValue
		return json.Unmarshal(b, &v) == nil && v.Dead, nil
	}
	dead, _ := json.Marshal(leaseValue{Host: st.opts.Host, Instance: st.instance, Machine: st.machine, Gen: gen, Dead: true})
	_, err = st.put(ctx, key, dead, rev, false)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errRevision):
		return false, nil // written meanwhile (marked dead by another, or a stale read): ask again later
	}
	return false, fmt.Errorf("lease: host lease %s: %w", gen, err)
}

// releaseLease deletes the session's record if it is still this holder's.
func (st *Store) releaseLease(l *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	if err := st.leases.Delete(ctx, l.key, natsjs.LastRevision(l.rev.Load())); err != nil {
		st.opts.Logger.Warn("jetstream: releasing a write lease failed; it ends with the host's lease", "session", l.id, "error", err)
	}
}

// releaseHost deletes the host lease at the store's Close, once its
// sessions' records are released: a record that could not be released is
// then free at once, not once the host lease expires.
func (st *Store) releaseHost() {
	l := st.live.Load()
	if l == nil || l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	if err := st.leases.Delete(ctx, l.key, natsjs.LastRevision(l.rev.Load())); err != nil {
		st.opts.Logger.Warn("jetstream: releasing the host's write lease failed; it expires on its own", "error", err)
	}
}

// stopRenewing stops the renewal loop, as a stalled host (tests).
func (st *Store) stopRenewing() { st.noRenew.Store(true) }

// renewNow renews the host lease at once (tests).
func (st *Store) renewNow() {
	st.noRenew.Store(false)
	st.renewAll()
}

// renewLoop renews the host lease each third of the lease TTL: one write
// however many sessions the store holds.
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

// renewAll renews the host lease, and with it every session lease held
// under it. A host lease whose key changed (marked dead by another store)
// or vanished (expired) is lost, and with it every session lease under
// it.
func (st *Store) renewAll() {
	l := st.live.Load()
	if l == nil || l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	sent := st.now()
	val := st.leaseValue(l.gen)
	update := func() (uint64, error) { return st.put(ctx, l.key, val, l.rev.Load(), false) }
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
	case errors.Is(err, errRevision):
		// A renewal whose response was lost may have written it: the
		// key then holds this store's value (no other store writes it
		// but to mark it dead). Go on from its revision; the validity
		// grows with the next renewal.
		b, rev, deleted, gerr := st.entry(ctx, l.key)
		switch {
		case gerr == nil && !deleted && string(b) == string(val):
			l.rev.Store(rev)
			st.opts.Logger.Warn("jetstream: a renewal of the host's write lease had landed unacknowledged", "revision", rev)
			return
		case gerr != nil && !errors.Is(gerr, natsjs.ErrKeyNotFound):
			st.opts.Logger.Warn("jetstream: renewing the host's write lease failed", "error", err, "reading it", gerr)
			return
		}
		l.lost.Store(true)
		st.opts.Logger.Warn("jetstream: the host's write lease was lost (it expired, and another host may have taken its sessions); the writes of every session held under it now fail", "gen", l.gen)
	default:
		// The server may be electing a leader: keep trying until the TTL
		// decides (handles stop writing once the lease may have expired:
		// liveness.until).
		st.opts.Logger.Warn("jetstream: renewing the host's write lease failed", "error", err)
	}
}

package handle

import (
	"errors"
	"sync"
)

// Errors returned by leases.
var (
	// ErrAlreadyOwned is returned by Owners.Acquire while another lease on
	// the key is live.
	ErrAlreadyOwned = errors.New("handle: already owned by an active write handle")
	// ErrOwnershipLost is returned by Lease.Check after the lease was
	// revoked (the store closed, or ownership was taken over).
	ErrOwnershipLost = errors.New("handle: write ownership lost")
	// ErrReleased is returned by Lease.Check after Release.
	ErrReleased = errors.New("handle: lease released")
)

// Owners grants at most one live Lease per key: single-writer ownership
// within a process. The zero value is ready to use; it is safe for
// concurrent use.
type Owners struct {
	mu     sync.Mutex
	leases map[string]*Lease
	gen    uint64
}

// Lease is one grant of ownership. A stale lease (released or revoked)
// can never become valid again: fencing, so a stale handle can never write.
type Lease struct {
	owners *Owners
	key    string
	gen    uint64

	mu    sync.Mutex
	state error // nil while live; ErrReleased or ErrOwnershipLost after
}

// Acquire grants a lease on key, or returns ErrAlreadyOwned.
func (o *Owners) Acquire(key string) (*Lease, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.leases == nil {
		o.leases = map[string]*Lease{}
	}
	if _, ok := o.leases[key]; ok {
		return nil, ErrAlreadyOwned
	}
	o.gen++
	l := &Lease{owners: o, key: key, gen: o.gen}
	o.leases[key] = l
	return l, nil
}

// Held reports whether key has a live lease.
func (o *Owners) Held(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.leases[key]
	return ok
}

// RevokeAll revokes every live lease; their holders get ErrOwnershipLost.
func (o *Owners) RevokeAll() {
	o.mu.Lock()
	ls := make([]*Lease, 0, len(o.leases))
	for _, l := range o.leases {
		ls = append(ls, l)
	}
	o.leases = nil
	o.mu.Unlock()
	for _, l := range ls {
		l.end(ErrOwnershipLost)
	}
}

// Generation returns the lease's fencing token: it increases with every
// grant by the same Owners.
func (l *Lease) Generation() uint64 { return l.gen }

// Check returns nil while the lease is live, ErrReleased after Release and
// ErrOwnershipLost after a revocation.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Release gives the key up. It is idempotent and never fails.
func (l *Lease) Release() {
	l.end(ErrReleased)
	l.owners.mu.Lock()
	if l.owners.leases[l.key] == l {
		delete(l.owners.leases, l.key)
	}
	l.owners.mu.Unlock()
}

func (l *Lease) end(state error) {
	l.mu.Lock()
	if l.state == nil {
		l.state = state
	}
	l.mu.Unlock()
}

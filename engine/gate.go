package engine

import (
	"fmt"
	"github.com/seglog/seglog/store"
	"sync/atomic"
)

// gate is what DB.Close waits for: every public operation of a DB and of
// its handles that touches the files, the index or the shared memory
// enters it first (DB.enter) and leaves it when done (DB.leave), and so
// does each write-out behind an Append. Close shuts it at its start (no
// operation enters afterwards: each fails with ErrClosed, writing nothing)
// and then waits until the operations in it have left, before it lists
// and flushes the write handles and closes anything.
//
// Entering never blocks, so an operation that calls others (Fork opens a
// read handle and reads through it, a write open reads the log) enters
// again without deadlock: the inner call either enters, or fails with
// ErrClosed once Close has begun, which fails the outer one. An operation
// that waits (Handle.Wait) is woken by Close (db.stop). So Close must not
// be called from inside an operation (from a Logger's handler, say): it
// would wait for itself.
//
// Cost: two atomic adds on one word per call, and no lock.
type gate struct {
	// n is twice the operations in the gate, plus 1 once it is shut.
	n atomic.Int64
	// idle gets a token when an operation leaves a shut gate empty; only
	// wait takes from it (a stale token costs it one more look).
	idle chan struct{}
}

func newGate() gate { return gate{idle: make(chan struct{}, 1)} }

// enter counts an operation in, unless the gate is shut: then it reports
// false and counts nothing.
func (g *gate) enter() bool {
	if g.n.Add(2)&1 != 0 {
		g.leave()
		return false
	}
	return true
}

// leave counts an operation out.
func (g *gate) leave() {
	if g.n.Add(-2) == 1 {
		select {
		case g.idle <- struct{}{}:
		default: // (a token waits already)
		}
	}
}

// shut makes every later enter fail.
func (g *gate) shut() { g.n.Or(1) }

// shutting reports whether the gate is shut.
func (g *gate) shutting() bool { return g.n.Load()&1 != 0 }

// wait waits until no operation is in the shut gate.
func (g *gate) wait() {
	for g.n.Load() != 1 {
		<-g.idle
	}
}

// enter counts a public operation in the DB's gate, or fails with
// ErrClosed once Close has begun. Each successful enter is paired with
// one leave.
func (db *DB) enter() error {
	if !db.gate.enter() {
		return store.ErrClosed
	}
	return nil
}

// leave ends an operation enter counted.
func (db *DB) leave() { db.gate.leave() }

// errClosedLease is what a write through a handle fails with once its
// DB's Close has begun: the DB is closed (ErrClosed), and with it the
// handle's lease (ErrOwnershipLost, as the contract has it for a write
// through a handle of a closed store).
var errClosedLease = fmt.Errorf("%w (%w)", store.ErrClosed, store.ErrOwnershipLost)

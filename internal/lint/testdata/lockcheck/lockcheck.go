// Package lockcheck is the lock checks' own test (locks_test.go,
// TestLockChecksFixture): each line that must be reported says so with a
// comment "want:" and a part of the message; every other line must not be.
package lockcheck

import (
	"errors"
	"sync"
)

type DB struct {
	mu struct {
		sync.Mutex
		poison error
	}
	idxMu    sync.Mutex
	layoutMu sync.RWMutex
	other    *DB
	later    func()
	hook     func(func())
}

// poisonWith takes mu.
func (db *DB) poisonWith(err error) {
	db.mu.Lock()
	db.poisonLocked(err)
	db.mu.Unlock()
}

// poisonLocked is poisonWith for a caller that holds db.mu.
func (db *DB) poisonLocked(err error) {
	if db.mu.poison == nil {
		db.mu.poison = err
	}
}

// keptLive is issue 35's bug.
func (db *DB) keptLive(bad bool) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if bad {
		err := errors.New("dropped")
		db.poisonWith(err) // want: keptLive calls (*lockcheck.DB).poisonWith holding lockcheck.DB.mu
		return err
	}
	return nil
}

// keptLiveFixed is its fix.
func (db *DB) keptLiveFixed(bad bool) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if bad {
		err := errors.New("dropped")
		db.poisonLocked(err)
		return err
	}
	return nil
}

// earlyExit releases before it returns early, and before the call.
func (db *DB) earlyExit(a, b bool) {
	db.mu.Lock()
	if a {
		db.mu.Unlock()
		db.poisonWith(nil)
		return
	}
	if b {
		db.mu.Unlock()
		return
	}
	db.mu.Unlock()
	db.poisonWith(nil)
}

// fallsThrough releases in one branch only: the other goes on holding.
func (db *DB) fallsThrough(a bool) {
	db.mu.Lock()
	if a {
		db.mu.Unlock()
	}
	db.poisonWith(nil) // want: calls (*lockcheck.DB).poisonWith holding lockcheck.DB.mu (Lock at
}

// releasesAround lets go of its caller's lock around the call.
// Called with db.mu held.
func (db *DB) releasesAround() {
	db.mu.Unlock()
	db.poisonWith(nil)
	db.mu.Lock()
}

// underDoc holds db.mu by its doc. Called with db.mu held.
func (db *DB) underDoc() {
	db.poisonWith(nil) // want: held by its caller
}

func (db *DB) callsReleasesAround() {
	db.mu.Lock()
	db.releasesAround() // held on: fine
	db.mu.Unlock()
}

// chain takes mu three calls down.
func (db *DB) chain() {
	db.idxMu.Lock()
	defer db.idxMu.Unlock()
	db.mu.Lock()
	db.mu.Unlock()
	db.step1() // want: step1 calls (*lockcheck.DB).step2 at lockcheck.go:
}

func (db *DB) step1() { db.step2() }
func (db *DB) step2() { db.idxMu.Lock(); db.idxMu.Unlock() }

// goes starts a goroutine: it does not hold the lock.
func (db *DB) goes() {
	db.mu.Lock()
	defer db.mu.Unlock()
	go db.poisonWith(nil)
	go func() { db.poisonWith(nil) }()
	f := func() { db.poisonWith(nil) }
	_ = f
}

// callsLiteral calls a literal at once, and one bound to a variable.
func (db *DB) callsLiteral() {
	db.mu.Lock()
	defer db.mu.Unlock()
	func() {
		db.poisonWith(nil) // want: callsLiteral calls (*lockcheck.DB).poisonWith
	}()
	f := func() {
		db.idxMu.Lock() // fine: idxMu
		db.idxMu.Unlock()
		db.poisonWith(nil) // want: callsLiteral calls (*lockcheck.DB).poisonWith
	}
	f()
}

// use calls fn under idxMu, as the engine's indexFile.use.
func (db *DB) use(fn func() error) error {
	db.idxMu.Lock()
	defer db.idxMu.Unlock()
	return fn()
}

func (db *DB) callback() error {
	return db.use(func() error {
		db.chain() // want: holding lockcheck.DB.idxMu (Lock at
		return nil
	})
}

// useVia passes fn on to use: fn runs under idxMu too.
func (db *DB) useVia(fn func() error) error { return db.use(fn) }

func (db *DB) callbackVia() error {
	return db.useVia(func() error {
		db.chain() // want: held by (*lockcheck.DB).useVia
		return nil
	})
}

// keep stores fn: it runs later, under nothing of keep's caller.
func (db *DB) keep(fn func()) { db.later = fn }

func (db *DB) stored() {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.keep(func() { db.poisonWith(nil) })
	db.hook(func() { db.poisonWith(nil) }) // a func value: not known to run now
}

// lockIt returns holding mu (the engine's lockOpen).
func (db *DB) lockIt() error {
	if db.other == nil {
		return errors.New("no")
	}
	db.mu.Lock()
	return nil
}

func (db *DB) afterHelper() {
	if err := db.lockIt(); err != nil {
		return
	}
	defer db.mu.Unlock()
	db.poisonWith(nil) // want: which returns holding it
}

// loops: a round that takes and releases; one that continues holding.
func (db *DB) loops(n int) {
	for i := 0; i < n; i++ {
		db.mu.Lock()
		db.mu.Unlock()
		db.poisonWith(nil)
	}
	for i := range n {
		db.mu.Lock() // want: Lock of lockcheck.DB.mu, which it already holds
		if i%2 == 0 {
			continue
		}
		db.mu.Unlock()
	}
}

// labeled breaks out of two loops holding the lock.
func (db *DB) labeled(n int) {
outer:
	for range n {
		for range n {
			db.mu.Lock()
			if n > 3 {
				break outer
			}
			db.mu.Unlock()
		}
	}
	db.poisonWith(nil) // want: calls (*lockcheck.DB).poisonWith holding lockcheck.DB.mu
}

// switches releases in every case but one.
func (db *DB) switches(n int) {
	db.mu.Lock()
	switch n {
	case 1:
		db.mu.Unlock()
	case 2:
		db.mu.Unlock()
		return
	default:
		db.mu.Unlock()
	}
	db.poisonWith(nil)
	db.mu.Lock()
	switch n {
	case 1:
		db.mu.Unlock()
	case 2:
	}
	db.poisonWith(nil) // want: calls (*lockcheck.DB).poisonWith
}

// selects: both cases release.
func (db *DB) selects(a, b chan int) {
	db.mu.Lock()
	select {
	case <-a:
		db.mu.Unlock()
	case <-b:
		db.mu.Unlock()
	}
	db.poisonWith(nil)
}

// gotoBack goes back holding the lock.
func (db *DB) gotoBack(n int) {
again:
	db.poisonWith(nil) // want: calls (*lockcheck.DB).poisonWith holding lockcheck.DB.mu
	db.mu.Lock()       // want: Lock of lockcheck.DB.mu, which it already holds
	if n > 0 {
		n--
		goto again
	}
	db.mu.Unlock()
}

// tries: TryLock never waits, but holds when it succeeds.
func (db *DB) tries() {
	if !db.mu.TryLock() {
		return
	}
	defer db.mu.Unlock()
	db.poisonWith(nil) // want: TryLock at
	if db.idxMu.TryLock() {
		db.idxMu.Unlock()
	}
}

// reads takes a read lock twice (a writer between them deadlocks it).
func (db *DB) reads() {
	db.layoutMu.RLock()
	defer db.layoutMu.RUnlock()
	db.readLocked() // want: RLocks it at
}

func (db *DB) readLocked() {
	db.layoutMu.RLock()
	db.layoutMu.RUnlock()
}

// deferredLiteral releases in a deferred literal.
func (db *DB) deferredLiteral() {
	db.mu.Lock()
	defer func() {
		db.mu.Unlock()
	}()
	db.poisonWith(nil) // want: calls (*lockcheck.DB).poisonWith holding lockcheck.DB.mu
}

// twoInstances takes another DB's mu: the check cannot tell them apart.
func (db *DB) twoInstances() {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.other.poisonWith(nil) //lint:lockok another DB's mu, never db's
	//lint:lockok another DB's again (an annotation of its own line covers the next)
	db.other.poisonWith(nil)
}

// Embedded is a struct embedding its mutex.
type Embedded struct {
	sync.Mutex
	n int
}

func (e *Embedded) inc() {
	e.Lock()
	e.n++
	e.Unlock()
}

func (e *Embedded) twice() {
	e.Lock()
	defer e.Unlock()
	e.inc() // want: holding lockcheck.Embedded.Mutex
}

// Writer is called under a lock through an interface, as store.Front
// calls its store.Writer.
type Writer interface{ Next() int }

type Front struct {
	mu sync.Mutex
	w  Writer
}

func (f *Front) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Next() // want: calls (*lockcheck.writer).Next (through lockcheck.Writer) holding lockcheck.Front.mu
}

type writer struct{ f *Front }

func (w *writer) Next() int { return w.f.Len() }

// placement carries a callback the placer runs under db.mu, as the
// engine's placement.register.
type placement struct {
	register func()
}

func (db *DB) place(p *placement) {
	db.mu.Lock()
	defer db.mu.Unlock()
	p.register() // want: (through the func field lockcheck.placement.register) holding lockcheck.DB.mu
}

func (db *DB) appendFrames() {
	db.place(&placement{register: func() {
		db.poisonWith(nil)
	}})
}

// orderAB and orderBA take two mutexes in both orders.
func (db *DB) orderAB() {
	db.idxMu.Lock()
	db.layoutMu.Lock()
	db.layoutMu.Unlock()
	db.idxMu.Unlock()
}

func (db *DB) orderBA() {
	db.layoutMu.Lock()
	defer db.layoutMu.Unlock()
	db.step1()
}

var global sync.Mutex

func lockGlobal() {
	global.Lock()
	defer global.Unlock()
	helperGlobal() // want: holding lockcheck.global
}

func helperGlobal() {
	global.Lock()
	global.Unlock()
}

// stale has an annotation that excuses nothing.
func stale() {
	//lint:lockok nothing here takes a lock
	_ = 1
}

// noReason has an annotation without a reason: it excuses nothing.
func (db *DB) noReason() {
	db.mu.Lock()
	db.poisonWith(nil) //lint:lockok
	db.mu.Unlock()
}

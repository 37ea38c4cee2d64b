package coord

import (
	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// leaseByte is the byte of the locks file that is session id's write
// lease. (Two IDs that hash alike share a byte: one waits for the other.)
func leaseByte(id string) Lock {
	return leaseBase + Lock(xxhash.Sum64String(id)%(1<<62))
}

// LeaseKey is the number of session id's lease byte: two IDs of one key
// share the byte. The engine names a lease's holder record after it.
func LeaseKey(id string) uint64 { return uint64(leaseByte(id) - leaseBase) }

// LockLease takes session id's write lease across processes (its byte in
// the locks file, which the kernel releases when the process dies)
// without waiting, and reports whether it did. Without a locks file
// (nothing to coordinate with) it always does, until Close.
func (sh *Shared) LockLease(id string) (bool, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.locks == nil {
		return !sh.closed, nil
	}
	return sh.TryLock(leaseByte(id), true)
}

// LeaseHeld reports whether another holder (another process, or another
// open of the store) has session id's write lease byte, without taking
// it; false without a locks file (nothing to ask).
func (sh *Shared) LeaseHeld(id string) (bool, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.locks == nil {
		return false, nil
	}
	return sh.locks.HeldByOther(int64(leaseByte(id)))
}

// UnlockLease releases session id's byte (nothing once closed: Close
// released every lock).
func (sh *Shared) UnlockLease(id string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.locks != nil {
		sh.Unlock(leaseByte(id))
	}
}

// ProcessGone reports whether no process pid runs on this machine (a
// signal 0 finds none), so that what a dead process left can be told from
// what a live one holds.
func ProcessGone(pid int) bool {
	return pid <= 0 || unix.Kill(pid, 0) == unix.ESRCH
}

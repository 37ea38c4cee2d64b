package vfs

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations without FUTEX_PRIVATE_FLAG: their key is the
// mapped file's page, so that waiters and wakers in different processes
// meet on a word of a MAP_SHARED mapping.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

func futexWait(w *atomic.Uint32, old uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	// EAGAIN (the word changed), EINTR, ETIMEDOUT: all are a return.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(old), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

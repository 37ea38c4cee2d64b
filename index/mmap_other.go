//go:build !linux

package index

import "syscall"

// checkMapFlags are the check's mapping flags (see mmap_linux.go).
const checkMapFlags = syscall.MAP_SHARED

// Package vfs is the small file-system seam every storage layer of seglog
// goes through: create, open, read-at, write-at, sync, truncate, rename,
// remove, list, lock, sync-dir and mmap.
//
// Three implementations:
//
//   - [Default], the operating system: Sync is fdatasync(2), SyncDir opens
//     the directory and fsyncs it, Lock is a non-blocking flock(2), Map is
//     mmap(2) (golang.org/x/sys/unix).
//   - [MemFS], an in-memory file system that remembers which bytes and which
//     directory entries were synced, and can produce the state a power cut
//     would leave ([MemFS.CrashClone]): synced bytes kept, each unsynced write
//     kept in part or lost, the last one possibly garbled, unsynced directory
//     operations possibly undone.
//   - [FaultFS], a wrapper that fails chosen operations: the Nth write, sync
//     or rename, short writes, ENOSPC, from some point on.
//
// Names are slash-separated paths as the os package takes them. Creating or
// renaming a file is not durable until SyncDir of its directory returns:
// callers that need the entry to survive a crash call SyncDir themselves, so
// several entries can share one directory sync.
//
// vfs imports nothing from seglog. All implementations are safe for
// concurrent use; a File is safe for concurrent ReadAt and WriteAt at
// disjoint offsets, as pread/pwrite are.
package vfs

// Package vfs is the small file-system seam every storage layer of seglog
// goes through: create, open, read-at, write-at, sync, truncate, rename,
// remove, list, lock, sync-dir and mmap, and what processes sharing a
// store coordinate with: whole-file locks (exclusive or shared, on a file
// or on a directory itself), byte-range locks that die with their process
// ([Locks]), shared memory ([Shared]: its operations survive the file
// being cut short under the mapping, a SIGBUS otherwise), and the identity
// of the files they are on ([FileID]: device and inode).
//
// Three implementations:
//
//   - [Default], the operating system: Sync is fdatasync(2), SyncDir opens
//     the directory and fsyncs it, Lock, LockShared and LockDir are
//     non-blocking flock(2), Locks are open-file-description locks (fcntl F_OFD_SETLK,
//     Linux), Map is mmap(2) and MapShared a read-write MAP_SHARED mmap
//     (golang.org/x/sys/unix).
//   - [MemFS], an in-memory file system that remembers which bytes and which
//     directory entries were synced, and can produce the state a power cut
//     would leave ([MemFS.CrashClone]): synced bytes kept, each unsynced write
//     kept in part or lost, the last one possibly garbled, unsynced directory
//     operations possibly undone. Several stores opened on one MemFS are
//     several processes: locks and shared mappings are per MemFS and per
//     file (a file created in place of a removed one has none of them, as
//     on the OS), and a crash clone has none.
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

package coord

import "encoding/binary"

// The files the processes that share a store coordinate with
// (docs/MULTIPROCESS.md, Many processes).
const (
	LockFile  = "LOCK"  // flock: shared by every process of this build
	LocksFile = "locks" // byte-range locks that die with their process
	ShmFile   = "shm"   // shared memory: positions every process reads
	ShmSize   = 4096
)

// Word is the offset in shm of a 64-bit word (atomic).
type Word int

// The words of shm.
const (
	Magic     Word = 0  // MagicValue once a writing process set the log up; 0 when nothing is known
	Version   Word = 8  // VersionValue
	Tail      Word = 24 // position after the last placed frame; moved under LockAppend
	Durable   Word = 32 // position below which everything is fdatasynced
	Indexed   Word = 40 // the index checkpoint the checkpointer last committed
	Layout    Word = 48 // bumped around a compaction's removal or rewrite of a segment
	PID       Word = 56 // pid of the process that set the log up (an older build: of its writer)
	Frames    Word = 64 // events frames in the active segment (its seal counts them)
	Placing   Word = 72 // end of the placement in progress; past Tail if its placer died mid-write
	IndexWant Word = 80 // non-zero while a rebuild of the index (check --repair) waits for the checkpointer to step down
	// syncSeq (a 4-byte word) moves after every raise of Durable and
	// every release of LockSync: processes waiting for either sleep on
	// it (a futex) and syncWaiters (4 bytes) counts them, so that a
	// publisher makes the wake-up call only when someone waits
	syncSeq     = 88
	syncWaiters = 92
	// The stamp: stampValue, then the identities (device, inode: 16
	// bytes each) of the LOCK, locks and shm files the process that set
	// shm up held. A process that joins others compares them with the
	// files it opened.
	Stamp      Word = 96
	stampFiles Word = 104
	// slots + 8*i: the follow position of the writing process holding
	// slot i (SlotLock(i)), 0 while it opens; a compaction leaves alone
	// what one of them has not followed yet
	slots Word = 1024
	Slots      = 64
)

// SlotWord is the word of follow slot i.
func SlotWord(i int) Word { return slots + Word(8*i) }

// Lock is a byte of LocksFile.
type Lock int64

// The byte locks.
const (
	LockInit    Lock = 0  // held while a process opens the store
	LockAppend  Lock = 1  // held while a process places frames at the tail
	LockIndex   Lock = 2  // held by the process that checkpoints the index (and runs background compaction)
	LockCompact Lock = 3  // held while a process compacts
	LockBuild   Lock = 4  // shared by the writing processes of this build; an older build's writer holds it exclusive
	LockWriters Lock = 5  // shared by every writing process; a compaction without an index takes it exclusive (it runs alone)
	LockPrepare Lock = 6  // held while a process creates the next segment
	LockSync    Lock = 7  // held while a process fdatasyncs the active segment: the others wait, and their next sync covers them all
	LockFixed   Lock = 8  // shared by a writing process that cannot follow a compaction (no slot, or no index); a compaction takes it exclusive
	LockWant    Lock = 9  // held by a rebuild of the index while it waits for the checkpointer to step down (IndexWant)
	LockTypes   Lock = 10 // held while a process rewrites types.json (RegisterTypes)
	LockDict    Lock = 11 // held while a process makes (or looks for) a new compression dictionary
	LockCheck   Lock = 12 // shared by a check waiting to keep compactions out (CheckWaits): no compaction starts meanwhile
	lockSlot0   Lock = 16 // SlotLock(i), i < Slots: slot i's holder
	// leaseBase + xxhash64(id) mod 2^62: the write lease of session id
	// (leaseByte)
	leaseBase Lock = 1 << 32
)

// SlotLock is the byte held by the writing process that holds follow
// slot i.
func SlotLock(i int) Lock { return lockSlot0 + Lock(i) }

var (
	// MagicValue is in Magic once a writing process set the log up.
	MagicValue = binary.LittleEndian.Uint64([]byte("seglogsh"))
	stampValue = binary.LittleEndian.Uint64([]byte("seglogid"))
)

// VersionValue 2: several writing processes (tail, placing, frames).
// Version 1 (one writer) was never published beside a writer of this build:
// LockBuild keeps the two apart.
const VersionValue = 2

// Position packs a segment ID and an offset in it into one ordered word:
// the positions shm holds (Tail, Durable, Indexed, Placing, the slots).
func Position(seg uint64, off int64) uint64 { return seg<<40 | uint64(off) }

// SplitPosition is the inverse of Position.
func SplitPosition(p uint64) (seg uint64, off int64) { return p >> 40, int64(p & (1<<40 - 1)) }

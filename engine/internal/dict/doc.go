// Package dict is a writing process's side of the store's compression
// dictionaries (docs/FORMAT.md, Dictionaries): when one is due, the
// samples it is trained from, the CPU budget of compressing small frames
// with it, and the renewal that trains one (or takes the one another
// process made) and makes it durable before a frame names it.
//
// A [Trainer] is fed the frames the process encodes ([Trainer.Observe],
// on the flush path: cheap) and says on [Trainer.Kick] when a dictionary
// is due; its owner (the engine's dictLoop, engine/dict.go) then calls
// [Trainer.Renew] under the store's dictionary lock (coord.LockDict) and
// [Trainer.Done] after it, and decides what a failure does (a failed
// fsync poisons the store; anything else is logged and retried after a
// back-off). [Trainer.EncodeSmall] encodes a small frame with the
// current dictionary within the budget.
//
// It knows segments, dictionaries and the file system, nothing of
// sessions, the index, the contract or the DB; it starts no goroutine.
// Its locks, Trainer.training and then Trainer.budget, are the last of
// the engine's lock order (engine/doc.go).
package dict

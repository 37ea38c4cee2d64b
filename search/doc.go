// Package search keeps a full-text index of a seglog store and answers
// queries over it: what a person or a model said in past sessions (user,
// assistant and system messages, tool calls, a prefix of tool results),
// ranked by BM25 or by time, grouped by session, with snippets.
//
// The index is SQLite FTS5 (modernc.org/sqlite, pure Go), in a directory
// of its own (DirName in an engine store's directory, any directory for a
// JetStream store): a cache, made on the first Open, rebuilt when it is
// damaged. It is kept by catching up with the store through the store
// contract alone (List, read handles, Stat), so it serves every backend;
// indexing is never on the write path. Any number of processes may open
// the same index; one at a time catches up (a flock that the kernel
// releases when the process dies).
//
// Errors: a malformed query is a *QueryError (ErrQuery); a session whose
// events could not be read for indexing is a *SessionError in
// Result.Failed; a closed Index returns ErrClosed.
//
// Layering: search imports store and event of the core (and its tests
// the engine and bench); never segment, index, a backend or the CLI. It
// is a module of its own so that the core's go get stays free of SQLite.
// Its goroutines: none of its own but Run's caller's; an Index is safe for
// concurrent use (catch-ups serialised by a mutex, queries on SQLite's
// pool of connections). docs/SEARCH.md, Search, says how it works.
package search

// Command seglog inspects and measures seglog stores.
//
//	seglog bench [-dir DIR] [-events N] [-durable N] [-sessions N] [-size BYTES]
//	             [-procs N] [-proc-sessions N] [-multi-time D] [-follow N] [-follow-every D]
//
// bench runs the engine's workloads (package bench): durable single
// appends against a raw write+fdatasync baseline measured in the same run,
// concurrent durable appends of many sessions (group commit), a bulk load
// and a full replay, then durable appends of -procs worker processes into
// one store against one process and against a JSONL file per session, and
// the latency from a flush in one process to the wake-up of a reader in
// another, on a temporary directory unless -dir is given, and prints a
// table with the ratios. The workers are this binary started again with
// bench.WorkerEnv set. Progress goes to stderr.
//
// The other commands work on the store in --dir:
//
//	seglog check [--repair]            verify every frame, the sessions' seqs and the index
//	seglog ls [--sort updated]         list sessions: id, events, bytes, updated time, revision, format status, title
//	seglog stats                       store totals: sessions, events, bytes, segments
//	seglog cat [--balanced] ID         print a session's events as JSON lines (--balanced: with the closers of an open turn)
//	seglog segments                    list segment files, their live share and compression
//	seglog tail [-n N] [-f] ID         print a session's last events; -f follows new ones
//	seglog delete ID...                delete sessions (compaction reclaims the bytes)
//	seglog compact                     drop and rewrite segments of deleted data
//	seglog import ROOT                 import a reference harness root of JSONL logs (v3; v2, v1, v0's session.jsonl)
//	seglog export (ID | --all) ROOT    write sessions as reference harness logs
//	seglog migrate (ID... | --all)     upgrade sessions stored in an older format
//	seglog types                       list the event types of the default catalog (docs/EVENTS.md)
//
// Every command works on a store that agent hosts have open (docs/DESIGN.md,
// Many processes): the read commands beside them, and delete, import and
// migrate as one more writing process, and compact and check --repair too
// (one compaction at a time: another fails with "locked").
//
// ls, stats, segments and check take --json (README.md, CLI output, has
// the fields; ls --json's are id, events, bytes, revision, format,
// createdAt, updatedAt, and when set title, cwd, parentSession, isSeeded,
// inheritedEvents). seglog help COMMAND gives each one's flags. Only import creates a store;
// the others refuse a directory that holds none. Exit
// codes: 0 ok; 1 failed, or did only part of its work (check found
// problems, import refused logs, export left sessions out); 2 usage error.
//
// cmd/seglog is the top of the dependency graph; nothing imports it.
package main

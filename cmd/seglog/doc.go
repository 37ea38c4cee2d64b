// Command seglog inspects, maintains and measures seglog stores: it
// checks, lists and prints sessions, follows them, deletes, compacts,
// migrates and retains, imports and exports the reference harness's logs,
// copies between stores (local or NATS JetStream), searches, serves a
// store as MCP tools and in a web viewer, and runs the benchmarks;
// docs/CLI.md is the reference.
//
//	seglog bench [-dir DIR] [-events N] [-durable N] [-sessions N] [-size BYTES]
//	             [-procs N] [-proc-sessions N] [-multi-time D] [-follow N] [-follow-every D]
//	             [-agent-sessions N] [-agent-turns N] [-kill-rounds N] [--json [FILE]] [-plot FILE.png]
//	             [--backend local|jetstream] [--peers]
//
// bench runs the engine's workloads (package bench): durable single
// appends against a raw write+fdatasync baseline measured in the same run,
// concurrent durable appends of many sessions (group commit), a bulk load
// and a full replay, then durable appends of -procs worker processes into
// one store against one process and against a JSONL file per session, the
// latency from a flush in one process to the wake-up of a reader in
// another, and the agent host on the engine and on the JSONL reference,
// on a temporary directory unless -dir is given, and prints a table with
// the ratios; then the durability window's promise under SIGKILL
// (bench.KillWindow, -kill-rounds rounds): agent hosts that flush only at
// a turn's end killed at a random moment, the events lost, those older
// than the window plus one sync (none), the turns Resume closed. The workers are this binary started again with
// bench.WorkerEnv set. --json prints the rows as JSON on stdout (the table
// then goes to stderr), --json FILE writes them to FILE; -plot draws a PNG
// (package bench/chart, gonum/plot): the rows' events/s as bars and each
// row's latency distribution as a line.
//
// The other commands work on the store in --dir:
//
//	seglog check [--strict] [--repair]  verify every frame, the sessions' seqs and the index
//	seglog ls [--sort updated]         list sessions: id, events, bytes, updated time, revision, format status, title
//	seglog stats                       store totals: sessions, events, bytes, segments
//	seglog cat [--balanced] ID         print a session's events as JSON lines (--balanced: with the closers of an open turn)
//	seglog inspect ID                  a session's events and the closers a resume would append to its open turn (cat --balanced)
//	seglog segments                    list segment files, their live share and compression
//	seglog tail [-n N] [-f] ID         print a session's last events; -f follows new ones
//	seglog changes [--from CURSOR] [--follow] [--json]  the store's change feed (creates, appends, forks, deletes), each with its cursor
//	seglog delete ID...                delete sessions (compaction reclaims the bytes)
//	seglog compact                     drop and rewrite segments of deleted data
//	seglog import [--strict] ROOT      import a reference harness root of JSONL logs (v3; v2, v1, v0's session.jsonl); lists each log the torn-tail rule cut
//	seglog export (ID | --all) ROOT    write sessions as reference harness logs
//	seglog migrate (ID... | --all)     upgrade sessions stored in an older format
//	seglog types                       list the event types of the default catalog (docs/EVENTS.md)
//	seglog copy --to DIR|nats://... [--from DIR|nats://...] [ID...]
//	                                   copy sessions between stores: local directories, JetStream streams
//	seglog retain (--older-than D | --keep N) [--dry-run] [--nats URL]
//	                                   delete sessions by a retention policy (a stream's old tombstones too)
//	seglog search QUERY [--session P] [--cwd D] [--since T] [--until T] [--types ...] [--context N] [--limit N] [--json]
//	                                   find words in the sessions (a full-text index in <dir>/search; --rebuild)
//	seglog mcp [--http 127.0.0.1:PORT] [--max-bytes N]
//	                                   serve the store read-only as MCP tools (sessions_list, session_read, session_search) over stdio
//	seglog ui [--addr HOST:PORT] [--token T]
//	                                   a read-only web viewer of the store: sessions, timelines, live follow, search
//	seglog help [COMMAND]              what a command does, its flags and its exit codes
//	seglog completion SHELL            a completion script for bash, zsh, fish or powershell (cobra's)
//
// Every command works on a store that agent hosts have open (docs/MULTIPROCESS.md,
// Many processes): the read commands beside them (copy's source too), and
// delete, import, migrate and retain as one more writing process, and compact and check --repair too
// (one compaction at a time: another fails with "locked"). Only import
// and copy (its --to) create a store; the others refuse a directory that
// holds none. copy and retain also reach a NATS JetStream stream
// (backend/jetstream) by its address.
//
// Output. ls, stats, segments, check, import, copy, retain and bench take --json,
// whose field names are stable and listed in docs/CLI.md (CLI output) and in seglog help
// COMMAND; ls --json's are id, events, bytes, revision, format,
// createdAt, updatedAt, and when set title, cwd, parentSession, isSeeded,
// inheritedEvents. An error is printed once, on stderr, after "seglog: ".
//
// Progress goes to stderr, from schollz/progressbar, and only when stderr
// is a terminal (golang.org/x/term): a bar per row of bench, of the logs of
// import, of the sessions of export and check --strict, a spinner while
// compact and check run. A task that ends within 300ms draws none.
// Elsewhere (a pipe, a file) bench prints a plain line as each row ends
// and the others print no progress; nothing holds a control character.
//
// Exit codes: 0 ok; 1 failed, or did only part of its work; 2 usage error
// (an unknown command or flag, a bad flag value, wrong arguments; nothing
// was done). Per command (help.go, seglog help COMMAND):
//
//	bench     1: a workload failed, the window durability's promise was broken, the --json or --plot file could not be written, --peers failed
//	check     1: problems found (--json: ok false), the store could not be checked, --repair failed
//	ls        1: no store, or it could not be read
//	stats     1: no store, or it could not be read
//	cat       1: no such session, no store, damaged data
//	inspect   1: no such session, no store, damaged data
//	segments  1: a segment file did not open or scan (listed with the others), no store
//	tail      1: no such session, no store, damaged data (an interrupted -f is 0)
//	changes   1: a cursor refused (malformed, another store's) or too old (compacted), no store, damaged data (an interrupted --follow is 0)
//	delete    1: a session not found or failed; the ones before it are deleted
//	compact   1: another compaction runs (locked), no store, an I/O error
//	import    1: some logs refused (listed; the others imported; --strict: those the torn-tail rule cuts), none readable, the store did not open
//	export    1: some sessions not exported (listed; the others exported), the one named does not exist
//	migrate   1: a session not found or failed; the ones before it are migrated
//	types     1: --dir names a directory without a store, or its recorded types cannot be read
//	copy      1: some sessions not copied (listed; the others copied), a store could not be opened
//	retain    1: some deletes failed (listed), the store could not be opened or listed
//	search    1: some sessions could not be searched whole (named; the others' hits printed), the store or its index could not be read; 2: a malformed query (named)
//	mcp       1: no store, or it could not be opened; --http could not listen; 2: --http not loopback (without --allow-remote), --max-bytes under 16384
//	ui        1: no store, or it could not be opened, or the address could not be listened on (Ctrl-C is 0); 2: a bad --addr
//
// cmd/seglog is the top of the dependency graph; nothing imports it. It is
// a module of its own, github.com/seglog/seglog/cmd/seglog, so that the
// core module does not depend on cobra, the progress bars, NATS or
// gonum/plot; go.work at the repository's root lets `go run ./cmd/seglog`
// work from there (docs/DESIGN.md#modules).
package main

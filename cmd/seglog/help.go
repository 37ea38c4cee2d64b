package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// commandHelp is each command's help: what seglog help COMMAND prints
// above the flags, and its exit codes (0, 1, 2: exitOK, exitFailed,
// exitUsage). docs/CLI.md (Exit codes) and doc.go say the same.
var commandHelp = map[string]struct {
	long  string
	codes [3]string
}{
	"bench": {`Run the engine's workloads on temporary stores (in a directory made under --dir, or the
system's temporary directory, and removed at the end unless --keep) and print a table: a raw
write+fdatasync baseline (the physical limit, measured in the same run), durable
append+flush of one session and of --sessions concurrent ones (group commit), a bulk load
and a replay; then --procs worker processes appending into one store against one process
and against a JSONL file per session; the latency from a flush in one process to the
wake-up of a reader in another (--follow); and the agent host (--agent-sessions sessions
doing --agent-turns turns) on the engine and on the JSONL reference, with a second table of
bytes per event and heap per session; with --tmpfs DIR (e.g. /dev/shm) the agent-host pair
again with the stores in DIR (a tmpfs: the CPU per event, no disk in the way). Then search
(issue 46's S6, the search package alone): --search-sessions (500) sessions of 2 agent turns
in a store, the index built from its change feed (events/s), its bytes over the raw JSON of
the events it indexed, --search-queries (100) two-word queries and as many phrases (p50,
p99), each beside its goal (0 skips it). Last, the window durability (--kill-rounds rounds, 4):
a worker process of 8 agent-host sessions that flush only at their turns' ends (one in three
never) is killed with SIGKILL 0.5-1.5 s after its start; the store is checked, opened, each
session compared with what was handed over and resumed; a line per round and the sums: events
handed over, lost, lost older than the window + one sync (the promise: 0), flushed and lost,
the oldest lost event's age, the interrupted turns closed, the check's problems; on the engine
and on the JSONL reference. The workers are this binary started again.

--json prints the rows as a JSON array on stdout, and the table on stderr; --json FILE
writes the array to FILE. A row is an object: name, workload, sessions, events,
input_bytes, disk_bytes, elapsed_ns and, where measured, p50_ns, p99_ns, latency (the
distribution: [{p, ns}] at p 0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100), procs,
backend, turns, raw_json_bytes, written_bytes, rest_bytes, heap_per_session,
heap_per_idle_session, cpu_ns, corpus, in the kill-window rows kill_window, and in the search row
search (docs/CLI.md, CLI output).
--plot FILE.png draws the events/s of the rows (bars, log scale) and each row's latency
distribution (a line per row).
--backend jetstream runs the durable, bulk and replay rows on the local engine and on an
embedded NATS JetStream server, side by side (--json and --plot as above).
--peers then runs the same workloads on the peers (bench/peers; needs the source tree).

Progress goes to stderr: on a terminal a bar per row; a line as each row ends
("<row>: done in 1.23s"), on a terminal or not. Off a terminal nothing holds a control
character.`,
		[3]string{"every row ran", "a workload failed, or the window durability's promise was broken, or the --json or --plot file could not be written, or --peers failed", "a bad flag value (--events 0, --size under 64, --backend other than local or jetstream, ...)"}},

	"check": {`Verify the store in --dir as Open would recover it, read-only: every frame of every
segment (checksums, each session's seqs in order), the index against the segments, and say
what a write open would do (the notes). It prints the notes, a line per problem (its file
and offset, or its session), a summary (segments, frames, sessions, events), then "OK" or
"N problems". --strict also reads every session and reports each event that breaks the v3
surface rules (docs/EVENTS.md). --repair then rebuilds the index from the segments.

--json prints one object: ok, problems (an array of lines), notes, segments, frames (every
frame: headers and tombstones too), sessions, events, repaired.

Progress: on a terminal, a spinner while the store is checked and a bar of the sessions
--strict reads; nothing elsewhere.`,
		[3]string{"no problems (OK; --json: ok is true)", "problems found (listed; --json: ok is false; with --repair too), or the store is missing or could not be checked, or --repair failed", "an argument, or an unknown flag"}},

	"ls": {`List the store's sessions, a line each: ID, EVENTS, BYTES, UPDATED (the time of the last
flushed event, or the creation time, UTC), REVISION, FORMAT (current or migration-required),
TITLE (the latest session/title's). --sort updated lists the most recently updated first.
--prefix and --cwd filter. --limit pages the list: stderr then gives the --after of the
next page (an ID, or with --sort updated "<updatedAt>:<id>").

--json prints {"sessions": [...], "next": cursor}, an object per session with the fields
id, events, bytes, revision, format, createdAt, updatedAt (milliseconds since the epoch), and
when set title, cwd, parentSession, isSeeded, inheritedEvents; next is the --after of the
next page ("" after the last).`,
		[3]string{"listed (an empty store lists nothing)", "no store in --dir, or it could not be read", "a bad --sort, a negative --limit, a bad --after with --sort updated, or an argument"}},

	"stats": {`Print the store's totals: sessions, events, bytes (of the sessions' frames), segment
files, and bytes per event.

--json prints one object: sessions, events, bytes, segments.`,
		[3]string{"printed", "no store in --dir, or it could not be read", "an argument, or an unknown flag"}},

	"cat": {`Print the events of session <id> as JSON lines, exactly as stored, from seq --from, at
most --n of them. An event whose type this build's catalog does not know (a host's own
type, a retired shape) is printed as stored and flagged on stderr. --balanced ends an open
turn with the closers a resume would append: shown, not stored, flagged on stderr.`,
		[3]string{"printed", "no such session, no store in --dir, or damaged data", "no <id> or more than one, a negative --from, a bad --n"}},

	"inspect": {`Print the events of session <id> as JSON lines, as cat does, and after them, if its last
turn is open (a crash cut it), the closers a resume would append: a tool/result for each
call still pending, a step/end, a turn/end with reason interrupted. The closers are shown,
not stored, and flagged on stderr with their seqs; nothing is written and no lease is
taken, so it runs beside a host that writes the session. Of a session a live writer holds,
it says so on stderr, naming the writer as a refused write open does (process, host, since):
its turn is then in progress, not interrupted, and the closers are what a resume would
append if that writer died. The same as cat --balanced; --from and --n select from the
whole, closers included.`,
		[3]string{"printed", "no such session, no store in --dir, or damaged data", "no <id> or more than one, a negative --from, a bad --n"}},

	"segments": {`List the store's segment files, a line each: ID, GEN (generation), FILE BYTES, USED (the
bytes up to the last frame), SEALED, FRAMES and EVENTS (of the events frames), LIVE (the
share of the used bytes that the sessions still need; - if the store does not open) and
COMPRESSION (raw over stored bytes of the events frames). A file that does not open or scan
is listed with its error, and the others all the same.

--json prints an array, an object per file: id, generation, fileBytes, usedBytes, sealed,
frames, events, liveBytes (-1 if the store did not open), rawBytes, storedBytes,
compression (omitted without events), and error if the file did not open or scan.`,
		[3]string{"listed", "a segment file did not open or scan (listed, with the others), or no store in --dir", "an argument, or an unknown flag"}},

	"tail": {`Print the last -n events of session <id> as JSON lines; with -f, keep printing the events
written after them, by this or any other process, until interrupted (Ctrl-C). The last -n
are printed at once; then each flush as it is made durable. Only flushed events are shown
(an event in a write-behind window shows once its window ends). The session
must exist: tail follows a session, it does not wait for one to appear.`,
		[3]string{"printed (-f: until interrupted)", "no such session (never made, or deleted), no store in --dir, or damaged data", "no <id> or more than one, a bad -n"}},

	"changes": {`Print the store's change feed: every session created (create, with its header), every
batch of events made durable (append: session, first seq, events), every fork (parent and n:
the inherited events are not repeated) and every delete, by any process, in the order they
became durable; compaction, index rebuilds and migrations are not changes. Each line
starts with the cursor past its change (--json: the "cursor" field of one JSON object per
line): --from CURSOR resumes after that change, in this run or a later one. --follow keeps
printing changes as they become durable until interrupted (Ctrl-C). A cursor of another
store, or a malformed one, is refused; one older than what the store still holds (compaction
removed what follows it) fails, and the consumer starts again without --from. A session
whose delete compaction purged is shown deleted first to a consumer that saw it created.
--nats reads a JetStream stream's feed instead of --dir's.`,
		[3]string{"printed (--follow: until interrupted)", "a cursor refused or too old, no store in --dir or the stream, or damaged data", "an argument (--nats not a NATS address), or an unknown flag"}},

	"delete": {`Delete the sessions, in the order given, durably: a reader opened afterwards, in any
process, finds none of them; compaction reclaims their bytes. Prints "deleted <id>" for
each.`,
		[3]string{"every session deleted", "a session not found, or a failure: delete stops there, the sessions before it are deleted", "no <id>"}},

	"compact": {`Remove the sealed segments that hold only deleted data and rewrite those whose live bytes
are under --live-ratio of their size (negative: rewrite none); --roll (the default) seals
the active segment first, so that its deleted data can go too. It runs beside the hosts
that have the store open; one compaction runs at a time, another fails with "locked".
Prints the segments scanned, removed and rewritten, and the bytes reclaimed.

Progress: on a terminal, a spinner while it runs; nothing elsewhere.`,
		[3]string{"compacted (or nothing to do)", "it failed: another compaction runs (locked), no store in --dir, an I/O error", "--live-ratio over 1 or NaN, or an argument"}},

	"import": {`Import a reference harness root, <root>/<project>/<encodedId>/session.v3.jsonl (or
.jsonl.zstd; older: session.v2.jsonl, session.v1.jsonl, session.jsonl), the newest log of
each session, into the store in --dir, creating it (and the directory) if missing: import
is the one command that creates a store (an import that stores no session, every log
refused, removes the store it created: the directories it made, or the files it added to a
directory that held no store; it never removes what was there). Each log is checked as the reference reads it
(the header's id against its directory, its version against its file name, the catalog's
types, the v3 surface rules; an older log, as its migration to v3 admits it: the released
event types and data members of its format, content kinds, message sources, delivery
markers); a log that fails is refused and listed with the reason
("refused: <path>: <reason>"), and the others are imported. --register names event types
beyond the default catalog (a host's own: acme/deploy, acme/*), recorded in the store.
Prints the sessions and events imported, the time, and (over a run of a second or more that
imported a session) the rate in sessions/s and MB/s.

A session's ID is its header's "id"; its directory name must be that ID encoded as the
reference encodes it (a log under another name is refused): letters, digits, '.', '_' and
'-' stay as they are, and every other UTF-16 code unit becomes '~' and its four upper-case
hex digits ("agent/7 ü" is agent~002F7~0020~00FC, an emoji two units: ~D83D~DE00); "." and
".." are ~002E and ~002E~002E. <project> is _no-cwd for a session without a cwd, else
--<slug>-- of its cwd (lossy: only the directory name identifies the session). export
writes the same names.

The torn-tail rule (the reference's): a log ends where its first bad row starts, since a
crash leaves an interrupted write at the end of a log. A last line without a newline is
dropped; so is a complete row that is no event (garbage, a missing field) or whose seq is
not the next one (a gap, a repeat), with every row after it, good ones too; in a .zstd log,
a damaged or incomplete last frame. But a bad row with a turn/end row after it was
committed: that log is refused as corrupt. import applies the rule and lists every session
it cut: "cut: <path>: session <id> imported with N events; dropped from line L on: R rows
(the problem)" (line 1 is the header). --strict refuses a log the rule cuts instead.

--json prints one object: files, sessions, events, cut (an array: path, id, events
imported, line, rows, bytes, kind (incomplete-line, bad-row, torn-frame), reason, and
frameAt and frameBytes for a torn .zstd frame) and refused (an array: path, reason).

Progress: on a terminal, a bar of the logs; nothing elsewhere.`,
		[3]string{"every log imported (those the torn-tail rule cut too: listed)", "some logs refused (listed; the others imported; with --strict, those the torn-tail rule cuts), no log it reads under <root>, or the store could not be opened", "no <root> or more than one, a bad --register"}},

	"export": {`Write session <id>, or with --all every session, as a reference harness log under <root>:
<root>/<project>/<encodedId>/session.v3.jsonl (--zstd: .jsonl.zstd, a zstd frame per
batch), each written whole or not at all; a session of an older format is written
migrated. Prints a line per session. With --all, a session that cannot be exported (an ID
whose encoded directory name is longer than the 255 bytes file systems allow) is listed
with the reason, and the others are exported.

Progress: on a terminal, a bar of the sessions; nothing elsewhere.`,
		[3]string{"every session exported", "some sessions not exported (listed; the others exported), the session named does not exist, or no store in --dir", "neither <id> nor --all, or both; no <root>"}},

	"migrate": {`Upgrade the sessions named, or with --all every session ls shows as migration-required,
from an older format (v1, v2) to the current one (v3), as the reference migrates them.
Prints each one's versions, events before and after, and its new revision; a session
already current is left as it is. Not required before writing: a host's write open (Open
for write, Resume) migrates such a session by itself; migrate does it ahead of time.`,
		[3]string{"every session migrated (or already current)", "a session not found, or a failure: migrate stops there, the sessions before it are migrated", "neither ids nor --all, or both"}},

	"copy": {`Copy sessions from one store to another: from --from (default --dir) to --to, each a
store directory or a NATS JetStream stream (nats://host:4222, a comma-separated list for a
cluster, ?stream=S&prefix=P&leases=B for names other than --stream, --subject-prefix and
--lease-bucket; --creds FILE). The <id>s named, or every session. A directory --to is
created if missing; a stream must be provisioned, or made with --create. Each session's
header and events are copied as stored (a fork as a fork where the destination holds its
parent); revisions are the destination's own. The source is only read (hosts keep writing
it): a session is copied up to its length when its copy began, and a later copy appends
what was written since. Safe to run again, after a crash too: a session the destination
already holds is compared event by event; a copy cut short is finished, nothing is written
twice, and a different session of the same id is refused and left as it is. Prints a line
per session (created, forked, resumed, up to date, ahead, gone, or not copied and why) and
a total.

--json prints one object: sessions (an array: id, status, events, copied, and error if it
failed) and failed (how many).

Progress: on a terminal, a bar of the sessions; nothing elsewhere.`,
		[3]string{"every session copied (or already there)", "some sessions not copied (listed: another session of the id at the destination, an older format to migrate first, a writer holding it at the destination, ...), or a store could not be opened", "no --to, --from and --to the same, a bad NATS address setting, an unknown flag"}},

	"retain": {`Delete the sessions a retention policy selects, in --dir or in the stream --nats names:
those last updated (the time of their last flushed event) longer ago than --older-than,
and those beyond the --keep most recently updated; --prefix and --cwd restrict the sessions
considered (the others are neither deleted nor counted). A session a host writes is
skipped and listed, never forced; so is one written after the listing. --dry-run deletes
nothing and lists what would go. On a stream, the tombstones deleted sessions leave are
purged once older than --tombstones-older-than (default 24h; 0 keeps them); in a
directory, compaction reclaims the deleted bytes (seglog compact, or any host's background
compactor). Prints a line per session and a total.

--json prints one object: dryRun, considered, deleted, held, changed (arrays of ids), failed
(an array: id, error) and tombstones (purged: ids, young, held: ids; null in a directory).`,
		[3]string{"the policy applied (sessions held or written meanwhile are skipped and listed)", "some deletes failed (listed), or the store could not be opened or listed", "neither --older-than nor --keep, a negative value, an argument, --nats not a NATS address"}},

	"types": {`List the event types of the default catalog (the reference harness's v3 catalog) and
those the store in --dir records (seglog import --register, DB.RegisterTypes), one a line,
sorted; a family as prefix/*. Without --dir or $SEGLOG_DIR, and no store in ./seglog-data,
the default catalog alone. docs/EVENTS.md describes them.`,
		[3]string{"listed", "--dir (or $SEGLOG_DIR) names a directory without a store, or its recorded types cannot be read", "an argument, or an unknown flag"}},

	"search": {`Find QUERY in the store's sessions: words (all must match), "phrases", prefix*, a OR b,
NOT word and -word, case and diacritics folded; --substring (and any CJK term) matches
substrings through trigrams. The hits are grouped by session (ID, title, cwd, updated time),
each with its seq, time, type, role and a snippet with the matched terms between « »;
ranked by BM25 (--order newest or oldest by time). By default the text of user and
assistant messages is searched (--roles, --types for the others: system, tool-call, tool).
The index is a cache in <dir>/search, made by the first search (a bar shows the build) and
caught up by each search with every event durable a second before it began; --rebuild
empties it and builds it again. A store open elsewhere is searched as it grows. A session
whose events could not all be read (a damaged segment) is named on its own line. --json
prints one object: sessions [{id, title, cwd, updatedAt, hits [{seq, type, role, time,
snippet, inherited, before, after}]}], next, failed.`,
		[3]string{"printed (no hit is not an error)", "no store in --dir, or the store or its index could not be read", "a malformed query (named), an argument, or an unknown flag"}},

	"mcp": {`Serve the store in --dir to an MCP client (an agent) as three read-only tools, until the
client disconnects (stdio: stdin closes) or an interrupt: sessions_list (most recently updated
first, ID prefix, cwd, paged by a cursor), session_read (a window of a session's events as
inspect shows them: an open turn's closers follow, marked, not stored; a cursor reads on, an
event too large for one result comes in pieces) and session_search (the search of seglog
search: hits grouped by session, snippets, context). No tool writes the store: it is opened
read-only, beside the hosts that write it; session_search keeps the index in <dir>/search
as seglog search does. Each result is JSON text of at most --max-bytes (64 KiB): what does
not fit is cut, with a "cut" field saying how much and the cursor that reads on. Bad
arguments (an unknown session, a bad cursor, a negative limit, a malformed query) are tool
errors that name what is wrong. Over stdio by default (an MCP client's config: command
"seglog", args ["mcp", "--dir", DIR]); --http ADDR serves streamable HTTP on ADDR, a
loopback address (127.0.0.1:8765): the server has no authentication, so another address is
refused unless --allow-remote.`,
		[3]string{"the client disconnected, or an interrupt", "no store in --dir, or it could not be opened; --http could not listen", "--http not a loopback host:port (without --allow-remote), --max-bytes under 16384, an argument, or an unknown flag"}},
}

// describe sets the Long help of the root's commands: commandHelp's text
// and exit codes. A command without an entry is a bug, found by
// TestHelpDescribesEveryCommand.
func describe(root *cobra.Command) {
	for _, c := range root.Commands() {
		h, ok := commandHelp[c.Name()]
		if !ok {
			continue
		}
		var b strings.Builder
		b.WriteString(h.long)
		b.WriteString("\n\nExit codes:\n")
		for code, what := range h.codes {
			fmt.Fprintf(&b, "  %d  %s\n", code, wrap(what, 84, "     "))
		}
		c.Long = strings.TrimSuffix(b.String(), "\n")
	}
}

// wrap breaks s into lines of at most width bytes at spaces, each after
// the first starting with indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && line+1+len(word) > width {
			b.WriteString("\n" + indent)
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// Package bench holds seglog's benchmark workloads as Config values and Run
// functions with no mutable globals, shared by go test benchmarks, the
// `seglog bench` command and the peers module (bench/peers). The
// multi-process workloads (MultiDurable, Follow, KillWindow) run their
// writers in worker processes: a binary that runs them calls ServeWorker first.
//
// AgentHost is the work an agent host really does: Config.Sessions
// sessions (16) doing Config.Turns turns (20) at once, each turn a
// turn/start, step/start, user/message, the assistant's streamed
// assistant/chunk deltas handed to Enqueue (write-behind), its
// assistant/message, 1-3 tool/call + tool/result pairs, step/end, a second
// step with the answer, and turn/end, then a Flush: the durability a host
// promises at a turn's end. The text is the repository's own (LoadCorpus:
// its .go and .md files, read from the source tree found from the working
// directory, else this package's embedded sources): documents as
// messages, files read, grep hits and directory listings as tool outputs.
// It reports events/s; the turn-end flush latency p50/p99; bytes per event
// as written (the store's frames, or the files' bytes), at rest (the
// store's files after Close, preallocated room included) and as raw JSON
// lines (the reference's encoding), whose quotient WrittenPerRaw is the
// compression ratio; and the heap each session adds (open, then idle).
// It runs on the local engine, on the reference model (a JSONL file per
// session, written and fdatasynced at each flush and at the end of each
// 200 ms write-behind window, as the reference does: Config.Backend "jsonl")
// or on any HostStore (bench/peers runs it on its peers).
//
// KillWindow measures the durability window's promise: agent hosts in a
// worker process that flush only at a turn's end (or never) are killed
// with SIGKILL at a random moment; the store is checked, read and resumed,
// and Result.Kill counts the events lost, those handed over more than the
// window plus one sync before the kill (KillBound; the promise is none),
// the flushed ones lost, and the turns Resume closed (killwindow.go).
//
// MeasureRatios and Regressions are the regression guard's (bench/cmd/regress,
// bench/baseline.json): ratios measured in one run, among them
// AgentWrittenPerRaw, the agent-host workload's compression (it moves with
// the repository's text as well as with the engine), and AgentRestPerRaw,
// its store's footprint at rest (preallocated zeros and index included),
// and AgentVsReference, its events/s over the reference model's on the same
// turns; and BulkVsJSONL, the bulk load's events/s over the same batches
// written as JSON lines (Bulk with Config.Backend "jsonl").
//
// bench may import engine and everything below it; only commands, the
// charts (bench/chart) and the peers (bench/peers) import bench. See
// docs/DESIGN.md#layering.
package bench

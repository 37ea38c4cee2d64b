// Package bench holds seglog's benchmark workloads as Config values and Run
// functions with no mutable globals, shared by go test benchmarks, the
// `seglog bench` command and the peers module (bench/peers). The
// multi-process workloads (MultiDurable, Follow) run their writers in
// worker processes: a binary that runs them calls ServeWorker first.
//
// bench may import engine and everything below it; nothing in the main
// module imports bench except cmd/seglog. See docs/DESIGN.md#layering.
package bench

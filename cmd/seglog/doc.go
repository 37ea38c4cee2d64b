// Command seglog inspects and measures seglog stores.
//
//	seglog bench [-dir DIR] [-events N] [-durable N] [-sessions N] [-size BYTES]
//
// bench runs the engine's workloads (package bench): durable single
// appends against a raw write+fdatasync baseline measured in the same run,
// concurrent durable appends of many sessions (group commit), a bulk load
// and a full replay, on a temporary directory unless -dir is given, and
// prints a table with the ratios. Progress goes to stderr.
//
// The other commands (check, ls, stats, cat, segments, tail, delete,
// compact, import, export, migrate) work on the store in -dir. Only import
// creates a store; the others refuse a directory that holds none. Exit
// codes: 0 ok; 1 failed, or did only part of its work (check found
// problems, import refused logs, export left sessions out); 2 usage error.
// seglog help lists them all.
//
// cmd/seglog is the top of the dependency graph; nothing imports it.
package main

// Package fuzz holds seglog's cross-package fuzz targets: operation scripts
// run against the engine on a crashable file system and against a plain
// model, torn-write recovery campaigns, and the SIGKILL campaigns, which
// re-execute the test binary as child processes that write a store and
// kill them: TestSIGKILL (one writer that flushes), TestSIGKILLMix (the
// full mix of operations), TestSIGKILLMulti (several writer processes and
// a reader), TestSIGKILLLiveReader, and TestSIGKILLNoFlush (agent hosts
// that never flush mid-turn: every event handed over more than the
// durability window plus one sync before the kill must be there, and
// Resume closes the cut turn). Single-package targets
// (segment's FuzzDecodeFrame and FuzzScan, for example) live in their
// packages.
//
// fuzz is a test-only package: nothing imports it. See fuzz/README.md (with
// the crash-safety issue) for long campaigns.
package fuzz

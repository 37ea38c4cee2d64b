// Package fuzz holds seglog's cross-package fuzz targets: operation scripts
// run against the engine on a crashable file system and against a plain
// model, and torn-write recovery campaigns. Single-package targets
// (segment's FuzzDecodeFrame and FuzzScan, for example) live in their
// packages.
//
// fuzz is a test-only package: nothing imports it. See fuzz/README.md (with
// the crash-safety issue) for long campaigns.
package fuzz

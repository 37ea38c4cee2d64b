// Package testgen makes deterministic session events for tests, benchmarks
// and the bench command: JSON objects of word-salad text that compress like
// prose (about 3x with zstd), not like a repeated string.
//
// testgen imports only event; it does no I/O.
package testgen

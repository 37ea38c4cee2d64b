// Package lint enforces seglog's conventions as tests: the layering of
// docs/DESIGN.md#layering (lower packages never import higher ones, pure
// packages do no I/O) and the module boundaries of docs/DESIGN.md#modules
// (the core module depends on five modules only; go.work, the README's
// test command and .ci/run name every module). It has no non-test code.
package lint

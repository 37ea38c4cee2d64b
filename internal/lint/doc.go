// Package lint enforces seglog's conventions as tests: the layering of
// docs/DESIGN.md#layering (lower packages never import higher ones, pure
// packages do no I/O). It has no non-test code.
package lint

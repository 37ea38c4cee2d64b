// Package engine is seglog's composition root: Open a store directory, get
// write and read handles on sessions, append events and flush them durably.
// It composes segment (the files), index (the bbolt catalog), handle
// (leases, write-behind batching, flush barriers) and recovery, owns every
// background goroutine, and is the only package that does all of that.
//
// engine may import every lower package (event, segment, index, handle,
// recovery, plan's pure logic, internal/...); it must not import bench, fuzz
// or cmd. See docs/DESIGN.md#layering.
//
// Status: the engine is specified in issue "Engine: sessions over segments
// with a bbolt index, handles with leases, group-commit flush, write-behind,
// and a reusable contract suite" and not yet built; the segment layer below
// it is.
package engine

// Package plan implements plan mode on the event log: the log-only
// plan/mode event, its fold, the controller's set/get decisions, the
// plan:policy prompt section and the exit_plan_mode tool.
//
// Its decision logic is pure; its I/O goes only through a handle interface
// it defines. plan imports event and internal/base only, never segment,
// index, internal/vfs or engine, and no I/O package of the standard library.
// See docs/DESIGN.md#layering.
package plan

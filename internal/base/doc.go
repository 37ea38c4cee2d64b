// Package base holds the small vocabulary every seglog layer shares: the
// cross-cutting error kinds ([ErrCorrupt], [ErrClosed]), the typed errors that
// carry a location ([CorruptionError], [FormatError], [CoordinationError]) and
// storage locations.
//
// base is the bottom of the dependency graph: it imports nothing from seglog
// and does no I/O. Public packages re-export what their callers need (engine
// aliases [CorruptionError] and [ErrCorrupt]), so users never import base.
package base

// Package storekit is what a backend of the store contract builds from
// store and recovery together, so that every backend (engine,
// backend/jetstream) shares one copy: Resume, ResumeMany (many sessions
// resumed with one flush), Inspect and a handle's TurnState (Turns, over
// what a backend gives: its open, its hint of where a session's open turn
// starts, its lease holders, its flush; built on AppendClosers,
// InspectHandle and HandleTurnState: the open turn folded from the hint,
// which OpenTurn checks against the log, and the closers of
// recovery.Closers),
// and the surface-rules checker a backend gives its handles when its
// SurfaceRules option is on (SurfaceRulesChecker).
//
// storekit does no I/O of its own: it works through the handles it is
// given.
package storekit

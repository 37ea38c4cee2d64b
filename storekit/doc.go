// Package storekit is what a backend of the store contract builds from
// store and recovery together, so that every backend (engine,
// backend/jetstream) shares one copy: Resume, Inspect and a handle's
// TurnState through a handle (ResumeHandle, AppendClosers, InspectHandle,
// HandleTurnState: the open turn folded from the backend's hint of where
// it starts, which OpenTurn checks against the log, and the closers of
// recovery.Closers), ResumeMany (many sessions resumed with one flush),
// and the surface-rules checker a backend gives its handles when its
// SurfaceRules option is on (SurfaceRulesChecker).
//
// storekit does no I/O of its own: it works through the handles it is
// given.
package storekit

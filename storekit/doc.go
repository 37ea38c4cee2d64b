// Package storekit is what a backend of the store contract builds from
// store and recovery together, so that every backend (engine,
// backend/jetstream) shares one copy: Resume and Inspect through a handle
// (ResumeHandle, InspectHandle: the log read whole and the closers of its
// interrupted turn) and the surface-rules checker a backend gives its
// handles when its SurfaceRules option is on (SurfaceRulesChecker).
//
// storekit does no I/O of its own: it works through the handles it is
// given.
package storekit

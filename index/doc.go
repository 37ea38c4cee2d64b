// Package index is the bbolt-backed catalog of a store: (session, seq) to
// segment locations, per-session metadata and revisions, the segment list and
// the checkpoint up to which segments have been indexed. The segments stay
// the source of truth; the index is updated in the background and rebuilt
// from segments after its checkpoint on open.
//
// index imports event, internal/base and go.etcd.io/bbolt only. It must not
// import segment, handle, engine, recovery or plan. See
// docs/DESIGN.md#layering.
package index

package store

import (
	"context"
	"time"
)

// TombstonePurger is a backend that keeps a marker of each deleted
// session after Delete returns (backend/jetstream: a tombstone message
// per deleted ID, forever) and can drop the markers older than a grace
// period. Retain calls it (through Unwrap) when RetainPolicy asks for it.
// The local engine has none: compaction reclaims its tombstones.
type TombstonePurger interface {
	// PurgeTombstones drops the markers of sessions deleted more than
	// olderThan ago (by the time the backend stored the marker) whose ID
	// was not created again, keeping every rule Delete promises: a
	// session created again under the ID gets revisions the old one never
	// had, and no event of the old one reappears. With dryRun it only
	// counts them.
	PurgeTombstones(ctx context.Context, olderThan time.Duration, dryRun bool) (TombstoneReport, error)
}

// TombstoneReport is what PurgeTombstones did (or, dry, would do).
type TombstoneReport struct {
	// Purged are the IDs whose marker was dropped (dry: would be).
	Purged []string
	// Young counts the markers within the grace period, kept.
	Young int
	// Held are the IDs skipped because a writer or a creator held their
	// lease (the ID is being created again, or deleted on another host).
	Held []string
}

package engine

import (
	"slices"
	"testing"
)

// skipOwn passes over this process's own frames from the follow position
// on, no further than durable, and stops at the first frame it did not
// place (a gap: another process's frames, or a seal): the follower reads
// those.
func TestSkipOwn(t *testing.T) {
	db := &DB{}
	db.mu.own = []ownFrame{{10, 20}, {20, 30}, {40, 50}, {50, 60}}
	for _, c := range []struct {
		pos, d, want uint64
		left         []ownFrame
	}{
		{10, 25, 20, []ownFrame{{20, 30}, {40, 50}, {50, 60}}}, // {20, 30} is not durable yet
		{20, 100, 30, []ownFrame{{40, 50}, {50, 60}}},          // 30-40: not ours
		{45, 100, 45, []ownFrame{{50, 60}}},                    // passed by a scan: dropped
		{50, 60, 60, []ownFrame{}},
		{60, 70, 60, []ownFrame{}},
	} {
		if got := db.skipOwn(c.pos, c.d); got != c.want || !slices.Equal(db.mu.own, c.left) {
			t.Errorf("skipOwn(%d, %d) = %d leaving %v, want %d leaving %v", c.pos, c.d, got, db.mu.own, c.want, c.left)
		}
	}
}

package segment

import (
	"testing"
)

func TestNames(t *testing.T) {
	if got := Name(0x1f); got != "000000000000001f.seg" {
		t.Errorf("Name = %q", got)
	}
	for _, bad := range []string{"1f.seg", "000000000000001F.seg", "000000000000001f.seg.tmp", "x000000000000001.seg"} {
		if _, ok := ParseName(bad); ok {
			t.Errorf("ParseName(%q) accepted", bad)
		}
	}
	if id, ok := ParseName(Name(1 << 60)); !ok || id != 1<<60 {
		t.Errorf("round trip: %d %v", id, ok)
	}
}

// Concurrent appends and syncs across many rolls: every frame lands once,
// in a consecutive run of segments of which all but the last are sealed,
// and each session's seqs are contiguous in segment order.

package index

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkApply: one checkpoint of 8192 one-event frames interleaved
// across 64 sessions, as group-committed flushes of many sessions leave
// them; the index grows by 8192 frames per op.
func BenchmarkApply(b *testing.B) {
	x, err := Open(filepath.Join(b.TempDir(), "index"), &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	const sessions, frames = 64, 8192
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%04d", i)
	}
	var next [sessions]uint64
	off := int64(64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		u := &Update{Frames: make([]SessionFrame, frames)}
		for j := range u.Frames {
			s := j % sessions
			u.Frames[j] = SessionFrame{ID: ids[s], Frame: Frame{FirstSeq: next[s], Count: 1, Segment: 1, Offset: off, Size: 344}}
			next[s]++
			off += 344
		}
		u.Checkpoint = Checkpoint{Segment: 1, Offset: off}
		if err := x.Apply(u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
}

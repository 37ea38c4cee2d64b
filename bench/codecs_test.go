package bench

import (
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
)

// BenchmarkTurnCodecs compresses the agent workload's turns, one frame per
// session and turn as a turn's flush writes it, with each codec the
// engine could put on that path: zstd with a dictionary (Options.Dense),
// S2 with the dictionary's S2 form (the default), and, for the record,
// zstd and S2 without one. The dictionary is trained on the first 800
// turns, as a writer's would be; the next ones are compressed. It
// reports stored/raw and µs per frame and per KiB (docs/FORMAT.md,
// Codecs).
func BenchmarkTurnCodecs(b *testing.B) {
	c := testCorpus(b)
	var turns [][]event.Event
	var raws [][]byte
	for i := range 16 {
		seq := uint64(0)
		for t := range 200 {
			evs := AgentTurn(c, i, t, seq)
			seq += uint64(len(evs))
			e, err := segment.Encoder{Uncompressed: true}.Events("agent-session", evs[0].Seq, evs)
			if err != nil {
				b.Fatal(err)
			}
			turns = append(turns, evs)
			raws = append(raws, append([]byte(nil), e.Raw()...))
		}
	}
	d, err := segment.TrainDict(99, 1, raws[:800], 128<<10)
	if err != nil {
		b.Fatal(err)
	}
	test := turns[800:]
	var rawN int
	for _, r := range raws[800:] {
		rawN += len(r)
	}
	for _, c := range []struct {
		name string
		enc  segment.Encoder
	}{
		{"codec=zstd+dict", segment.Encoder{Dict: d, MinCompress: -1}},
		{"codec=s2+dict", segment.Encoder{Dict: d, Fast: true}},
		{"codec=zstd", segment.Encoder{MinCompress: -1}},
		{"codec=s2", segment.Encoder{Fast: true, MinCompress: -1}},
		{"codec=none", segment.Encoder{Uncompressed: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var stored int
			for b.Loop() {
				stored = 0
				for _, evs := range test {
					e, err := c.enc.Events("agent-session", evs[0].Seq, evs)
					if err != nil {
						b.Fatal(err)
					}
					stored += e.StoredLen()
					e.Release()
				}
			}
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1000
			b.ReportMetric(float64(stored)/float64(rawN), "stored/raw")
			b.ReportMetric(per/float64(len(test)), "µs/frame")
			b.ReportMetric(per/(float64(rawN)/1024), "µs/KiB")
			b.ReportMetric(0, "ns/op")
		})
	}
	// (S2's better mode, without a dictionary, which the engine does not
	// use: its ratio for the cost.)
	b.Run("codec=s2-better", func(b *testing.B) {
		var stored int
		for b.Loop() {
			stored = 0
			for _, r := range raws[800:] {
				stored += len(s2.EncodeBetter(nil, r))
			}
		}
		per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1000
		b.ReportMetric(float64(stored)/float64(rawN), "stored/raw")
		b.ReportMetric(per/float64(len(test)), "µs/frame")
		b.ReportMetric(0, "ns/op")
	})
}

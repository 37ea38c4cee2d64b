package peers

import (
	"context"
	"testing"

	"github.com/seglog/seglog/bench"
)

// Every peer runs every workload at a small size and reads back what it
// wrote.
func TestAllPeersSmall(t *testing.T) {
	cfg := Config{Durable: 40, Sessions: 4, Bulk: 2500, Replay: 2500, EventSize: 300, AgentSessions: 3, AgentTurns: 2}
	for _, p := range All() {
		for _, w := range Workloads {
			r := Run(context.Background(), p, w, cfg, t.TempDir())
			if r.Err != "" {
				t.Errorf("%s %s: %s", p.Name, w, r.Err)
				continue
			}
			if r.Events <= 0 || r.Seconds <= 0 || r.InputBytes <= 0 {
				t.Errorf("%s %s: result %+v", p.Name, w, r)
			}
			// S5 replays every session before Close (a count short of the
			// events flushed is an error above); its figures are all there.
			// The workloads that time each operation have its distribution.
			if timed := w == S1 || w == S2 || w == S5; timed != (len(r.Latency) == len(bench.DistributionPoints)) {
				t.Errorf("%s %s: latency distribution %+v", p.Name, w, r.Latency)
			}
			if w == S5 && (r.WrittenBytes <= 0 || r.DiskBytes <= 0 || r.RawJSONBytes <= 0 || r.P50us <= 0 || r.P99us < r.P50us) {
				t.Errorf("%s %s: result %+v", p.Name, w, r)
			}
		}
	}
}

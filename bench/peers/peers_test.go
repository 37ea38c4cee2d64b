package peers

import (
	"context"
	"testing"
)

// Every peer runs every workload at a small size and reads back what it
// wrote.
func TestAllPeersSmall(t *testing.T) {
	cfg := Config{Durable: 40, Sessions: 4, Bulk: 2500, Replay: 2500, EventSize: 300}
	for _, p := range All() {
		for _, w := range []Workload{S1, S2, S3, S4} {
			r := Run(context.Background(), p, w, cfg, t.TempDir())
			if r.Err != "" {
				t.Errorf("%s %s: %s", p.Name, w, r.Err)
				continue
			}
			if r.Events <= 0 || r.Seconds <= 0 || r.InputBytes <= 0 {
				t.Errorf("%s %s: result %+v", p.Name, w, r)
			}
		}
	}
}

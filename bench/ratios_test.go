package bench

import (
	"context"
	"testing"
)

// TestRatioBounds is the short guard of the ratios that are no timing:
// small sizes, generous bounds that only a real regression breaks
// (compression off, preallocation that does not grow with the data). The
// timing ratios (durable p50 against the raw fdatasync, the group-commit
// gain, events/s against the references) vary with the machine's load:
// the regression guard (bench/cmd/regress) compares them with the
// baseline, and engine's TestFlushSyncsOnce and TestGroupCommitSharesSyncs
// check what they stand for by counting fdatasyncs.
func TestRatioBounds(t *testing.T) {
	r, err := MeasureRatios(context.Background(), t.TempDir(), RatioConfig{Durable: 200, Sessions: 16, Bulk: 20_000, AgentTurns: 3, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ratios: %+v", r)
	if r.DiskPerInput > 0.6 {
		t.Errorf("bulk data takes %.2f bytes on disk per input byte: compression is not working", r.DiskPerInput)
	}
	if r.AgentWrittenPerRaw <= 0 || r.AgentWrittenPerRaw > 0.6 {
		t.Errorf("the agent-host turns take %.2f bytes written per raw JSON byte: compression is not working", r.AgentWrittenPerRaw)
	}
	if r.AgentRestPerRaw <= 0 || r.AgentRestPerRaw > 4 {
		t.Errorf("the agent-host store takes %.2f bytes at rest per raw JSON byte: preallocation is not growing with the data", r.AgentRestPerRaw)
	}
	// Each timing ratio is measured (a workload that failed leaves 0).
	for name, v := range map[string]float64{"durable p50 vs raw": r.DurableP50VsRaw, "group commit gain": r.GroupCommitGain,
		"agent host vs reference": r.AgentVsReference, "bulk load vs JSON lines": r.BulkVsJSONL} {
		if !(v > 0) {
			t.Errorf("%s: %v, want a ratio", name, v)
		}
	}
}

func TestRegressionsCompares(t *testing.T) {
	base := Ratios{DurableP50VsRaw: 1.0, GroupCommitGain: 10, DiskPerInput: 0.33, AgentWrittenPerRaw: 0.25, AgentRestPerRaw: 0.5, AgentVsReference: 0.8, BulkVsJSONL: 1.2}
	if got := Regressions(base, Ratios{DurableP50VsRaw: 1.1, GroupCommitGain: 9, DiskPerInput: 0.35, AgentWrittenPerRaw: 0.28, AgentRestPerRaw: 0.55, AgentVsReference: 0.7, BulkVsJSONL: 1.0}, 0.2); len(got) != 0 {
		t.Errorf("within tolerance flagged: %v", got)
	}
	if got := Regressions(base, Ratios{DurableP50VsRaw: 1.3, GroupCommitGain: 7, DiskPerInput: 0.5, AgentWrittenPerRaw: 0.31, AgentRestPerRaw: 0.7, AgentVsReference: 0.6, BulkVsJSONL: 0.9}, 0.2); len(got) != 7 {
		t.Errorf("7 regressions, %d flagged: %v", len(got), got)
	}
	// A baseline from before the agent-host and bulk ratios does not
	// compare them.
	base.AgentWrittenPerRaw, base.AgentVsReference, base.BulkVsJSONL = 0, 0, 0
	if got := Regressions(base, Ratios{DurableP50VsRaw: 1.0, GroupCommitGain: 10, DiskPerInput: 0.33, AgentWrittenPerRaw: 0.9}, 0.2); len(got) != 0 {
		t.Errorf("an untracked ratio flagged: %v", got)
	}
}

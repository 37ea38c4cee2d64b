package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Ratios are the figures the regression guard tracks: each is a ratio of
// two workloads measured in the same run, so that a noisy machine moves
// both sides together.
type Ratios struct {
	// DurableP50VsRaw is the durable single-session p50 over the raw
	// write+fdatasync p50 (lower is better; 1.0 is the physical limit).
	DurableP50VsRaw float64 `json:"durable_p50_vs_raw"`
	// GroupCommitGain is the events/s of Sessions concurrent durable
	// sessions over one session's (higher is better).
	GroupCommitGain float64 `json:"group_commit_gain"`
	// DiskPerInput is bulk-load bytes on disk over bytes of input (lower
	// is better).
	DiskPerInput float64 `json:"disk_per_input"`
	// AgentWrittenPerRaw is the bytes the agent-host workload (AgentHost)
	// writes over its events' raw JSON bytes (lower is better): the
	// compression of a host's turns, flushed one at a time. 0 in a
	// baseline: not tracked (a baseline from before it).
	AgentWrittenPerRaw float64 `json:"agent_written_per_raw,omitempty"`
	// AgentRestPerRaw is the bytes the agent-host workload's store takes
	// at rest (its files after close: the segments, which the last
	// close trims of their preallocated zeros, and the index, which it
	// compacts, included) over its events' raw JSON bytes (lower is
	// better): the footprint. 0 in a baseline: not tracked.
	AgentRestPerRaw float64 `json:"agent_rest_per_raw,omitempty"`
	// AgentVsReference is the agent-host workload's events/s over the
	// same turns' on the reference model (a JSON-lines file per session,
	// write + fdatasync per flush), run beside it (higher is better). 0 in
	// a baseline: not tracked.
	AgentVsReference float64 `json:"agent_vs_reference,omitempty"`
	// BulkVsJSONL is the bulk load's events/s over the same batches'
	// written as JSON lines to one file (the reference model, a write per
	// batch, one fdatasync at the end), run beside it (higher is better).
	// 0 in a baseline: not tracked.
	BulkVsJSONL float64 `json:"bulk_vs_jsonl,omitempty"`
}

// RatioConfig sizes MeasureRatios.
type RatioConfig struct {
	Durable  int // durable appends per run
	Sessions int // sessions of the group-commit run
	Bulk     int // events of the bulk load
	// AgentTurns is the turns of each of the agent-host run's 16
	// sessions; 0 skips it (AgentWrittenPerRaw stays 0).
	AgentTurns int
	Count      int // runs; the medians are reported
}

// MeasureRatios runs the workloads Count times under root and returns the
// median of each ratio.
func MeasureRatios(ctx context.Context, root string, c RatioConfig) (Ratios, error) {
	var corpus *Corpus
	if c.AgentTurns > 0 {
		var err error
		if corpus, err = LoadCorpus(""); err != nil {
			return Ratios{}, err
		}
	}
	var p50, gain, disk, agent, rest, vsRef, vsJSONL []float64
	for i := range max(c.Count, 1) {
		dir := func(name string) (string, error) {
			d := filepath.Join(root, fmt.Sprintf("%s-%d", name, i))
			return d, os.MkdirAll(d, 0o755)
		}
		run := func(name string, cfg Config) (Result, error) {
			d, err := dir(name)
			if err != nil {
				return Result{}, err
			}
			cfg.Dir = d
			return Run(ctx, cfg)
		}
		raw, err := run("raw", Config{Workload: RawSync, Events: c.Durable})
		if err != nil {
			return Ratios{}, err
		}
		one, err := run("one", Config{Workload: Durable, Events: c.Durable, Sessions: 1})
		if err != nil {
			return Ratios{}, err
		}
		many, err := run("many", Config{Workload: Durable, Events: 4 * c.Durable, Sessions: c.Sessions})
		if err != nil {
			return Ratios{}, err
		}
		bulk, err := run("bulk", Config{Workload: Bulk, Events: c.Bulk})
		if err != nil {
			return Ratios{}, err
		}
		bulkRef, err := run("bulk-jsonl", Config{Workload: Bulk, Backend: "jsonl", Events: c.Bulk})
		if err != nil {
			return Ratios{}, err
		}
		vsJSONL = append(vsJSONL, bulk.EventsPerSec()/bulkRef.EventsPerSec())
		p50 = append(p50, float64(one.P50)/float64(raw.P50))
		gain = append(gain, many.EventsPerSec()/one.EventsPerSec())
		disk = append(disk, float64(bulk.DiskBytes)/float64(bulk.InputBytes))
	}
	// The agent-host runs after the timed ones, which they would disturb
	// (their files' write-back).
	for i := range max(c.Count, 1) {
		if c.AgentTurns <= 0 {
			break
		}
		d := filepath.Join(root, fmt.Sprintf("agent-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Ratios{}, err
		}
		a, err := Run(ctx, Config{Workload: AgentHost, Dir: d, Sessions: 16, Turns: c.AgentTurns, Corpus: corpus})
		if err != nil {
			return Ratios{}, err
		}
		agent = append(agent, a.WrittenPerRaw())
		rest = append(rest, float64(a.RestBytes)/float64(max(a.RawJSONBytes, 1)))
		d = filepath.Join(root, fmt.Sprintf("agent-jsonl-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Ratios{}, err
		}
		ref, err := Run(ctx, Config{Workload: AgentHost, Backend: "jsonl", Dir: d, Sessions: 16, Turns: c.AgentTurns, Corpus: corpus})
		if err != nil {
			return Ratios{}, err
		}
		vsRef = append(vsRef, a.EventsPerSec()/ref.EventsPerSec())
	}
	r := Ratios{DurableP50VsRaw: median(p50), GroupCommitGain: median(gain), DiskPerInput: median(disk), BulkVsJSONL: median(vsJSONL)}
	if len(agent) > 0 {
		r.AgentWrittenPerRaw = median(agent)
		r.AgentRestPerRaw = median(rest)
		r.AgentVsReference = median(vsRef)
	}
	return r, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Regressions compares got with the accepted baseline and describes every
// ratio that is worse by more than tolerance (0.2 = 20%); a ratio the
// baseline does not have (0) is not compared.
func Regressions(baseline, got Ratios, tolerance float64) []string {
	var out []string
	if got.DurableP50VsRaw > baseline.DurableP50VsRaw*(1+tolerance) {
		out = append(out, fmt.Sprintf("durable p50 vs raw: %.2f, baseline %.2f", got.DurableP50VsRaw, baseline.DurableP50VsRaw))
	}
	if got.GroupCommitGain < baseline.GroupCommitGain*(1-tolerance) {
		out = append(out, fmt.Sprintf("group commit gain: %.2fx, baseline %.2fx", got.GroupCommitGain, baseline.GroupCommitGain))
	}
	if got.DiskPerInput > baseline.DiskPerInput*(1+tolerance) {
		out = append(out, fmt.Sprintf("disk bytes per input byte: %.3f, baseline %.3f", got.DiskPerInput, baseline.DiskPerInput))
	}
	if baseline.AgentWrittenPerRaw > 0 && got.AgentWrittenPerRaw > baseline.AgentWrittenPerRaw*(1+tolerance) {
		out = append(out, fmt.Sprintf("agent-host bytes written per raw JSON byte: %.3f, baseline %.3f", got.AgentWrittenPerRaw, baseline.AgentWrittenPerRaw))
	}
	if baseline.AgentRestPerRaw > 0 && got.AgentRestPerRaw > baseline.AgentRestPerRaw*(1+tolerance) {
		out = append(out, fmt.Sprintf("agent-host bytes at rest per raw JSON byte: %.3f, baseline %.3f", got.AgentRestPerRaw, baseline.AgentRestPerRaw))
	}
	if baseline.AgentVsReference > 0 && got.AgentVsReference < baseline.AgentVsReference*(1-tolerance) {
		out = append(out, fmt.Sprintf("agent-host events/s vs the JSONL reference: %.2fx, baseline %.2fx", got.AgentVsReference, baseline.AgentVsReference))
	}
	if baseline.BulkVsJSONL > 0 && got.BulkVsJSONL < baseline.BulkVsJSONL*(1-tolerance) {
		out = append(out, fmt.Sprintf("bulk load events/s vs JSON lines: %.2fx, baseline %.2fx", got.BulkVsJSONL, baseline.BulkVsJSONL))
	}
	return out
}

// Command regress is seglog's benchmark regression guard: it measures the
// tracked ratios (bench.MeasureRatios, medians of 5 runs at full size) and
// fails if any is more than 20% worse than bench/baseline.json. Run it from
// the repository's root: the agent-host run reads its corpus there.
//
//	go run ./bench/cmd/regress            # compare
//	go run ./bench/cmd/regress -update    # accept the new figures
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/seglog/seglog/bench"
)

func main() {
	update := flag.Bool("update", false, "write the measured ratios to the baseline")
	baseline := flag.String("baseline", "bench/baseline.json", "the accepted ratios")
	count := flag.Int("count", 5, "runs; medians are compared")
	flag.Parse()
	dir, err := os.MkdirTemp("", "seglog-regress-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	got, err := bench.MeasureRatios(context.Background(), dir, bench.RatioConfig{Durable: 2000, Sessions: 64, Bulk: 200_000, AgentTurns: 20, Count: *count})
	if err != nil {
		fail(err)
	}
	fmt.Printf("measured (medians of %d): durable p50 vs raw %.2f, group commit gain %.2fx, disk per input byte %.3f, bulk load vs JSON lines %.2fx, agent-host written per raw JSON byte %.3f, at rest %.3f, events/s vs the JSONL reference %.2fx\n",
		*count, got.DurableP50VsRaw, got.GroupCommitGain, got.DiskPerInput, got.BulkVsJSONL, got.AgentWrittenPerRaw, got.AgentRestPerRaw, got.AgentVsReference)
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(*baseline, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
		fmt.Println("baseline updated:", *baseline)
		return
	}
	b, err := os.ReadFile(*baseline)
	if err != nil {
		fail(err)
	}
	var base bench.Ratios
	if err := json.Unmarshal(b, &base); err != nil {
		fail(err)
	}
	if rs := bench.Regressions(base, got, 0.2); len(rs) > 0 {
		for _, r := range rs {
			fmt.Println("REGRESSION:", r)
		}
		os.Exit(1)
	}
	fmt.Println("no regression against", *baseline)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "regress:", err)
	os.Exit(2)
}

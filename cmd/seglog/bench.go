package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/bench"
)

type benchArgs struct {
	dir      string
	jsonOut  string
	plot     string
	peers    bool
	events   int // bulk load and replay size
	durable  int // durable single appends (and raw fdatasyncs)
	sessions int // concurrent sessions
	size     int // bytes per event
	backend  string
}

func newBenchCmd(stdout, stderr io.Writer, dir *string) *cobra.Command {
	var a benchArgs
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure durable append, group commit, bulk load and replay on a temporary store (or --dir)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dir") {
				a.dir = *dir
			}
			return benchCmd(a, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&a.events, "events", 200_000, "events in the bulk load and the replay")
	fs.IntVar(&a.durable, "durable", 2000, "durable single appends (and as many raw fdatasyncs)")
	fs.IntVar(&a.sessions, "sessions", 64, "concurrent sessions in the group-commit run")
	fs.IntVar(&a.size, "size", 300, "bytes of JSON per event")
	fs.StringVar(&a.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&a.plot, "plot", "", "also draw throughput and latency per workload into this PNG file")
	fs.BoolVar(&a.peers, "peers", false, "then run the same workloads on the peers (bench/peers; needs the source tree and Go)")
	fs.StringVar(&a.backend, "backend", "local", "local, or jetstream: the workloads on the local engine and on backend/jetstream (an embedded NATS server), side by side")
	return cmd
}

func benchCmd(a benchArgs, stdout, stderr io.Writer) error {
	if a.events < 1 || a.durable < 1 || a.sessions < 1 || a.size < 64 {
		return usageError{errors.New("--events, --durable and --sessions must be positive and --size at least 64")}
	}
	if a.backend != "local" && a.backend != "jetstream" {
		return usageError{fmt.Errorf("--backend %q: local or jetstream", a.backend)}
	}
	if a.dir == "" {
		d, err := os.MkdirTemp("", "seglog-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		a.dir = d
	} else if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return err
	}
	if a.backend == "jetstream" {
		return runBenchJetStream(stdout, stderr, a)
	}
	if err := runBench(stdout, stderr, a); err != nil {
		return err
	}
	if !a.peers {
		return nil
	}
	fmt.Fprintln(stdout, "\npeers (go run ./bench/peers/cmd/peers -quick), same machine, this run:")
	cmd := exec.Command("go", "run", "./cmd/peers", "-quick", "-dir", a.dir)
	cmd.Dir = "bench/peers"
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd.Run()
}

func runBench(w, progress io.Writer, a benchArgs) error {
	ctx := context.Background()
	runs := []struct {
		name string
		cfg  bench.Config
	}{
		{"raw write+fdatasync (the limit)", bench.Config{Workload: bench.RawSync, Events: a.durable}},
		{"durable append+flush, 1 session", bench.Config{Workload: bench.Durable, Events: a.durable, Sessions: 1}},
		{fmt.Sprintf("durable append+flush, %d sessions", a.sessions), bench.Config{Workload: bench.Durable, Events: 4 * a.durable, Sessions: a.sessions}},
		{"bulk append, batches of 1000, one flush", bench.Config{Workload: bench.Bulk, Events: a.events}},
		{"replay one session, decode every event", bench.Config{Workload: bench.Replay, Events: a.events}},
	}
	fmt.Fprintf(w, "seglog bench: engine on %s, %d-byte events\n\n", a.dir, a.size)
	results := make([]bench.Result, len(runs))
	for i, run := range runs {
		cfg := run.cfg
		cfg.EventSize = a.size
		cfg.Dir = filepath.Join(a.dir, fmt.Sprintf("run-%d", i))
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return err
		}
		total := cfg.Events
		last := time.Now()
		cfg.Progress = func(done int) {
			if time.Since(last) > 200*time.Millisecond {
				last = time.Now()
				fmt.Fprintf(progress, "\r%-44s %3d%%", run.name, min(100, done*100/max(total, 1)))
			}
		}
		r, err := bench.Run(ctx, cfg)
		fmt.Fprintf(progress, "\r%-44s done\n", run.name)
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		results[i] = r
	}
	raw, single, group, bulk := results[0], results[1], results[2], results[3]
	notes := []string{
		"",
		fmt.Sprintf("p50 %.2fx the raw limit", ratio(single.P50, raw.P50)),
		fmt.Sprintf("%.1fx the events/s of 1 session (group commit)", group.EventsPerSec()/single.EventsPerSec()),
		fmt.Sprintf("%.0f bytes on disk per event (%.1fx smaller than the input)", float64(bulk.DiskBytes)/float64(bulk.Events), float64(bulk.InputBytes)/float64(max(bulk.DiskBytes, 1))),
		"",
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tevents\tevents/s\tMB/s\tp50 µs\tp99 µs\t\tnote")
	for i, run := range runs {
		r := results[i]
		p50, p99 := "-", "-"
		if r.P50 > 0 {
			p50, p99 = fmt.Sprintf("%.0f", us(r.P50)), fmt.Sprintf("%.0f", us(r.P99))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t\t%s\n", run.name, r.Events, r.EventsPerSec(), r.MBPerSec(), p50, p99, notes[i])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if a.plot != "" {
		tput := bench.Panel{Title: "throughput", Unit: "events/s", Log: true}
		latency := bench.Panel{Title: "p50 latency of one durable append+flush", Unit: "us"}
		for i, run := range runs {
			tput.Bars = append(tput.Bars, bench.Bar{Label: run.name, Value: results[i].EventsPerSec()})
			if results[i].P50 > 0 {
				latency.Bars = append(latency.Bars, bench.Bar{Label: run.name, Value: us(results[i].P50)})
			}
		}
		f, err := os.Create(a.plot)
		if err != nil {
			return err
		}
		err = bench.PlotPNG(f, []bench.Panel{tput, latency})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if a.jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(a.jsonOut, b, 0o644)
	}
	return nil
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }
func us(d time.Duration) float64       { return float64(d) / 1e3 }

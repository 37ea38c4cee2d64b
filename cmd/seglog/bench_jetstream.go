package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/backend/jetstream"
	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/bench/chart"
	"github.com/seglog/seglog/store"
)

// smallSessions is the number of sessions of the jetstream bench's replay
// of many short sessions.
const smallSessions = 200

// runBenchJetStream runs the durable, bulk and replay workloads on the
// local engine and on backend/jetstream against an embedded NATS server
// (one node, fsync before every acknowledgement) in a.dir, and prints them
// side by side (on w; the rows as JSON on stdout if --json asks for them
// there).
func runBenchJetStream(w, stdout io.Writer, prog *progress, a benchArgs) error {
	ctx := context.Background()
	srv, err := embedded.Start(filepath.Join(a.dir, "nats"))
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	openJS := func(dir string) (bench.Store, error) {
		name := strings.ToUpper(strings.ReplaceAll(filepath.Base(dir), "-", "_"))
		st, err := jetstream.Open(ctx, nc, &jetstream.Options{Stream: "BENCH_" + name, Prefix: "bench." + strings.ToLower(name), LeaseBucket: "BENCH_LEASES_" + name, Create: true})
		if err != nil {
			return nil, err
		}
		return store.Wrap[*jetstream.Handle](st), nil
	}
	runs := []struct {
		name string
		cfg  bench.Config
	}{
		{"durable append+flush, 1 session", bench.Config{Workload: bench.Durable, Events: a.durable, Sessions: 1}},
		{fmt.Sprintf("durable append+flush, %d sessions", a.sessions), bench.Config{Workload: bench.Durable, Events: 4 * a.durable, Sessions: a.sessions}},
		{"bulk append, batches of 1000, one flush", bench.Config{Workload: bench.Bulk, Events: a.events}},
		{"replay one session, decode every event", bench.Config{Workload: bench.Replay, Events: a.events}},
		// Sessions as an agent's turns leave them: many short messages.
		{fmt.Sprintf("replay %d sessions of %d events, flushed every 10", smallSessions, max(a.events/10/smallSessions, 1)),
			bench.Config{Workload: bench.Replay, Events: max(a.events/10, smallSessions), Sessions: smallSessions, Batch: 10}},
	}
	fmt.Fprintf(w, "seglog bench --backend jetstream: the local engine and JetStream (embedded nats-server, 1 node, sync always) on %s, %d-byte events\n\n", a.dir, a.size)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tlocal ev/s\tlocal p50 µs\tjetstream ev/s\tjetstream p50 µs\tlocal/jetstream\t")
	var rows []benchRow
	bars := &chart.Bars{Title: "seglog bench --backend jetstream: events/s (log scale)", Unit: "events/s", Log: true, Horizontal: true,
		Series: []chart.Series{{Name: "local"}, {Name: "jetstream"}}}
	for i, run := range runs {
		var res [2]bench.Result
		for b, open := range []func(string) (bench.Store, error){nil, openJS} {
			cfg := run.cfg
			cfg.EventSize = a.size
			cfg.Open = open
			cfg.Dir = filepath.Join(a.dir, fmt.Sprintf("js-run-%d-%d", i, b))
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				return err
			}
			label := run.name + [2]string{" (local)", " (jetstream)"}[b]
			task := prog.start(label, cfg.Events, "events", true)
			cfg.Progress = task.set
			r, err := bench.Run(ctx, cfg)
			task.end(err != nil)
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			r.Backend = [2]string{"local", "jetstream"}[b]
			res[b] = r
			rows = append(rows, benchRow{Name: label, Result: r})
			bars.Series[b].Values = append(bars.Series[b].Values, r.EventsPerSec())
		}
		bars.Groups = append(bars.Groups, run.name)
		p50 := func(r bench.Result) string {
			if r.P50 == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", us(r.P50))
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.0f\t%s\t%.1fx\t\n", run.name, res[0].EventsPerSec(), p50(res[0]), res[1].EventsPerSec(), p50(res[1]), res[0].EventsPerSec()/res[1].EventsPerSec())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if a.plot != "" {
		if err := chart.WriteFile(a.plot, bars, latencyLines("seglog bench --backend jetstream", rows)); err != nil {
			return err
		}
	}
	return writeBenchJSON(stdout, a.jsonOut, rows)
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/bench/chart"
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

	procs        int           // worker processes of the multi-process run; 0 skips it
	procSessions int           // sessions of each
	multiTime    time.Duration // length of each multi-process run
	follow       int           // events of the follow-latency run; 0 skips it
	followEvery  time.Duration // between two of its flushes
	workerProf   string        // prefix of the workers' CPU profiles

	agentSessions int // sessions of the agent-host rows
	agentTurns    int // turns of each; 0 skips the rows

	tmpfs string // a second directory for the agent-host rows (a tmpfs: no disk in the way); "" skips them

	searchSessions int // sessions of the search row's store; 0 skips the row
	searchQueries  int // two-word queries (and as many phrases) of the search row

	killRounds int  // rounds of the window-durability rows; 0 skips them
	keep       bool // keep the stores (under --dir) for a look afterwards
}

// The workers of the multi-process workloads are this binary started
// again (bench.WorkerEnv set): they run before anything else.
func init() { bench.ServeWorker() }

func newBenchCmd(stdout, stderr io.Writer, dir *string) *cobra.Command {
	var a benchArgs
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure the engine: durable appends, group commit, bulk load, replay, processes, agent host, search, window durability",
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
	fs.StringVar(&a.jsonOut, "json", "", "also write the rows as JSON to this file; --json alone (or --json -): print them on stdout, and the table on stderr (docs: docs/CLI.md, CLI output)")
	fs.Lookup("json").NoOptDefVal = "-"
	fs.StringVar(&a.plot, "plot", "", "also draw a PNG to this file: events/s per workload (bars) and each workload's latency distribution (lines)")
	fs.BoolVar(&a.peers, "peers", false, "then run the same workloads on the peers (bench/peers; needs the source tree and Go)")
	fs.IntVar(&a.procs, "procs", 4, "worker processes writing one store at once in the multi-process run (0: skip it)")
	fs.IntVar(&a.procSessions, "proc-sessions", 16, "sessions of each worker process; the one-process comparison runs procs x proc-sessions")
	fs.DurationVar(&a.multiTime, "multi-time", 4*time.Second, "length of each multi-process run")
	fs.IntVar(&a.follow, "follow", 2000, "events of the follow-latency run, flush in one process to Wait wake-up in another (0: skip it)")
	fs.DurationVar(&a.followEvery, "follow-every", 3*time.Millisecond, "time between two flushes of the follow-latency run")
	fs.StringVar(&a.workerProf, "worker-cpuprofile", "", "write each worker process's CPU profile to PREFIX-<row>-<worker>.pprof")
	fs.IntVar(&a.agentSessions, "agent-sessions", 16, "sessions of the agent-host rows (turns with streamed deltas, tool calls and a flush per turn)")
	fs.IntVar(&a.agentTurns, "agent-turns", 20, "turns of each agent-host session (0: skip the rows)")
	fs.StringVar(&a.tmpfs, "tmpfs", "", "also run the agent-host rows with their stores under this directory, e.g. /dev/shm (a tmpfs: the engine's CPU per event, with no disk in the way); a seglog-bench-* directory is made in it and removed at the end")
	fs.BoolVar(&a.keep, "keep", false, "keep the stores the rows wrote (in the seglog-bench-* directory made under --dir) instead of removing them")
	fs.IntVar(&a.killRounds, "kill-rounds", 4, "rounds of the window-durability rows: agent hosts that flush only at turn end, killed with SIGKILL 0.5-1.5 s in, on the engine and on the jsonl reference (0: skip them)")
	fs.IntVar(&a.searchSessions, "search-sessions", 500, "sessions of 2 agent turns (about 122 events each) in the search row's store: the search package's index built from the change feed, its bytes, two-word and phrase queries (issue 46's S6; 10000 is the issue's size; 0: skip the row)")
	fs.IntVar(&a.searchQueries, "search-queries", 100, "two-word queries (and as many phrases) of the search row")
	fs.StringVar(&a.backend, "backend", "local", "local, or jetstream: the workloads on the local engine and on backend/jetstream (an embedded NATS server), side by side")
	return cmd
}

func benchCmd(a benchArgs, stdout, stderr io.Writer) error {
	if a.events < 1 || a.durable < 1 || a.sessions < 1 || a.size < 64 {
		return usageError{errors.New("--events, --durable and --sessions must be positive and --size at least 64")}
	}
	if a.agentTurns < 0 || (a.agentTurns > 0 && a.agentSessions < 1) {
		return usageError{errors.New("--agent-turns must be at least 0 and --agent-sessions positive")}
	}
	if a.killRounds < 0 {
		return usageError{errors.New("--kill-rounds must be at least 0")}
	}
	if a.searchSessions < 0 || (a.searchSessions > 0 && a.searchQueries < 1) {
		return usageError{errors.New("--search-sessions must be at least 0 and --search-queries positive")}
	}
	if a.procs < 0 || a.follow < 0 || (a.procs > 0 && (a.procSessions < 1 || a.multiTime <= 0)) || (a.follow > 0 && a.followEvery <= 0) {
		return usageError{errors.New("--procs and --follow must be at least 0, --proc-sessions, --multi-time and --follow-every positive")}
	}
	if a.backend != "local" && a.backend != "jetstream" {
		return usageError{fmt.Errorf("--backend %q: local or jetstream", a.backend)}
	}
	// The stores go in a directory of their own, removed at the end: in
	// the system's temporary directory, or in --dir (which may be a
	// store: nothing of the bench's stays there).
	if a.dir != "" {
		if err := os.MkdirAll(a.dir, 0o755); err != nil {
			return err
		}
	}
	d, err := os.MkdirTemp(a.dir, "seglog-bench-")
	if err != nil {
		return err
	}
	if !a.keep {
		defer os.RemoveAll(d)
	}
	a.dir = d
	if a.tmpfs != "" {
		if a.agentTurns == 0 {
			return usageError{errors.New("--tmpfs runs the agent-host rows again: it needs --agent-turns above 0")}
		}
		t, err := os.MkdirTemp(a.tmpfs, "seglog-bench-")
		if err != nil {
			return fmt.Errorf("--tmpfs: %w", err)
		}
		if !a.keep {
			defer os.RemoveAll(t)
		}
		a.tmpfs = t
	}
	// With --json on stdout, the table goes to stderr.
	table := stdout
	if a.jsonOut == "-" {
		table = stderr
	}
	prog := newProgress(stderr)
	if a.backend == "jetstream" {
		return runBenchJetStream(table, stdout, prog, a)
	}
	if err := runBench(table, stdout, prog, a); err != nil {
		return err
	}
	if !a.peers {
		return nil
	}
	fmt.Fprintln(table, "\npeers (go run ./bench/peers/cmd/peers -quick), same machine, this run:")
	cmd := exec.Command("go", "run", "./cmd/peers", "-quick", "-dir", a.dir)
	cmd.Dir = "bench/peers"
	cmd.Stdout, cmd.Stderr = table, stderr
	return cmd.Run()
}

// joinJSONValue makes bench's "--json FILE" one argument, "--json=FILE":
// --json alone means stdout (its NoOptDefVal), so the flag parser would
// take a FILE after it as an argument. bench takes no arguments, so a word
// after --json is its file.
func joinJSONValue(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return append(out, args[i:]...)
		}
		if args[i] == "--json" && i+1 < len(args) && (args[i+1] == "-" || !strings.HasPrefix(args[i+1], "-")) {
			out = append(out, "--json="+args[i+1])
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// benchRun is a row of the table: a workload and its name.
type benchRun struct {
	name string
	cfg  bench.Config // its Dir, if set, is where its store goes in place of --dir (--tmpfs)
}

// runBench runs the workloads and prints the table on w, the rows as
// JSON on stdout if --json asks for them there, and its progress on prog:
// a bar per row on a terminal, and a line as each row ends.
func runBench(w, stdout io.Writer, prog *progress, a benchArgs) error {
	ctx := context.Background()
	runs := []benchRun{
		{"raw write+fdatasync (the limit)", bench.Config{Workload: bench.RawSync, Events: a.durable}},
		{"durable append+flush, 1 session", bench.Config{Workload: bench.Durable, Events: a.durable, Sessions: 1}},
		{fmt.Sprintf("durable append+flush, %d sessions", a.sessions), bench.Config{Workload: bench.Durable, Events: 4 * a.durable, Sessions: a.sessions}},
		{"bulk append, batches of 1000, one flush", bench.Config{Workload: bench.Bulk, Events: a.events}},
		{"replay one session, decode every event", bench.Config{Workload: bench.Replay, Events: a.events}},
	}
	multi, follow := -1, -1 // indices of the multi-process runs, if any
	if a.procs > 0 {
		multi = len(runs)
		all := a.procs * a.procSessions
		runs = append(runs,
			benchRun{fmt.Sprintf("durable append+flush, %s x %d sessions", plural(a.procs, "process", "processes"), a.procSessions),
				bench.Config{Workload: bench.MultiDurable, Procs: a.procs, Sessions: a.procSessions, Duration: a.multiTime}},
			benchRun{fmt.Sprintf("durable append+flush, 1 process x %d sessions", all),
				bench.Config{Workload: bench.MultiDurable, Procs: 1, Sessions: all, Duration: a.multiTime}},
			benchRun{fmt.Sprintf("jsonl+flock per session, %s x %d sessions", plural(a.procs, "process", "processes"), a.procSessions),
				bench.Config{Workload: bench.MultiDurable, Procs: a.procs, Sessions: a.procSessions, Duration: a.multiTime, Backend: "jsonl"}})
	}
	if a.follow > 0 {
		follow = len(runs)
		runs = append(runs, benchRun{"follow: flush to Wait wake-up, other process", bench.Config{Workload: bench.Follow, Events: a.follow, Interval: a.followEvery}})
	}
	agent := -1 // index of the agent-host rows, if any
	if a.agentTurns > 0 {
		agent = len(runs)
		name := fmt.Sprintf("agent host, %d sessions x %d turns", a.agentSessions, a.agentTurns)
		corpus, err := bench.LoadCorpus("")
		if err != nil {
			return err
		}
		for _, b := range []string{"seglog", "jsonl"} {
			runs = append(runs, benchRun{name: name + map[string]string{"seglog": "", "jsonl": ", jsonl reference"}[b],
				cfg: bench.Config{Workload: bench.AgentHost, Sessions: a.agentSessions, Turns: a.agentTurns, Backend: b, Corpus: corpus}})
		}
		if a.tmpfs != "" {
			for _, b := range []string{"seglog", "jsonl"} {
				runs = append(runs, benchRun{name: name + map[string]string{"seglog": "", "jsonl": ", jsonl reference"}[b] + ", on tmpfs",
					cfg: bench.Config{Workload: bench.AgentHost, Sessions: a.agentSessions, Turns: a.agentTurns, Backend: b, Corpus: corpus, Dir: a.tmpfs}})
			}
		}
	}
	fmt.Fprintf(w, "seglog bench: engine on %s, %d-byte events\n\n", a.dir, a.size)
	results := make([]bench.Result, len(runs))
	for i, run := range runs {
		cfg := run.cfg
		cfg.EventSize = a.size
		cfg.Dir = filepath.Join(cmp.Or(run.cfg.Dir, a.dir), fmt.Sprintf("run-%d", i))
		if a.workerProf != "" {
			cfg.CPUProfile = fmt.Sprintf("%s-%d", a.workerProf, i)
		}
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return err
		}
		// The multi-process and agent-host rows' sizes are not known
		// before: a count, no bar.
		total := cfg.Events
		if run.cfg.Workload == bench.MultiDurable || run.cfg.Workload == bench.AgentHost {
			total = 0
		}
		task := prog.start(run.name, total, "events", true)
		cfg.Progress = task.set
		r, err := bench.Run(ctx, cfg)
		task.end(err != nil)
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		results[i] = r
	}
	raw, single, group, bulk := results[0], results[1], results[2], results[3]
	notes := make([]string, len(runs))
	notes[1] = fmt.Sprintf("p50 %.2fx the raw limit", ratio(single.P50, raw.P50))
	notes[2] = fmt.Sprintf("%.1fx the events/s of 1 session (group commit)", group.EventsPerSec()/single.EventsPerSec())
	notes[3] = fmt.Sprintf("%.0f bytes on disk per event (%.1fx smaller than the input)", float64(bulk.DiskBytes)/float64(bulk.Events), float64(bulk.InputBytes)/float64(max(bulk.DiskBytes, 1)))
	if multi >= 0 {
		many, one, ref := results[multi], results[multi+1], results[multi+2]
		notes[multi] = fmt.Sprintf("%.2fx the events/s of 1 process (goal 0.80x)", many.EventsPerSec()/one.EventsPerSec())
		notes[multi+2] = fmt.Sprintf("seglog %d x %d: %.1fx its events/s", a.procs, a.procSessions, many.EventsPerSec()/ref.EventsPerSec())
	}
	if follow >= 0 {
		notes[follow] = "from Flush's return to Wait's, one store"
	}
	if agent >= 0 {
		notes[agent] = fmt.Sprintf("p50/p99 of the turn-end Flush; %.2fx the reference's events/s", results[agent].EventsPerSec()/results[agent+1].EventsPerSec())
		notes[agent+1] = "p50/p99 of the turn-end write+fdatasync"
		if a.tmpfs != "" {
			notes[agent+2] = fmt.Sprintf("%.2fx the reference's events/s on tmpfs", results[agent+2].EventsPerSec()/results[agent+3].EventsPerSec())
			notes[agent+3] = "the same, its store on tmpfs"
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tevents\tevents/s\tMB/s\tp50 µs\tp99 µs\t\tnote")
	for i, run := range runs {
		r := results[i]
		p50, p99 := "-", "-"
		if r.P50 != 0 {
			p50, p99 = fmt.Sprintf("%.0f", us(r.P50)), fmt.Sprintf("%.0f", us(r.P99))
		}
		rate, mb := fmt.Sprintf("%.0f", r.EventsPerSec()), fmt.Sprintf("%.1f", r.MBPerSec())
		if i == follow { // paced by --follow-every: its rate measures nothing
			rate, mb = "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\t%s\n", run.name, r.Events, rate, mb, p50, p99, notes[i])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if agent >= 0 {
		fmt.Fprintf(w, "\nagent host: bytes per event and heap per session (corpus: %s)\n", results[agent].Corpus)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\twritten B/ev\tat rest B/ev\traw JSON B/ev\twritten/raw\theap B/session\tidle heap B/session\t")
		for i, name := range []string{"seglog", "jsonl reference"} {
			r := results[agent+i]
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t%d\t\n", name, r.WrittenPerEvent(), r.RestPerEvent(), r.RawPerEvent(), r.WrittenPerRaw(), r.HeapPerSession, r.HeapPerIdleSession)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	rows := make([]benchRow, len(runs))
	for i, run := range runs {
		rows[i] = benchRow{Name: run.name, Result: results[i]}
	}
	if a.searchSessions > 0 {
		r, err := runSearchRow(ctx, w, prog, a)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		rows = append(rows, r)
	}
	if a.plot != "" {
		// The follow row's rate is paced by --follow-every: it has no bar.
		// The search row's bar is its build's events/s, its line its
		// two-word queries' latency.
		var bars []benchRow
		for i, r := range rows {
			if i != follow {
				bars = append(bars, r)
			}
		}
		if err := chart.WriteFile(a.plot, rateBars("seglog bench", bars), latencyLines("seglog bench", rows)); err != nil {
			return err
		}
	}
	if a.killRounds == 0 {
		return writeBenchJSON(stdout, a.jsonOut, rows)
	}
	kills, broken, err := runKillRows(ctx, w, prog, a)
	if err != nil {
		return err
	}
	if err := writeBenchJSON(stdout, a.jsonOut, append(rows, kills...)); err != nil {
		return err
	}
	return broken
}

// runKillRows runs the window-durability rows (bench.KillWindow) on the
// engine and on the jsonl reference, and prints their section: a line per
// round and the sums. They measure a promise, not a speed: they are not in
// the table above nor in the plot. broken is non-nil if a row found the
// promise broken.
func runKillRows(ctx context.Context, w io.Writer, prog *progress, a benchArgs) (_ []benchRow, broken, _ error) {
	var rows []benchRow
	for i, b := range []string{"seglog", "jsonl"} {
		name := fmt.Sprintf("window durability, SIGKILL, %s", plural(a.killRounds, "round", "rounds"))
		if b == "jsonl" {
			name += ", jsonl reference"
		}
		cfg := bench.Config{Workload: bench.KillWindow, Rounds: a.killRounds, Backend: b,
			Dir: filepath.Join(a.dir, fmt.Sprintf("kill-%d", i))}
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, nil, err
		}
		task := prog.start(name, 0, "events", true)
		cfg.Progress = task.set
		r, err := bench.Run(ctx, cfg)
		task.end(err != nil)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, benchRow{Name: name, Result: r})
	}
	k := rows[0].Kill
	fmt.Fprintf(w, "\nwindow durability: %d agent-host sessions in a process, each flushing at its turns' ends (one in three never), killed with SIGKILL %v-%v in; window %v; bound: the window + max(%v, 2 x the round's slowest turn-end flush)\n",
		rows[0].Sessions, bench.KillMin, bench.KillMax, k.Window, bench.KillSlack)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tround\tkilled at ms\t"+bench.KillColumns+"\t")
	line := func(store, round string, after time.Duration, t bench.KillTotals) {
		at := "-"
		if after > 0 {
			at = fmt.Sprintf("%.0f", ms(after))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", store, round, at, t.Cells())
	}
	var problems []string
	for i, row := range rows {
		store := []string{"seglog", "jsonl reference"}[i]
		for j, kr := range row.Kill.Rounds {
			line(store, fmt.Sprint(j+1), kr.KillAfter, kr.KillTotals)
		}
		line(store, "all", 0, row.Kill.KillTotals)
		if !row.Kill.Promised() {
			problems = append(problems, fmt.Sprintf("%s: %d events older than the bound lost, %d flushed events lost, %d sessions not closed, %d check problems", store,
				row.Kill.LostOld, row.Kill.FlushedLost, row.Kill.Unclosed, row.Kill.CheckProblems))
			problems = append(problems, row.Kill.Problems...)
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, nil, err
	}
	if len(problems) == 0 {
		fmt.Fprintln(w, "the promise held: nothing flushed and nothing handed over more than the bound before the kill was lost, Resume closed every interrupted turn, the stores' check found nothing")
	} else {
		fmt.Fprintf(w, "THE PROMISE WAS BROKEN:\n\t%s\n", strings.Join(problems, "\n\t"))
		broken = errors.New("the window-durability rows found the durability window's promise broken (above)")
	}
	return rows, broken, nil
}

// benchRow is a row of bench's table, and an element of bench --json:
// the row's name and the fields of its bench.Result.
type benchRow struct {
	Name string `json:"name"`
	bench.Result
	// Search is the search row's own figures (bench_search.go).
	Search *searchFigures `json:"search,omitempty"`
}

// writeBenchJSON writes the rows as a JSON array to path: to w if path
// is "-", nowhere if it is "".
func writeBenchJSON(w io.Writer, path string, rows []benchRow) error {
	switch path {
	case "":
		return nil
	case "-":
		return writeJSON(w, rows)
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// rateBars is a bar per row: its events/s, on a log scale.
func rateBars(title string, rows []benchRow) *chart.Bars {
	b := &chart.Bars{Title: title + ": events/s (log scale)", Unit: "events/s", Log: true, Horizontal: true,
		Series: []chart.Series{{Name: "events/s"}}}
	for _, r := range rows {
		b.Groups = append(b.Groups, r.Name)
		b.Series[0].Values = append(b.Series[0].Values, r.EventsPerSec())
	}
	return b
}

// latencyLines is a line per row that measured a latency: its
// distribution.
func latencyLines(title string, rows []benchRow) *chart.Distributions {
	d := &chart.Distributions{Title: title + ": latency of each operation (a durable append+flush, a turn-end flush, a wake-up, a query)"}
	for _, r := range rows {
		if len(r.Latency) > 0 {
			d.Lines = append(d.Lines, chart.Distribution{Name: r.Name, Points: r.Latency})
		}
	}
	return d
}

// plural is "1 process" or "4 processes".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, 1)) }
func us(d time.Duration) float64       { return float64(d) / 1e3 }
func ms(d time.Duration) float64       { return float64(d) / 1e6 }

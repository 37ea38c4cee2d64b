// Command peers runs the PEERS.md workloads on seglog and its peers in one
// run and prints a table of ratios to the raw limit and to seglog.
//
//	go run ./cmd/peers [-json FILE] [-plot FILE.png] [-only seglog,pebble] [-workloads S1,S5] [-quick] [-runs 5]
//
// -plot draws a PNG (bench/chart, gonum/plot): the events/s of every
// workload, the peers' bars side by side, and for each workload that
// times its operations (S1, S2, S5) a line per peer of the latency
// distribution.
//
// S5, the agent-host workload, cuts its text from the seglog source tree
// the command runs in (bench.LoadCorpus), once, for every peer; it prints
// a second table of bytes per event and heap per session.
//
// With -runs N every workload runs N times on every peer, the rounds
// interleaved (round 1 of all peers, then round 2, ...) so that a noisy
// spell of the machine hits all peers alike; the table shows the run with
// the median throughput of each.
//
// With S5, a last section kills an agent host with SIGKILL at random
// moments (-kill-rounds times; bench.KillWindow) on seglog and on the
// JSONL reference, and prints what each lost: both promise that nothing
// handed over more than the 200 ms window (plus one sync) before a crash
// is lost.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/bench/chart"
	"github.com/seglog/seglog/bench/peers"
)

func main() {
	jsonOut := flag.String("json", "", "write the results as JSON to this file")
	plotOut := flag.String("plot", "", "draw the events/s (bars, the peers side by side) and the latency distributions (lines) into this PNG file")
	only := flag.String("only", "", "comma-separated peers to run (default all)")
	quick := flag.Bool("quick", false, "a tenth of the default sizes")
	dir := flag.String("dir", "", "directory for the stores (default the system temp dir)")
	runs := flag.Int("runs", 1, "runs of each workload on each peer; the median is shown")
	workloads := flag.String("workloads", "", "comma-separated workloads to run, by name or prefix (S1,S5; default all)")
	killRounds := flag.Int("kill-rounds", 4, "with S5: SIGKILL rounds of the window-durability section, on seglog and on the JSONL reference (0: none)")
	durable := flag.Int("durable", 0, "S1's durable appends, and S2's per session times 64 / 4 (default 2000; a longer run steadies the ratios on a noisy machine)")
	flag.Parse()
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "peers: -runs must be at least 1")
		os.Exit(2)
	}
	cfg := peers.DefaultConfig()
	if *quick {
		cfg.Durable, cfg.Bulk, cfg.Replay, cfg.AgentTurns = cfg.Durable/4, cfg.Bulk/10, cfg.Replay/10, cfg.AgentTurns/4
	}
	if *durable < 0 {
		fmt.Fprintln(os.Stderr, "peers: -durable must not be negative")
		os.Exit(2)
	}
	if *durable > 0 {
		cfg.Durable = *durable
	}
	var ws []peers.Workload
	for _, w := range peers.Workloads {
		if *workloads == "" || slices.ContainsFunc(strings.Split(*workloads, ","), func(s string) bool { return s != "" && strings.HasPrefix(string(w), s) }) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		fmt.Fprintf(os.Stderr, "peers: -workloads %q names none of %v\n", *workloads, peers.Workloads)
		os.Exit(2)
	}
	if slices.Contains(ws, peers.S5) {
		c, err := bench.LoadCorpus("")
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		cfg.Corpus = c
		fmt.Fprintf(os.Stderr, "S5 corpus: %s, %d files, %d bytes\n", c.Source, len(c.Files), c.Bytes)
	}
	var list []peers.Peer
	for _, p := range peers.All() {
		if *only == "" || slices.Contains(strings.Split(*only, ","), p.Name) {
			list = append(list, p)
		}
	}
	ctx := context.Background()
	var results []peers.Result
	for _, w := range ws {
		all := make([][]peers.Result, len(list))
		for round := range *runs {
			for i, p := range list {
				fmt.Fprintf(os.Stderr, "%-24s %-12s run %d/%d ...", w, p.Name, round+1, *runs)
				r := peers.Run(ctx, p, w, cfg, *dir)
				fmt.Fprintf(os.Stderr, " %.0f events/s %s\n", r.EventsPerSec(), r.Err)
				all[i] = append(all[i], r)
			}
		}
		for _, rs := range all {
			results = append(results, median(rs))
		}
	}
	print(results, list, ws)
	promised := true
	if slices.Contains(ws, peers.S5) && *killRounds > 0 {
		promised = killSection(ctx, *killRounds, *dir)
	}
	if *plotOut != "" {
		if err := plot(*plotOut, results, list, ws); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if !promised {
		os.Exit(1)
	}
}

// init serves the worker processes of the window-durability section:
// bench.KillWindow re-executes this binary as its agent host.
func init() { bench.ServeWorker() }

// killSection runs bench.KillWindow on seglog and on the JSONL reference
// and prints a line of each: the durability window's promise kept by
// both, under SIGKILL (what seglog bench prints round by round). It
// reports whether both kept it.
func killSection(ctx context.Context, rounds int, dir string) bool {
	fmt.Printf("\n%s: an agent host killed with SIGKILL %v-%v in, %d rounds (bench.KillWindow); each promises that nothing flushed, and nothing handed over more than the bound before the kill, is lost:\n",
		peers.S5, bench.KillMin, bench.KillMax, rounds)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\twindow ms\t"+bench.KillColumns+"\tpromise\t")
	ok := true
	for _, b := range []string{"seglog", "jsonl"} {
		d, err := os.MkdirTemp(dir, "peers-kill-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			return false
		}
		r, err := bench.Run(ctx, bench.Config{Workload: bench.KillWindow, Rounds: rounds, Backend: b, Dir: d})
		os.RemoveAll(d)
		if err != nil || r.Kill == nil {
			fmt.Fprintf(os.Stderr, "peers: window durability on %s: %v\n", b, err)
			ok = false
			continue
		}
		k := r.Kill
		kept := map[bool]string{true: "kept", false: "BROKEN"}[k.Promised()]
		ok = ok && k.Promised()
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t\n", b, ms(k.Window), k.Cells(), kept)
		for _, p := range k.Problems {
			fmt.Fprintf(os.Stderr, "peers: %s: %s\n", b, p)
		}
	}
	tw.Flush()
	return ok
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median returns the run with the median throughput, or the first failed
// run if any failed.
func median(rs []peers.Result) peers.Result {
	for _, r := range rs {
		if r.Err != "" {
			return r
		}
	}
	slices.SortFunc(rs, func(a, b peers.Result) int { return cmp.Compare(a.EventsPerSec(), b.EventsPerSec()) })
	return rs[len(rs)/2]
}

func print(rs []peers.Result, list []peers.Peer, ws []peers.Workload) {
	find := func(peer string, w peers.Workload) *peers.Result { return find(rs, peer, w) }
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tpeer\tevents/s\tMB/s\tp50 µs\tp99 µs\tdisk MB\tCPU µs/event\tCPU ceiling\tvs raw\tseglog vs it\t")
	for _, w := range ws {
		raw, seg := find("raw", w), find("seglog", w)
		for _, p := range list {
			r := find(p.Name, w)
			if r == nil {
				continue
			}
			if r.Err != "" {
				fmt.Fprintf(tw, "%s\t%s\terror: %s\t\t\t\t\t\t\t\t\t\n", w, p.Name, r.Err)
				continue
			}
			vsRaw, vsSeg := "-", "-"
			if raw != nil && raw.Err == "" {
				vsRaw = fmt.Sprintf("%.2fx", r.EventsPerSec()/raw.EventsPerSec())
			}
			if seg != nil && seg.Err == "" {
				vsSeg = fmt.Sprintf("%.2fx", seg.EventsPerSec()/r.EventsPerSec())
			}
			cpu, ceiling := "-", "-"
			if r.CPUSeconds > 0 {
				cpu, ceiling = fmt.Sprintf("%.2f", r.CPUPerEvent()), fmt.Sprintf("%.0f", r.Ceiling(runtime.NumCPU()))
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.1f\t%.0f\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t\n", w, p.Name, r.EventsPerSec(), r.MBPerSec(), r.P50us, r.P99us, float64(r.DiskBytes)/1e6, cpu, ceiling, vsRaw, vsSeg)
		}
	}
	tw.Flush()
	if !slices.Contains(ws, peers.S5) {
		return
	}
	fmt.Printf("\n%s: p50/p99 above are the turn-end flush's; bytes per event and heap per session:\n", peers.S5)
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peer\twritten B/ev\tat rest B/ev\traw JSON B/ev\twritten/raw\theap B/session\tidle heap B/session\t")
	for _, p := range list {
		r := find(p.Name, peers.S5)
		if r == nil || r.Err != "" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t%d\t\n", p.Name, r.WrittenPerEvent(), r.RestPerEvent(), r.RawPerEvent(),
			float64(r.WrittenBytes)/float64(max(r.RawJSONBytes, 1)), r.HeapPerSession, r.HeapPerIdleSession)
	}
	tw.Flush()
}

// plot draws the results into a PNG file at path: a bar chart of the
// events/s of each workload, a bar per peer side by side (none for a run
// that failed), and a chart per workload that timed its operations, a
// line per peer of their latency distribution.
func plot(path string, rs []peers.Result, list []peers.Peer, ws []peers.Workload) error {
	bars := &chart.Bars{Title: "bench/peers: events/s per workload (log scale)", Unit: "events/s", Log: true}
	for _, w := range ws {
		bars.Groups = append(bars.Groups, string(w))
	}
	charts := []chart.Chart{bars}
	for _, p := range list {
		s := chart.Series{Name: p.Name, Values: make([]float64, len(ws))}
		for i, w := range ws {
			if r := find(rs, p.Name, w); r != nil && r.Err == "" {
				s.Values[i] = r.EventsPerSec()
			}
		}
		bars.Series = append(bars.Series, s)
	}
	for _, w := range ws {
		d := &chart.Distributions{Title: string(w) + ": latency of each " + map[bool]string{true: "turn-end flush", false: "durable append"}[w == peers.S5]}
		for _, p := range list {
			if r := find(rs, p.Name, w); r != nil && r.Err == "" && len(r.Latency) > 0 {
				d.Lines = append(d.Lines, chart.Distribution{Name: p.Name, Points: r.Latency})
			}
		}
		if len(d.Lines) > 0 {
			charts = append(charts, d)
		}
	}
	return chart.WriteFile(path, charts...)
}

// find is the result of peer on w, nil if there is none.
func find(rs []peers.Result, peer string, w peers.Workload) *peers.Result {
	for i := range rs {
		if rs[i].Peer == peer && rs[i].Workload == w {
			return &rs[i]
		}
	}
	return nil
}

package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

func testCorpus(t testing.TB) *Corpus {
	t.Helper()
	c, err := LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// agentLog is session i's first turns events, as the workload writes them.
func agentLog(c *Corpus, i, turns int) []event.Event {
	var evs []event.Event
	for t := range turns {
		evs = append(evs, AgentTurn(c, i, t, uint64(len(evs)))...)
	}
	return evs
}

func TestCorpusIsTheSourceTree(t *testing.T) {
	c := testCorpus(t)
	if c.Source == "embedded" {
		t.Fatalf("go test in bench did not find the module root")
	}
	var readme, self bool
	for _, f := range c.Files {
		readme = readme || f.Path == "README.md"
		self = self || f.Path == "bench/corpus.go"
		if strings.Contains(f.Path, "testdata/") || strings.HasPrefix(f.Path, ".") {
			t.Errorf("corpus holds %s", f.Path)
		}
	}
	if !readme || !self || c.Bytes < 100_000 {
		t.Errorf("corpus of %d files, %d bytes, README %v, bench/corpus.go %v", len(c.Files), c.Bytes, readme, self)
	}
	// From a directory outside any tree: the embedded corpus.
	wd, _ := os.Getwd()
	t.Chdir(t.TempDir())
	e, err := LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	if e.Source != "embedded" || len(e.Files) < 5 {
		t.Errorf("outside the tree: corpus %q of %d files", e.Source, len(e.Files))
	}
	// bench/peers finds the same tree as bench does.
	t.Chdir(wd + "/peers")
	p, err := LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != c.Source || p.Bytes != c.Bytes {
		t.Errorf("from bench/peers: %s (%d bytes), from bench: %s (%d bytes)", p.Source, p.Bytes, c.Source, c.Bytes)
	}
}

// The turns are valid events of the default catalog, keep the v3 surface
// rules and the turn structure, are a pure function of (session, turn),
// and carry the corpus's text.
func TestAgentTurns(t *testing.T) {
	c := testCorpus(t)
	cat := event.NewCatalog()
	for i := range 3 {
		evs := agentLog(c, i, 6)
		for k := range evs {
			if err := evs[k].Validate(0); err != nil {
				t.Fatalf("session %d event %d: %v", i, k, err)
			}
			if err := cat.Check(&evs[k]); err != nil {
				t.Fatalf("session %d event %d: %v", i, k, err)
			}
		}
		if err := recovery.CheckSurface(evs); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		st, err := recovery.FoldStrict(evs)
		if err != nil || !st.Balanced() {
			t.Fatalf("session %d: fold %v, balanced %v", i, err, st.Balanced())
		}
		again := agentLog(c, i, 6)
		for k := range evs {
			if !bytes.Equal(evs[k].Data, again[k].Data) || evs[k].Time != again[k].Time {
				t.Fatalf("session %d event %d differs between two makes", i, k)
			}
		}
		counts := map[string]int{}
		for _, e := range evs {
			counts[e.Type]++
		}
		if counts["turn/end"] != 6 || counts["tool/call"] < 6 || counts["tool/call"] != counts["tool/result"] || counts["assistant/message"] != 12 || counts["assistant/chunk"] < 24 {
			t.Errorf("session %d: %v", i, counts)
		}
	}
	// The content is the corpus's: a read_file result holds lines of the
	// file it names, and two sessions' turns differ.
	a, b := AgentTurn(c, 0, 0, 0), AgentTurn(c, 1, 0, 0)
	if bytes.Equal(a[2].Data, b[2].Data) {
		t.Error("sessions 0 and 1 start with the same user message")
	}
	found := false
	for s := range 8 {
		for _, e := range agentLog(c, s, 4) {
			if e.Type == "tool/call" && bytes.Contains(e.Data, []byte(`"name":"read_file"`)) {
				found = true
			}
		}
	}
	if !found {
		t.Error("no read_file call in 32 turns")
	}
}

func TestAgentHost(t *testing.T) {
	c := testCorpus(t)
	const sessions, turns = 4, 3
	var headers int64
	for i := range sessions {
		headers += int64(len(jsonl.HeaderLine(jsonlHeader(AgentSessionID(i)))))
	}
	for _, backend := range []string{"seglog", "jsonl"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			// The engine checks the surface rules on every write too.
			r, err := Run(context.Background(), Config{Workload: AgentHost, Dir: dir, Sessions: sessions, Turns: turns, Corpus: c,
				Backend: backend, Options: &engine.Options{SurfaceRules: true}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			var want []event.Event
			for i := range sessions {
				evs := agentLog(c, i, turns)
				if got := r.Acked[AgentSessionID(i)]; got != uint64(len(evs)) {
					t.Errorf("session %d: %d events acknowledged, %d written", i, got, len(evs))
				}
				want = append(want, evs...)
			}
			var raw int64
			for k := range want {
				raw += int64(len(jsonl.EventLine(&want[k])))
			}
			if r.Workload != AgentHost || r.Events != len(want) || r.Sessions != sessions || r.Turns != turns || r.RawJSONBytes != raw || r.Corpus != c.Source {
				t.Errorf("result %+v: want %d events, %d raw bytes", r, len(want), raw)
			}
			if r.Elapsed <= 0 || r.P50 <= 0 || r.P99 < r.P50 || r.InputBytes <= 0 || r.DiskBytes != r.WrittenBytes {
				t.Errorf("result %+v", r)
			}
			switch backend {
			case "jsonl":
				// Written is every byte of the files: the header lines and
				// the events' lines; at rest it is the same.
				if r.WrittenBytes != raw+headers || r.RestBytes != r.WrittenBytes {
					t.Errorf("jsonl wrote %d bytes, %d at rest; its lines are %d bytes", r.WrittenBytes, r.RestBytes, raw+headers)
				}
			case "seglog":
				// Frames of small turns, compressed or not: below twice the
				// JSON, and the files at rest hold them.
				if r.WrittenBytes <= 0 || r.WrittenBytes > 2*raw || r.RestBytes < r.WrittenBytes {
					t.Errorf("seglog wrote %d bytes, %d at rest, for %d raw", r.WrittenBytes, r.RestBytes, raw)
				}
				// The heap figures are differences of the whole heap (a few
				// KiB of noise either way); a session's cost is far below 1 MiB.
				if abs(r.HeapPerSession) > 1<<20 || abs(r.HeapPerIdleSession) > 1<<20 {
					t.Errorf("heap per open session %d, per idle session %d", r.HeapPerSession, r.HeapPerIdleSession)
				}
			}
			// Every acknowledged event reads back as written, after Close.
			for i := range sessions {
				want := agentLog(c, i, turns)
				got := readAgentSession(t, backend, dir, i)
				if len(got) != len(want) {
					t.Fatalf("session %d: %d events read, %d written", i, len(got), len(want))
				}
				for k := range want {
					g, w := got[k], want[k]
					if g.Seq != w.Seq || g.Type != w.Type || g.Time != w.Time || !bytes.Equal(g.Data, w.Data) || !bytes.Equal(g.SurfaceOp, w.SurfaceOp) {
						t.Fatalf("session %d event %d: read %+v, wrote %+v", i, k, g, w)
					}
				}
			}
		})
	}
}

func abs(n int64) int64 { return max(n, -n) }

func readAgentSession(t *testing.T, backend, dir string, i int) []event.Event {
	t.Helper()
	id := AgentSessionID(i)
	if backend == "jsonl" {
		p, err := jsonl.LogPath(dir, jsonlHeader(id), false)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		log, err := jsonl.Parse(b, false)
		if err != nil {
			t.Fatal(err)
		}
		if log.Cut != nil {
			t.Errorf("%s: cut %+v", p, log.Cut)
		}
		return log.Events
	}
	db, err := enginetest.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Open(context.Background(), id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.Read(context.Background(), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// BenchmarkAgentHost runs the agent-host workload with 16 sessions and
// b.N turns each (an op is a turn of every session) on the local engine
// and on the reference model, and reports its figures.
func BenchmarkAgentHost(b *testing.B) {
	c := testCorpus(b)
	for _, backend := range []string{"seglog", "jsonl"} {
		b.Run(backend, func(b *testing.B) {
			r, err := Run(context.Background(), Config{Workload: AgentHost, Dir: b.TempDir(), Sessions: 16, Turns: b.N, Corpus: c, Backend: backend})
			if err != nil {
				b.Fatal(err)
			}
			ReportAgent(b, r)
		})
	}
}

// BenchmarkAgentHostRecoded is AgentHost's seglog run, then what its
// store takes once compaction has recoded it (docs/FORMAT.md, Codecs):
// the store reopened, its active segment sealed and every sealed segment
// of S2 frames compressed again with zstd (Compact with Roll, what the
// background compactor does to each segment once sealed), closed.
// written/raw and rest-B/event are the run's; recoded-written/raw (the
// sessions' frames) and recoded-rest-B/event (every file) after.
func BenchmarkAgentHostRecoded(b *testing.B) {
	c := testCorpus(b)
	ctx := context.Background()
	dir := b.TempDir()
	r, err := Run(ctx, Config{Workload: AgentHost, Dir: dir, Sessions: 16, Turns: b.N, Corpus: c, Backend: "seglog"})
	if err != nil {
		b.Fatal(err)
	}
	db, err := enginetest.OpenStore(b, dir, &engine.Options{Catalog: event.AnyCatalog(), CompactInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil {
		b.Fatal(err)
	}
	snaps, err := db.List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var written int64
	for _, sn := range snaps {
		written += sn.SizeBytes
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	rest, err := DirSize(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.WrittenPerRaw(), "written/raw")
	b.ReportMetric(r.RestPerEvent(), "rest-B/event")
	b.ReportMetric(float64(written)/float64(max(r.RawJSONBytes, 1)), "recoded-written/raw")
	b.ReportMetric(float64(rest)/float64(max(r.Events, 1)), "recoded-rest-B/event")
	b.ReportMetric(float64(rep.RecodedFrames), "recoded-frames")
}

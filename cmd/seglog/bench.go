package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testgen"
	"github.com/seglog/seglog/internal/vfs"
	"github.com/seglog/seglog/segment"
)

type benchArgs struct {
	dir      string
	events   int // bulk load size
	durable  int // durable single appends
	sessions int // concurrent sessions
	size     int // bytes per event
}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var a benchArgs
	fs.StringVar(&a.dir, "dir", "", "directory for the store (default: a temporary one, removed afterwards)")
	fs.IntVar(&a.events, "events", 200_000, "events in the bulk load")
	fs.IntVar(&a.durable, "durable", 2000, "durable single appends (and as many raw fdatasyncs)")
	fs.IntVar(&a.sessions, "sessions", 64, "concurrent sessions in the group-commit run")
	fs.IntVar(&a.size, "size", 300, "bytes of JSON per event")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if a.events < 1 || a.durable < 1 || a.sessions < 1 || a.size < 64 {
		return errors.New("-events, -durable and -sessions must be positive and -size at least 64")
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
	return runBench(stdout, a)
}

type row struct {
	name    string
	events  int
	bytes   int // input bytes
	elapsed time.Duration
	lat     []time.Duration // per-op latencies, if measured
	note    string
}

func runBench(w io.Writer, a benchArgs) error {
	fmt.Fprintf(w, "seglog bench: segment layer on %s (%d-byte events)\n\n", a.dir, a.size)
	var rows []row
	raw, err := benchRaw(a)
	if err != nil {
		return fmt.Errorf("raw fdatasync: %w", err)
	}
	rows = append(rows, raw)
	single, err := benchSingle(a)
	if err != nil {
		return fmt.Errorf("durable append: %w", err)
	}
	single.note = fmt.Sprintf("p50 %.2fx raw", float64(pct(single.lat, 50))/float64(pct(raw.lat, 50)))
	rows = append(rows, single)
	group, err := benchGroup(a)
	if err != nil {
		return fmt.Errorf("group commit: %w", err)
	}
	group.note = fmt.Sprintf("%.1fx single-session events/s", rate(group)/rate(single))
	rows = append(rows, group)
	bulk, stored, err := benchBulk(a)
	if err != nil {
		return fmt.Errorf("bulk: %w", err)
	}
	bulk.note = fmt.Sprintf("%.1f bytes on disk per event (%.2fx compression)", float64(stored)/float64(bulk.events), float64(bulk.bytes)/float64(stored))
	rows = append(rows, bulk)
	replay, err := benchReplay(a, bulk.events)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	rows = append(rows, replay)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tevents\tevents/s\tMB/s\tp50 µs\tp99 µs\t\tnote")
	for _, r := range rows {
		p50, p99 := "-", "-"
		if len(r.lat) > 0 {
			p50 = fmt.Sprintf("%.0f", float64(pct(r.lat, 50))/1e3)
			p99 = fmt.Sprintf("%.0f", float64(pct(r.lat, 99))/1e3)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t\t%s\n", r.name, r.events, rate(r), float64(r.bytes)/r.elapsed.Seconds()/1e6, p50, p99, r.note)
	}
	return tw.Flush()
}

func rate(r row) float64 { return float64(r.events) / r.elapsed.Seconds() }

func pct(lat []time.Duration, p int) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)*p/100, len(s)-1)]
}

var segOpts = segment.WriterOptions{Preallocate: true}

// benchRaw is the physical limit: overwrite a preallocated file with one
// frame's worth of bytes and fdatasync, as often as the durable run does.
func benchRaw(a benchArgs) (row, error) {
	evs := testgen.Events(0, 1, a.size)
	n := 64 + a.size // about one frame
	f, err := vfs.Default.Create(filepath.Join(a.dir, "raw.bin"))
	if err != nil {
		return row{}, err
	}
	defer f.Close()
	size := int64(n * a.durable)
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		return row{}, err
	}
	if err := f.Sync(); err != nil {
		return row{}, err
	}
	buf := make([]byte, n)
	r := row{name: "raw write+fdatasync", events: a.durable, bytes: a.durable * testgen.Size(evs)}
	start := time.Now()
	for i := range a.durable {
		t := time.Now()
		if _, err := f.WriteAt(buf, int64(i*n)); err != nil {
			return row{}, err
		}
		if err := f.Sync(); err != nil {
			return row{}, err
		}
		r.lat = append(r.lat, time.Since(t))
	}
	r.elapsed = time.Since(start)
	return r, nil
}

func benchSingle(a benchArgs) (row, error) {
	sw, err := segment.Create(vfs.Default, filepath.Join(a.dir, "single.seg"), 1, segOpts)
	if err != nil {
		return row{}, err
	}
	defer sw.Close()
	r := row{name: "durable append+sync, 1 session", events: a.durable}
	start := time.Now()
	for i := range a.durable {
		evs := testgen.Events(uint64(i), 1, a.size)
		r.bytes += testgen.Size(evs)
		t := time.Now()
		if _, err := sw.Append("session-1", uint64(i), evs); err != nil {
			return row{}, err
		}
		if err := sw.Sync(); err != nil {
			return row{}, err
		}
		r.lat = append(r.lat, time.Since(t))
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// benchGroup runs a.sessions goroutines, each appending one event and
// syncing, a.durable times in all: concurrent Syncs share fdatasyncs.
func benchGroup(a benchArgs) (row, error) {
	sw, err := segment.Create(vfs.Default, filepath.Join(a.dir, "group.seg"), 2, segOpts)
	if err != nil {
		return row{}, err
	}
	defer sw.Close()
	per := max(a.durable*4/a.sessions, 1)
	r := row{name: fmt.Sprintf("durable append+sync, %d sessions", a.sessions), events: per * a.sessions}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	for s := range a.sessions {
		wg.Go(func() {
			key := fmt.Sprintf("session-%d", s)
			var lat []time.Duration
			bytes := 0
			for i := range per {
				evs := testgen.Events(uint64(i), 1, a.size)
				bytes += testgen.Size(evs)
				t := time.Now()
				_, err := sw.Append(key, uint64(i), evs)
				if err == nil {
					err = sw.Sync()
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t))
			}
			mu.Lock()
			r.lat = append(r.lat, lat...)
			r.bytes += bytes
			mu.Unlock()
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r, errors.Join(errs...)
}

// benchBulk appends a.events events in batches of 1000 across segments,
// then syncs once per segment.
func benchBulk(a benchArgs) (row, int64, error) {
	const batch = 1000
	evs := testgen.Events(0, a.events, a.size)
	r := row{name: "bulk load, batches of 1000", events: a.events, bytes: testgen.Size(evs)}
	var stored int64
	start := time.Now()
	id := uint64(10)
	sw, err := segment.Create(vfs.Default, segPath(a.dir, id), id, segment.WriterOptions{})
	if err != nil {
		return row{}, 0, err
	}
	for i := 0; i < len(evs); i += batch {
		b := evs[i:min(i+batch, len(evs))]
		_, err := sw.Append("bulk", b[0].Seq, b)
		if errors.Is(err, segment.ErrFull) {
			if err = sw.Seal(); err == nil {
				stored += sw.Size()
				sw.Close()
				id++
				sw, err = segment.Create(vfs.Default, segPath(a.dir, id), id, segment.WriterOptions{})
				if err == nil {
					_, err = sw.Append("bulk", b[0].Seq, b)
				}
			}
		}
		if err != nil {
			return row{}, 0, err
		}
	}
	if err := sw.Seal(); err != nil {
		return row{}, 0, err
	}
	stored += sw.Size()
	sw.Close()
	r.elapsed = time.Since(start)
	return r, stored, nil
}

func segPath(dir string, id uint64) string {
	return filepath.Join(dir, fmt.Sprintf("bulk-%016x.seg", id))
}

// benchReplay reads back every bulk segment, decoding every event, and
// checks the count and the seqs.
func benchReplay(a benchArgs, want int) (row, error) {
	r := row{name: "replay (decode every event)"}
	start := time.Now()
	var next uint64
	for id := uint64(10); ; id++ {
		rd, err := segment.OpenReader(vfs.Default, segPath(a.dir, id))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return row{}, err
		}
		var offs []int64
		if _, err := rd.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindEvents {
				offs = append(offs, fi.Offset)
			}
			return nil
		}); err != nil {
			rd.Close()
			return row{}, err
		}
		for _, off := range offs {
			f, err := rd.ReadFrame(off)
			if err != nil {
				rd.Close()
				return row{}, err
			}
			if err := checkSeqs(f.Events, next); err != nil {
				rd.Close()
				return row{}, err
			}
			next += uint64(len(f.Events))
			r.events += len(f.Events)
			r.bytes += testgen.Size(f.Events)
		}
		rd.Close()
	}
	r.elapsed = time.Since(start)
	if r.events != want {
		return row{}, fmt.Errorf("replayed %d events, wrote %d", r.events, want)
	}
	return r, nil
}

func checkSeqs(evs []event.Event, next uint64) error {
	for i, e := range evs {
		if e.Seq != next+uint64(i) {
			return fmt.Errorf("seq %d where %d was expected", e.Seq, next+uint64(i))
		}
	}
	return nil
}

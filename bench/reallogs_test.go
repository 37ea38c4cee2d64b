package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// realLogsEnv names a checkout of the reference harness (the public
// repository deepseek-ai/deepseek-harness), whose test suites recorded the
// session logs BenchmarkRealLogs replays. They are not part of this
// repository (license, size).
const realLogsEnv = "SEGLOG_REAL_LOGS"

// realLogPath selects the logs under the checkout: the web app's snapshot
// sessions and the examples' (a session's later parts, session.N.jsonl,
// too).
var realLogPath = regexp.MustCompile(`^(apps/web/tests/snapshots/[^/]+|examples/.*snapshots.*)/session(\.[0-9]+)?\.jsonl$`)

// realLog is one session log, as the engine gets it: the header, then
// the events in batches, each batch one flush.
type realLog struct {
	header  store.Header
	batches [][]event.Event
	raw     int64 // bytes of the log's JSON lines taken (header and events), newlines included
}

// loadRealLog reads a v0 session.jsonl: live chunk deltas
// (assistant/chunk) left out, a flush after each turn start, step end and
// turn end, and at the end. The logs carry no times: event i gets the
// header's createdAt + i seconds.
func loadRealLog(path, id string) (*realLog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	var hdr struct {
		CreatedAt int64  `json:"createdAt"`
		Cwd       string `json:"cwd"`
	}
	if err := json.Unmarshal(lines[0], &hdr); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	// The recorded cwd is a template ({{cwd}}/workspace): made absolute.
	cwd := strings.ReplaceAll(hdr.Cwd, "{{cwd}}", "/home/user")
	if !filepath.IsAbs(cwd) {
		cwd = ""
	}
	l := &realLog{header: store.Header{ID: id, CreatedAt: hdr.CreatedAt, Cwd: cwd}, raw: int64(len(lines[0]) + 1)}
	var cur []event.Event
	for i, line := range lines[1:] {
		var e struct {
			Type            string          `json:"type"`
			Data            json.RawMessage `json:"data"`
			SurfaceOp       json.RawMessage `json:"surfaceOp"`
			SourceEventSeqs []uint64        `json:"sourceEventSeqs"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, i+2, err)
		}
		if e.Type == "assistant/chunk" {
			continue
		}
		l.raw += int64(len(line) + 1)
		n := uint64(len(cur))
		for _, b := range l.batches {
			n += uint64(len(b))
		}
		cur = append(cur, event.Event{Seq: n, Type: e.Type, Time: hdr.CreatedAt + int64(n)*1000, Data: e.Data, SurfaceOp: e.SurfaceOp, SourceEventSeqs: e.SourceEventSeqs})
		if e.Type == "turn/start" || e.Type == "step/end" || e.Type == "turn/end" {
			l.batches, cur = append(l.batches, cur), nil
		}
	}
	if len(cur) > 0 {
		l.batches = append(l.batches, cur)
	}
	return l, nil
}

// loadRealLogs returns the logs under root, in path order, split in two
// halves: the even ones (the history a dictionary is made from) and the
// odd ones (measured).
func loadRealLogs(tb testing.TB, root string) (history, measured []*realLog) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(root, p); !d.IsDir() && realLogPath.MatchString(filepath.ToSlash(rel)) {
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(paths)
	if len(paths) < 2 {
		tb.Fatalf("%s=%s holds %d session logs", realLogsEnv, root, len(paths))
	}
	for i, p := range paths {
		// An ID as hosts make them (a UUID's 36 bytes), from the path.
		sum := sha256.Sum256([]byte(p))
		id := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
		l, err := loadRealLog(filepath.Join(root, p), id)
		if err != nil {
			tb.Fatal(err)
		}
		if i%2 == 0 {
			history = append(history, l)
		} else {
			measured = append(measured, l)
		}
	}
	return history, measured
}

// replayRealLogs writes logs into db, one session after the other, a
// flush per batch, and returns the bytes their frames take.
func replayRealLogs(tb testing.TB, db *engine.DB, logs []*realLog) int64 {
	ctx := context.Background()
	var written int64
	for _, l := range logs {
		h, err := db.Create(ctx, l.header)
		if err != nil {
			tb.Fatal(err)
		}
		for _, b := range l.batches {
			if err := h.Append(ctx, b...); err != nil {
				tb.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		if err := h.Flush(ctx); err != nil { // a log without events still writes its header
			tb.Fatal(err)
		}
		if err := h.Close(); err != nil {
			tb.Fatal(err)
		}
		snap, err := db.Stat(ctx, l.header.ID)
		if err != nil {
			tb.Fatal(err)
		}
		written += snap.SizeBytes
	}
	return written
}

// BenchmarkRealLogs replays real session logs through the engine (see
// realLogsEnv; skipped without them): the even half first, then the odd
// half, whose bytes written per byte of raw JSON it reports, with the
// dictionary the store made from the first half (written/raw) and
// without dictionaries (nodict-written/raw: frames under 1 KiB raw).
func BenchmarkRealLogs(b *testing.B) {
	root := os.Getenv(realLogsEnv)
	if root == "" {
		b.Skipf("set %s to a checkout of deepseek-ai/deepseek-harness to replay its recorded session logs", realLogsEnv)
	}
	history, measured := loadRealLogs(b, root)
	var raw int64
	for _, l := range measured {
		raw += l.raw
	}
	for range b.N {
		for _, noDict := range []bool{false, true} {
			dir := b.TempDir()
			db, err := enginetest.OpenStore(b, dir, &engine.Options{Catalog: event.AnyCatalog(), NoDict: noDict, CompactInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			replayRealLogs(b, db, history)
			if !noDict {
				// The dictionary is made in the background once the
				// history is long enough: wait for it.
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if ids, _ := segment.ListDicts(nil, dir); len(ids) > 0 {
						break
					}
					if time.Now().After(deadline) {
						b.Fatal("no dictionary made from the history")
					}
				}
			}
			written := replayRealLogs(b, db, measured)
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			name := "written/raw"
			if noDict {
				name = "nodict-written/raw"
			}
			b.ReportMetric(float64(written)/float64(raw), name)
		}
	}
	b.ReportMetric(float64(raw), "raw-B")
}

package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/seglog/seglog/vfs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine/internal/compactplan"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// op is one frame of a fold test: a header (uid, and for a migration the
// incarnation it replaces and its event count), an events frame, or a
// tombstone.
type op struct {
	kind     segment.Kind
	key      string
	uid      uint64 // header: its incarnation; tombstone: the one it ends
	replaces uint64
	events   uint64 // migration header: its events
	first    uint64 // events frame
	count    int
}

func hdr(key string, uid uint64) op { return op{kind: segment.KindHeader, key: key, uid: uid} }
func mig(key string, uid, replaces, events uint64) op {
	return op{kind: segment.KindHeader, key: key, uid: uid, replaces: replaces, events: events}
}
func evs(key string, first uint64, count int) op {
	return op{kind: segment.KindEvents, key: key, first: first, count: count}
}
func del(key string, uid uint64) op { return op{kind: segment.KindDelete, key: key, uid: uid} }

// writeOps writes ops as the frames of a sealed segment and opens it.
func writeOps(t *testing.T, ops []op) *segment.Reader {
	return writeSegment(t, t.TempDir(), 1, ops)
}

// writeSegment writes ops as the frames of sealed segment id in dir and
// opens it.
func writeSegment(t *testing.T, dir string, id uint64, ops []op) *segment.Reader {
	t.Helper()
	path := filepath.Join(dir, segment.Name(id))
	if err := segment.Create(nil, path, id, segment.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var enc segment.Encoder
	// The frames, then the seal, in one write after the header (as a
	// roll writes a seal after a segment's last frames).
	buf := []byte(nil)
	var events uint32
	var err error
	for _, o := range ops {
		var e *segment.Encoded
		switch o.kind {
		case segment.KindHeader:
			rec := store.HeaderRecord{Header: store.Header{Version: store.FormatVersion, ID: o.key, CreatedAt: 1}, UID: o.uid, Replaces: o.replaces, Events: o.events}
			b, _ := json.Marshal(rec)
			e, err = enc.Header(o.key, b)
		case segment.KindEvents:
			var es []event.Event
			for i := range o.count {
				es = append(es, event.Event{Seq: o.first + uint64(i), Type: "message", Data: json.RawMessage(`{}`)})
			}
			e, err = enc.Events(o.key, o.first, es)
		case segment.KindDelete:
			e, err = enc.Delete(o.key, o.uid)
		}
		if err != nil {
			t.Fatal(err)
		}
		buf = e.AppendFrame(buf, segment.HeaderSize)
		if e.Events() {
			events++
		}
	}
	buf = segment.AppendSeal(buf, events, segment.HeaderSize)
	f, err := vfs.Default.OpenReadWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(buf, segment.HeaderSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := segment.OpenReader(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// feed runs a fold over r's frames, split after the first split frames
// (the fold is fed incrementally), and returns the steps and the first
// error.
func feed(r *segment.Reader, f *fold, split int) ([]step, error) {
	var steps []step
	n := 0
	var end int64
	visit := func(fi *segment.FrameInfo) error {
		if fi.Kind == segment.KindSeal {
			return nil
		}
		if n == split {
			end = fi.Offset
			return errStopFeed
		}
		n++
		st, err := f.frame(r, 1, fi)
		steps = append(steps, st)
		return err
	}
	_, err := r.Scan(segment.ScanOptions{}, visit)
	if !errors.Is(err, errStopFeed) {
		return steps, err
	}
	split = -1
	_, err = r.Scan(segment.ScanOptions{From: end}, visit)
	return steps, err
}

var errStopFeed = errors.New("stop")

func TestFold(t *testing.T) {
	tests := []struct {
		name  string
		ops   []op
		steps []step
		live  string // key=uid/next of each session, sorted
		ended []uint64
		err   string // of the feed, or of finish
	}{
		{
			name:  "a session and its events",
			ops:   []op{hdr("a", 7), evs("a", 0, 2), evs("a", 2, 1)},
			steps: []step{{owner: 7}, {owner: 7}, {owner: 7}},
			live:  "a=7/3",
		},
		{
			name:  "deleted, then created again",
			ops:   []op{hdr("a", 7), evs("a", 0, 2), del("a", 7), hdr("a", 9), evs("a", 0, 1)},
			steps: []step{{owner: 7}, {owner: 7}, {ends: 7}, {owner: 9}, {owner: 9}},
			live:  "a=9/1",
			ended: []uint64{7},
		},
		{
			name:  "a migration takes over once its events are all there",
			ops:   []op{hdr("a", 7), evs("a", 0, 2), mig("a", 9, 7, 2), evs("a", 0, 1), evs("a", 1, 1), evs("a", 2, 1)},
			steps: []step{{owner: 7}, {owner: 7}, {owner: 9, ends: 7}, {owner: 9}, {owner: 9}, {owner: 9}},
			live:  "a=9/3",
			ended: []uint64{7},
		},
		{
			name:  "an abandoned migration leaves the old incarnation",
			ops:   []op{hdr("a", 7), evs("a", 0, 2), mig("a", 9, 7, 2), evs("a", 0, 1), del("a", 9), evs("a", 2, 1)},
			steps: []step{{owner: 7}, {owner: 7}, {owner: 9, ends: 7}, {owner: 9}, {ends: 9}, {owner: 7}},
			live:  "a=7/3",
			ended: []uint64{9},
		},
		{
			name:  "orphans its tombstone accounts for (compaction dropped their header)",
			ops:   []op{evs("a", 3, 1), del("a", 7), hdr("a", 9)},
			steps: []step{{}, {ends: 7}, {owner: 9}},
			live:  "a=9/0",
			ended: []uint64{7},
		},
		{
			name:  "orphans a migration accounts for",
			ops:   []op{evs("a", 3, 1), mig("a", 9, 7, 1), evs("a", 0, 1)},
			steps: []step{{}, {owner: 9, ends: 7}, {owner: 9}},
			live:  "a=9/1",
			ended: []uint64{7},
		},
		{
			name: "orphans nothing accounts for",
			ops:  []op{evs("a", 3, 1)},
			err:  `events of session "a" before its header`,
		},
		{
			name: "orphans of a migration cut short",
			ops:  []op{evs("a", 3, 1), mig("a", 9, 7, 2), evs("a", 0, 1)},
			err:  `events of session "a" before its header`,
		},
		{
			name: "orphans before a new header",
			ops:  []op{evs("a", 3, 1), hdr("a", 9)},
			err:  `events of session "a" without its header`,
		},
		{
			name: "a second header",
			ops:  []op{hdr("a", 7), hdr("a", 8)},
			err:  `second header for session "a"`,
		},
		{
			name: "a gap in the seqs",
			ops:  []op{hdr("a", 7), evs("a", 0, 2), evs("a", 3, 1)},
			err:  `session "a": frame starts at seq 3, expected 2`,
		},
		{
			name: "a tombstone of another incarnation",
			ops:  []op{hdr("a", 7), del("a", 8)},
			err:  `tombstone of session "a", which does not exist in that incarnation`,
		},
		{
			name: "a migration of another incarnation",
			ops:  []op{hdr("a", 7), mig("a", 9, 8, 0)},
			err:  `second header for session "a"`,
		},
		{
			name: "a migration with too many events",
			ops:  []op{hdr("a", 7), mig("a", 9, 7, 1), evs("a", 0, 2)},
			err:  `migrated frame of seqs 0+2, expected 0 of 1`,
		},
		{
			name: "a header inside a migration",
			ops:  []op{hdr("a", 7), mig("a", 9, 7, 1), hdr("a", 10)},
			err:  `header of session "a" inside its unfinished migration`,
		},
		{
			name: "a header without an incarnation",
			ops:  []op{hdr("a", 0)},
			err:  `header of session "a" has no incarnation id`,
		},
		{
			name:  "sessions do not mix",
			ops:   []op{hdr("a", 7), hdr("b", 8), evs("b", 0, 1), evs("a", 0, 2), del("b", 8)},
			steps: []step{{owner: 7}, {owner: 8}, {owner: 8}, {owner: 7}, {ends: 8}},
			live:  "a=7/2",
			ended: []uint64{8},
		},
	}
	for _, tt := range tests {
		r := writeOps(t, tt.ops)
		for split := 0; split <= len(tt.ops); split++ {
			for _, frames := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/split=%d/frames=%v", tt.name, split, frames), func(t *testing.T) {
					f := newFold(map[string]*session{}, frames)
					steps, err := feed(r, f, split)
					if err == nil {
						err = f.finish()
					}
					if tt.err != "" {
						var ce *store.CorruptionError
						if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tt.err) {
							t.Fatalf("got %v, want a *CorruptionError saying %q", err, tt.err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(steps, tt.steps) {
						t.Errorf("steps %v, want %v", steps, tt.steps)
					}
					var live []string
					for k, s := range f.sessions {
						live = append(live, fmt.Sprintf("%s=%d/%d", k, s.uid, s.next))
						if frames && uint64(len(s.frames)) == 0 && s.next > 0 {
							t.Errorf("session %q: no frames kept", k)
						}
					}
					slices.Sort(live)
					if got := strings.Join(live, " "); got != tt.live {
						t.Errorf("sessions %q, want %q", got, tt.live)
					}
					var ended []uint64
					for uid := range f.ended {
						ended = append(ended, uid)
					}
					slices.Sort(ended)
					if !slices.Equal(ended, tt.ended) {
						t.Errorf("ended %v, want %v", ended, tt.ended)
					}
					if !frames && len(f.pend) > 0 {
						t.Errorf("an attributing fold kept %d index entries", len(f.pend))
					}
				})
			}
		}
	}
}

// TestCompactPlan runs compaction's plan (engine/internal/compactplan)
// with the replay fold attributing the frames, as Compact does: orphans,
// migrations and tombstones as the fold reads them decide what goes.
func TestCompactPlan(t *testing.T) {
	tests := []struct {
		name    string
		segs    [][]op
		active  int // index of the segment that is not movable; -1: none
		live    map[string]uint64
		ratio   float64
		actions []compactplan.Action
		purge   []uint64
	}{
		{
			name:    "a deleted session's segments go, its tombstone with them",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 2)}, {del("a", 7)}},
			active:  -1,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Drop, compactplan.Drop},
			purge:   []uint64{7},
		},
		{
			name:    "the tombstone in the active segment stays",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 2)}, {del("a", 7)}},
			active:  1,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Drop, compactplan.Keep},
			purge:   []uint64{7},
		},
		{
			name:    "a segment mostly dead is rewritten",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 50), hdr("b", 8), evs("b", 0, 1)}, {del("a", 7)}},
			active:  -1,
			live:    map[string]uint64{"b": 8},
			ratio:   0.9,
			actions: []compactplan.Action{compactplan.Rewrite, compactplan.Drop},
			purge:   []uint64{7},
		},
		{
			name:    "without rewrites the dead frames stay, and so does their tombstone",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 50), hdr("b", 8), evs("b", 0, 1)}, {del("a", 7)}},
			active:  -1,
			live:    map[string]uint64{"b": 8},
			ratio:   -1,
			actions: []compactplan.Action{compactplan.Keep, compactplan.Keep},
		},
		{
			name:    "orphans go with the incarnation their tombstone names, then the tombstone",
			segs:    [][]op{{evs("a", 3, 1)}, {del("a", 7)}},
			active:  -1,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Drop, compactplan.Drop},
			purge:   []uint64{7},
		},
		{
			name:    "orphans in the active segment keep their tombstone",
			segs:    [][]op{{evs("a", 3, 1)}, {evs("a", 4, 1), del("a", 7)}},
			active:  1,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Keep, compactplan.Keep},
		},
		{
			name:    "orphans no tombstone names keep every tombstone of their key",
			segs:    [][]op{{evs("a", 3, 1)}, {del("a", 7)}, {evs("a", 0, 1)}},
			active:  -1,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Drop, compactplan.Keep, compactplan.Keep},
			purge:   []uint64{7},
		},
		{
			name:    "a completed migration drops what it replaced",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 2)}, {mig("a", 9, 7, 2), evs("a", 0, 2)}},
			active:  -1,
			live:    map[string]uint64{"a": 9},
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Drop, compactplan.Keep},
			purge:   []uint64{7},
		},
		{
			name:    "an abandoned migration of a live session stays whole",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 2)}, {mig("a", 9, 7, 2), evs("a", 0, 1), del("a", 9)}},
			active:  -1,
			live:    map[string]uint64{"a": 7},
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Keep, compactplan.Keep},
		},
		{
			name:    "a migration header stays while frames of what it replaced stay",
			segs:    [][]op{{hdr("a", 7), evs("a", 0, 2)}, {mig("a", 9, 7, 2), evs("a", 0, 2), del("a", 9)}},
			active:  0,
			ratio:   0.5,
			actions: []compactplan.Action{compactplan.Keep, compactplan.Keep},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := newPlan(tt.live)
			for i, ops := range tt.segs {
				r := writeSegment(t, dir, uint64(i+1), ops)
				if err := p.Scan(r, 0, i != tt.active); err != nil {
					t.Fatal(err)
				}
			}
			p.Decide(tt.ratio)
			var actions []compactplan.Action
			for _, si := range p.Segments() {
				actions = append(actions, si.Action)
			}
			if !slices.Equal(actions, tt.actions) {
				t.Errorf("actions %v, want %v", actions, tt.actions)
			}
			if purge := p.Purged(); !slices.Equal(purge, tt.purge) {
				t.Errorf("purge %v, want %v", purge, tt.purge)
			}
		})
	}
}

package compactplan

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// frame is one frame of a test segment and the step the attribution
// gives it: a header (of incarnation owner; a migration's ends what it
// replaces), an events frame of n events (owner 0: an orphan), or a
// tombstone (ends).
type frame struct {
	kind  segment.Kind
	key   string
	n     int
	owner uint64
	ends  uint64
	s2    bool // an events frame stored as an S2 block (as a turn's flush writes it)
}

func hdr(key string, uid uint64) frame { return frame{kind: segment.KindHeader, key: key, owner: uid} }
func mig(key string, uid, replaces uint64) frame {
	return frame{kind: segment.KindHeader, key: key, owner: uid, ends: replaces}
}
func evs(key string, owner uint64, n int) frame {
	return frame{kind: segment.KindEvents, key: key, owner: owner, n: n}
}
func del(key string, uid uint64) frame { return frame{kind: segment.KindDelete, key: key, ends: uid} }

// script is an Attributor that gives each frame, in the order it is fed,
// the step its test wrote down.
type script struct {
	steps  []Step
	forkOf map[uint64]uint64
}

func (s *script) Frame(r *segment.Reader, seg uint64, fi *segment.FrameInfo) (Step, error) {
	if len(s.steps) == 0 {
		return Step{}, errors.New("fed more frames than the script holds")
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	return st, nil
}

func (s *script) ForkOf() map[uint64]uint64 { return s.forkOf }

// writeSegment writes frames as segment id in dir, sealed if sealed, and
// opens it; the script learns their steps.
func writeSegment(t *testing.T, dir string, id uint64, sealed bool, frames []frame, sc *script) *segment.Reader {
	t.Helper()
	path := filepath.Join(dir, segment.Name(id))
	if err := segment.Create(nil, path, id, segment.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var enc segment.Encoder
	var buf []byte
	var events uint32
	seqs := map[string]uint64{}
	for _, f := range frames {
		var e *segment.Encoded
		var err error
		switch f.kind {
		case segment.KindHeader:
			e, err = enc.Header(f.key, []byte(`{}`)) // (the plan reads no payload: the script attributes)
		case segment.KindEvents:
			var es []event.Event
			for range f.n {
				es = append(es, event.Event{Seq: seqs[f.key], Type: "message", Data: json.RawMessage(`{}`)})
				seqs[f.key]++
			}
			if f.s2 {
				for i := range es {
					es[i].Data = json.RawMessage(`{"text":"` + strings.Repeat("the turn's words, again and again ", 40) + `"}`)
				}
				e, err = segment.Encoder{Fast: true}.Events(f.key, es[0].Seq, es)
				if err == nil && e.Codec() != segment.CodecS2 {
					t.Fatalf("an S2 frame of the test is %v", e.Codec())
				}
				break
			}
			e, err = enc.Events(f.key, es[0].Seq, es)
		case segment.KindDelete:
			e, err = enc.Delete(f.key, f.ends)
		}
		if err != nil {
			t.Fatal(err)
		}
		buf = e.AppendFrame(buf, segment.HeaderSize+int64(len(buf)))
		if e.Events() {
			events++
		}
		sc.steps = append(sc.steps, Step{Owner: f.owner, Ends: f.ends})
	}
	if sealed {
		buf = segment.AppendSeal(buf, events, segment.HeaderSize+int64(len(buf)))
	}
	w, err := vfs.Default.OpenReadWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(buf, segment.HeaderSize); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := segment.OpenReader(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// plan scans segs (segment i+1 movable unless it is fixed) into a plan
// over live and decides at ratio.
func plan(t *testing.T, live map[string]uint64, forkOf map[uint64]uint64, fixed int, ratio float64, segs ...[]frame) (*Plan, []*segment.Reader) {
	t.Helper()
	dir := t.TempDir()
	sc := &script{forkOf: forkOf}
	p := New(live, sc)
	var rs []*segment.Reader
	for i, fs := range segs {
		r := writeSegment(t, dir, uint64(i+1), true, fs, sc)
		rs = append(rs, r)
		if err := p.Scan(r, 0, i != fixed); err != nil {
			t.Fatal(err)
		}
	}
	if len(sc.steps) != 0 {
		t.Fatalf("%d frames not fed", len(sc.steps))
	}
	p.Decide(ratio)
	return p, rs
}

func actions(p *Plan) []Action {
	var out []Action
	for _, si := range p.Segments() {
		out = append(out, si.Action)
	}
	return out
}

// stays lists, for a rewrite of segment i, whether each of its frames
// stays.
func stays(t *testing.T, p *Plan, r *segment.Reader, i int) []bool {
	t.Helper()
	si := p.Segments()[i]
	var out []bool
	at := 0
	if _, err := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
		if fi.Kind == segment.KindSeal {
			return nil
		}
		ok, err := p.Stays(si, at, fi)
		at++
		out = append(out, ok)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// An incarnation goes whole or not at all: a dead one with frames in a
// segment that stays (here the active one, not movable) keeps its frames
// in every other segment, and its tombstone; once nothing holds it back,
// its segments go.
func TestIncarnationGoesWhole(t *testing.T) {
	segs := [][]frame{
		{hdr("a", 7), evs("a", 7, 20)},
		{evs("a", 7, 1), del("a", 7)},
	}
	p, _ := plan(t, nil, nil, 1, 0.5, segs...)
	if got, want := actions(p), []Action{Keep, Keep}; !slices.Equal(got, want) {
		t.Fatalf("with its last frame in the active segment: actions %v, want %v", got, want)
	}
	if got := p.Purged(); len(got) != 0 {
		t.Fatalf("purged %v while frames of it stay", got)
	}
	p, _ = plan(t, nil, nil, -1, 0.5, segs...)
	if got, want := actions(p), []Action{Drop, Drop}; !slices.Equal(got, want) {
		t.Fatalf("all movable: actions %v, want %v", got, want)
	}
	if got, want := p.Purged(), []uint64{7}; !slices.Equal(got, want) {
		t.Fatalf("purged %v, want %v", got, want)
	}
}

// A segment whose live frames are under the ratio of its size is
// rewritten, and the rewrite keeps exactly the frames of incarnations
// that stay; over the ratio, or with rewrites off, it is kept.
func TestRewriteKeepsTheLive(t *testing.T) {
	segs := [][]frame{
		{hdr("a", 7), evs("a", 7, 40), hdr("b", 8), evs("b", 8, 1)},
		{del("a", 7)},
	}
	live := map[string]uint64{"b": 8}
	p, rs := plan(t, live, nil, -1, 0.9, segs...)
	if got, want := actions(p), []Action{Rewrite, Drop}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	if got, want := stays(t, p, rs[0], 0), []bool{false, false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("the rewrite keeps %v, want %v", got, want)
	}
	if got, want := p.LiveBytes(p.Segments()[0]), p.Segments()[0].holds[8]; got != want || got == 0 {
		t.Fatalf("live bytes %d, want %d (b's frames)", got, want)
	}
	for _, ratio := range []float64{0.01, -1} {
		p, _ = plan(t, live, nil, -1, ratio, segs...)
		if got, want := actions(p), []Action{Keep, Keep}; !slices.Equal(got, want) {
			t.Fatalf("ratio %v: actions %v, want %v", ratio, got, want)
		}
	}
}

// Orphans (events frames whose header a compaction cut short removed) go
// with the incarnation the tombstone after them ends; orphans no
// tombstone names keep every tombstone of their key.
func TestOrphansGoWithTheirTombstone(t *testing.T) {
	p, rs := plan(t, map[string]uint64{"b": 8}, nil, -1, 0.99,
		[]frame{evs("a", 0, 30), hdr("b", 8), evs("b", 8, 1)},
		[]frame{del("a", 7)})
	if got, want := actions(p), []Action{Rewrite, Drop}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	if got, want := stays(t, p, rs[0], 0), []bool{false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("the rewrite keeps %v, want %v", got, want)
	}
	p, _ = plan(t, nil, nil, -1, 0.5,
		[]frame{evs("a", 0, 3)},
		[]frame{del("a", 7)},
		[]frame{evs("a", 0, 1)})
	if got, want := actions(p), []Action{Drop, Keep, Keep}; !slices.Equal(got, want) {
		t.Fatalf("with orphans after the tombstone: actions %v, want %v", got, want)
	}
}

// A fork reads its parent's frames: a deleted parent stays whole while
// the fork stays, and counts as alive in Usage's figures
// (ForkParentBytes); once the fork is gone too, both go.
func TestForkKeepsItsParent(t *testing.T) {
	segs := [][]frame{
		{hdr("x", 5), evs("x", 5, 3), hdr("p", 7), evs("p", 7, 10)},
		{hdr("f", 9), evs("f", 9, 1), del("p", 7), del("x", 5)},
	}
	forkOf := map[uint64]uint64{9: 7}
	p, _ := plan(t, map[string]uint64{"f": 9}, forkOf, -1, 0.5, segs...)
	if got, want := actions(p), []Action{Keep, Keep}; !slices.Equal(got, want) {
		t.Fatalf("with the fork live: actions %v, want %v", got, want)
	}
	if got := p.Purged(); len(got) != 0 {
		t.Fatalf("purged %v while the fork lives (its parent keeps segment 1, and with it x)", got)
	}
	shared := p.ForkParentBytes()
	if len(shared) != 2 || shared[0] != p.Segments()[0].holds[7] || shared[0] == 0 || shared[1] != 0 {
		t.Fatalf("fork parent bytes %v, want the parent's frames in segment 1 (%d)", shared, p.Segments()[0].holds[7])
	}
	p, _ = plan(t, nil, forkOf, -1, 0.5, append(segs, []frame{del("f", 9)})...)
	if got, want := actions(p), []Action{Drop, Drop, Drop}; !slices.Equal(got, want) {
		t.Fatalf("with the fork deleted: actions %v, want %v", got, want)
	}
	if p.ForkParentBytes() != nil {
		t.Fatal("fork parent bytes with no fork live")
	}
}

// A migration header stays while frames of what it replaced stay
// (without it they would be the session again), and with it the whole
// migration.
func TestMigrationHeaderStaysWithWhatItReplaced(t *testing.T) {
	segs := [][]frame{
		{hdr("a", 7), evs("a", 7, 2)},
		{mig("a", 9, 7), evs("a", 9, 40), del("a", 9)},
	}
	p, _ := plan(t, nil, nil, 0, 0.9, segs...)
	if got, want := actions(p), []Action{Keep, Keep}; !slices.Equal(got, want) {
		t.Fatalf("with the replaced frames in the active segment: actions %v, want %v", got, want)
	}
	if got := p.Purged(); len(got) != 0 {
		t.Fatalf("purged %v while the replaced frames stay", got)
	}
	p, _ = plan(t, nil, nil, -1, 0.9, segs...)
	if got, want := actions(p), []Action{Drop, Drop}; !slices.Equal(got, want) {
		t.Fatalf("all movable: actions %v, want %v", got, want)
	}
	if got, want := p.Purged(), []uint64{7, 9}; !slices.Equal(got, want) {
		t.Fatalf("purged %v, want %v", got, want)
	}
}

// The rewrite's frames must be the ones the plan read: a frame at another
// offset is an error, never a guess.
func TestStaysRefusesAnotherFrame(t *testing.T) {
	p, _ := plan(t, nil, nil, -1, 0.5, []frame{hdr("a", 7), evs("a", 7, 1)})
	si := p.Segments()[0]
	if _, err := p.Stays(si, 0, &segment.FrameInfo{Kind: segment.KindHeader, Offset: 12345}); err == nil {
		t.Fatal("a frame at an offset the plan did not read was accepted")
	}
	if _, err := p.Stays(si, 2, &segment.FrameInfo{Kind: segment.KindEvents, Offset: 12345}); err == nil {
		t.Fatal("a frame past those the plan read was accepted")
	}
}

// A movable segment must be sealed: one that is not is corruption at its
// end.
func TestUnsealedMovableSegment(t *testing.T) {
	dir := t.TempDir()
	sc := &script{}
	r := writeSegment(t, dir, 1, false, []frame{hdr("a", 7)}, sc)
	var ce *base.CorruptionError
	if err := New(nil, sc).Scan(r, 0, true); !errors.As(err, &ce) || ce.Path != r.Path() {
		t.Fatalf("got %v, want a corruption error at %s", err, r.Path())
	}
	sc = &script{}
	r = writeSegment(t, t.TempDir(), 1, false, []frame{hdr("a", 7)}, sc)
	if err := New(nil, sc).Scan(r, 0, false); err != nil {
		t.Fatalf("the active segment (not movable): %v", err)
	}
}

// Deletes lists the incarnations purged with their tombstone, with where
// their header and tombstone were: not one whose tombstone stays (in a
// segment kept), and for a migration the header of what it replaced.
func TestDeletes(t *testing.T) {
	segs := [][]frame{
		{hdr("a", 7), evs("a", 7, 20), hdr("m", 3), evs("m", 3, 2), hdr("b", 8), evs("b", 8, 1)},
		{mig("m", 4, 3), evs("m", 4, 2), del("a", 7)},
		{del("m", 4), evs("b", 8, 1)},
	}
	live := map[string]uint64{"b": 8}
	p, rs := plan(t, live, nil, -1, 0.99, segs...)
	offs := func(r *segment.Reader) (out []int64) {
		r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			out = append(out, fi.Offset)
			return nil
		})
		return out
	}
	o1, o2, o3 := offs(rs[0]), offs(rs[1]), offs(rs[2])
	want := []Delete{
		{Key: "a", UID: 7, Header: Pos{Seg: 1, Off: o1[0]}, Tomb: Pos{Seg: 2, Off: o2[2]}},
		{Key: "m", UID: 4, Header: Pos{Seg: 1, Off: o1[2]}, Tomb: Pos{Seg: 3, Off: o3[0]}},
	}
	if got := p.Deletes(); !slices.Equal(got, want) {
		t.Fatalf("deletes %+v, want %+v", got, want)
	}
	// With the tombstones' segment kept (not movable), no delete is lost.
	p, _ = plan(t, live, nil, 2, 0.99, segs...)
	for _, d := range p.Deletes() {
		if d.Tomb.Seg == 3 {
			t.Fatalf("delete %+v listed, its tombstone stays", d)
		}
	}
}

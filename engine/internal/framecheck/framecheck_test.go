package framecheck

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

const dir = "store"

// problem is one reported problem.
type problem struct {
	path    string
	off     int64
	session string
	what    string
}

// run is Run over fsys, with the problems it reports.
func run(t *testing.T, fsys vfs.FS, o Options) (Counts, []problem) {
	t.Helper()
	var ps []problem
	n, err := Run(fsys, dir, o, func(path string, off int64, session, what string) {
		ps = append(ps, problem{path, off, session, what})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, ps
}

// writeSegment writes segment id (its header saying hdrID) holding n
// events frames of sessions s0, s1, ... of ~500 raw bytes each, with
// enc, and a seal if sealed. It returns the frames' offsets.
func writeSegment(t *testing.T, fsys vfs.FS, id, hdrID uint64, n int, enc segment.Encoder, sealed bool) []int64 {
	t.Helper()
	path := filepath.Join(dir, segment.Name(id))
	if err := segment.Create(fsys, path, hdrID, segment.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	var offs []int64
	for i := range n {
		e, err := enc.Events(fmt.Sprint("s", i), 0, testgen.Events(0, 1, 500))
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, segment.HeaderSize+int64(len(buf)))
		buf = e.AppendFrame(buf, segment.HeaderSize+int64(len(buf)))
	}
	if sealed {
		buf = segment.AppendSeal(buf, uint32(n), segment.HeaderSize+int64(len(buf)))
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(buf, segment.HeaderSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return offs
}

// flip inverts the byte at off of file name.
func flip(t *testing.T, fsys vfs.FS, name string, off int64) {
	t.Helper()
	f, err := fsys.OpenReadWrite(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func newStore(t *testing.T) *vfs.MemFS {
	t.Helper()
	fsys := vfs.NewMem()
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return fsys
}

// withDict trains a dictionary, writes it to the store and returns an
// encoder that compresses with it.
func withDict(t *testing.T, fsys vfs.FS) (segment.Encoder, *segment.Dict) {
	t.Helper()
	var samples [][]byte
	for i := range 100 {
		samples = append(samples, testgen.Events(uint64(i), 1, 500)[0].Data)
	}
	d, err := segment.TrainDict(40000, 1, samples, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := segment.WriteDict(fsys, dir, d); err != nil {
		t.Fatal(err)
	}
	return segment.Encoder{Dict: d}, d
}

// TestRunClean: every frame of every segment is read (the seal is no
// frame) and an intact store has no problem.
func TestRunClean(t *testing.T) {
	fsys := newStore(t)
	enc, _ := withDict(t, fsys)
	writeSegment(t, fsys, 1, 1, 5, segment.Encoder{}, true)
	writeSegment(t, fsys, 2, 2, 4, enc, false)
	n, ps := run(t, fsys, Options{})
	if n != (Counts{Segments: 2, Frames: 9}) || len(ps) != 0 {
		t.Fatalf("counts %+v, problems %+v; want 2 segments, 9 frames, none", n, ps)
	}
}

// TestRunResumes: damage in the middle of a segment is reported at its
// frame, and the scan resumes after it: the frames after it are read,
// and damage in one of them is reported too.
func TestRunResumes(t *testing.T) {
	fsys := newStore(t)
	offs := writeSegment(t, fsys, 1, 1, 6, segment.Encoder{}, true)
	flip(t, fsys, segment.Name(1), offs[1]+60) // in frame 1's payload
	flip(t, fsys, segment.Name(1), offs[4]+60)
	n, ps := run(t, fsys, Options{})
	var at []int64
	for _, p := range ps {
		if p.path != filepath.Join(dir, segment.Name(1)) {
			t.Errorf("problem %+v not at the segment", p)
		}
		at = append(at, p.off)
	}
	if !slices.Equal(at, []int64{offs[1], offs[4]}) {
		t.Fatalf("problems at %v (%+v), want at frames 1 and 4: %v", at, ps, []int64{offs[1], offs[4]})
	}
	if n.Frames != 4 {
		t.Fatalf("%d frames read, want the 4 undamaged", n.Frames)
	}
}

// TestRunBadDictionary: frames naming a dictionary whose file is damaged
// make one problem, at the dictionary's file, that counts them and names
// the first; the dictionary file is not reported a second time.
func TestRunBadDictionary(t *testing.T) {
	fsys := newStore(t)
	enc, d := withDict(t, fsys)
	offs := writeSegment(t, fsys, 1, 1, 3, enc, false)
	writeSegment(t, fsys, 2, 2, 2, enc, false)
	flip(t, fsys, segment.DictName(d.ID), 20)
	n, ps := run(t, fsys, Options{})
	first := fmt.Sprintf("%s @%d", filepath.Join(dir, segment.Name(1)), offs[0])
	if len(ps) != 1 || !strings.HasSuffix(ps[0].what, "; 5 frames name it, the first at "+first) || !strings.HasSuffix(ps[0].path, segment.DictName(d.ID)) {
		t.Fatalf("problems %+v; want one at %s: 5 frames, the first at %s", ps, segment.DictName(d.ID), first)
	}
	if n.Frames != 5 {
		t.Fatalf("%d frames read, want 5", n.Frames)
	}
}

// TestRunLimits: a skipped segment is not read; with a bound, the
// segments after its segment are not, and that one only up to it; the
// index's durable offset makes damage at a segment's end corruption, not
// a torn tail; a header that names another segment is reported.
func TestRunLimits(t *testing.T) {
	fsys := newStore(t)
	offs := writeSegment(t, fsys, 1, 1, 4, segment.Encoder{}, false)
	writeSegment(t, fsys, 2, 2, 3, segment.Encoder{}, false)
	writeSegment(t, fsys, 3, 3, 2, segment.Encoder{}, false)
	flip(t, fsys, segment.Name(3), segment.HeaderSize+60)

	n, ps := run(t, fsys, Options{Skip: map[uint64]bool{3: true}})
	if n != (Counts{Segments: 2, Frames: 7}) || len(ps) != 0 {
		t.Fatalf("segment 3 skipped: counts %+v, problems %+v; want 2 segments, 7 frames, none", n, ps)
	}
	n, ps = run(t, fsys, Options{Bounded: true, BoundSeg: 1, BoundOff: offs[2]})
	if n != (Counts{Segments: 1, Frames: 2}) || len(ps) != 0 {
		t.Fatalf("bounded at segment 1's frame 2: counts %+v, problems %+v; want 1 segment, 2 frames, none", n, ps)
	}

	// Segment 1's last frame damaged: a torn tail (the next open cuts
	// it), unless the index proves it durable.
	flip(t, fsys, segment.Name(1), offs[3]+60)
	o := Options{Skip: map[uint64]bool{2: true, 3: true}}
	if _, ps := run(t, fsys, o); len(ps) != 0 {
		t.Fatalf("a torn tail reported: %+v", ps)
	}
	o.DurableSeg, o.DurableOff = 1, offs[3]+100
	if _, ps := run(t, fsys, o); len(ps) != 1 || ps[0].off != offs[3] {
		t.Fatalf("damage the index proves durable: problems %+v, want one at %d", ps, offs[3])
	}

	writeSegment(t, fsys, 5, 4, 1, segment.Encoder{}, false)
	_, ps = run(t, fsys, Options{Skip: map[uint64]bool{1: true, 2: true, 3: true}})
	if len(ps) != 1 || ps[0].what != "header says segment 4" || ps[0].off != 0 {
		t.Fatalf("segment 5 with the header of 4: problems %+v", ps)
	}
}

package wal

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// memShared is one process's coordination: its locks are mutexes, its
// words a shared mapping of a MemFS file.
type memShared struct {
	mu  [3]sync.Mutex
	shm *vfs.Shared
}

func (s *memShared) Lock(l Lock) error            { s.mu[l].Lock(); return nil }
func (s *memShared) TryLock(l Lock) (bool, error) { return s.mu[l].TryLock(), nil }
func (s *memShared) Unlock(l Lock)                { s.mu[l].Unlock() }
func (s *memShared) Word(w Word) vfs.Word64       { return s.shm.Uint64(8 * int(w)) }
func (s *memShared) Verify() error                { return nil }
func (s *memShared) Lost() error                  { return nil }
func (s *memShared) Wiped() error                 { return errors.New("wiped") }
func (s *memShared) Publish(p uint64) {
	for {
		old := s.Word(Durable).Load()
		if old >= p || s.Word(Durable).CompareAndSwap(old, p) {
			return
		}
	}
}
func (s *memShared) Notify()                              {}
func (s *memShared) SyncSeq() uint32                      { return 0 }
func (s *memShared) WaitSync(seq uint32, d time.Duration) { time.Sleep(d) }

// newTestLog returns a log over segment 1 (created) of a store in a MemFS
// whose segments are sealed at size.
func newTestLog(t *testing.T, size int64) (*Log, *memShared, vfs.FS, *[]uint64) {
	t.Helper()
	fsys := vfs.NewMem()
	if err := fsys.MkdirAll("db", 0o755); err != nil {
		t.Fatal(err)
	}
	opts := func(id uint64) segment.CreateOptions { return segment.CreateOptions{Size: size} }
	if err := segment.Create(fsys, "db/"+segment.Name(1), 1, opts(1)); err != nil {
		t.Fatal(err)
	}
	shm, err := fsys.MapShared("db/shm", 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	sh := &memShared{shm: shm}
	start := position(1, segment.HeaderSize)
	sh.Word(Tail).Store(start)
	sh.Word(Placing).Store(start)
	sh.Word(Durable).Store(start)
	var mu sync.Mutex
	var appendMu sync.Mutex
	var own []uint64
	var poison error
	l := New(Config{
		FS: fsys, Dir: "db",
		SegmentSize:   func(uint64) int64 { return size },
		CreateOptions: opts,
		NoPreallocate: true,
		Shared:        sh,
		AppendMu:      &appendMu,
		Locker:        &mu,
		OnWrite:       func(seg uint64, off, _ int64) { own = append(own, position(seg, off)) },
		Poisoned:      func() error { return poison },
		Poison: func(err error) error {
			if poison == nil {
				poison = err
			}
			return poison
		},
		Written: func(t *Tally) { *t = Tally{} },
		Fsynced: func() {},
		Kick:    make(chan struct{}, 1),
	})
	t.Cleanup(func() { l.Close() })
	return l, sh, fsys, &own
}

// TestPlaceRollsAndSyncs: placements that outgrow a segment seal it (its
// seal counting its events frames) and go on in the next, created by the
// roll; every frame is registered where it was written, and Sync
// publishes the tail as durable. Each segment scans clean, sealed or not.
func TestPlaceRollsAndSyncs(t *testing.T) {
	l, sh, fsys, own := newTestLog(t, 4096)
	var enc segment.Encoder
	var placed []Placed
	for i := range 20 {
		e, err := enc.Events("s", uint64(i*10), testgen.Events(uint64(i*10), 10, 40))
		if err != nil {
			t.Fatal(err)
		}
		p := &Placement{Frames: []*segment.Encoded{e}, Register: func(at []Placed, _ int) { placed = append(placed, at...) }}
		if err := l.Place(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SyncPlaced(); err != nil {
		t.Fatal(err)
	}
	if len(placed) != 20 || len(*own) != 20 {
		t.Fatalf("%d frames registered, %d written, want 20", len(placed), len(*own))
	}
	last := placed[len(placed)-1]
	if last.Seg < 2 {
		t.Fatalf("20 frames of ~500 bytes in 4 KiB segments all in segment %d: no roll", last.Seg)
	}
	if d, want := sh.Word(Durable).Load(), position(last.Seg, last.Loc.Offset+last.Loc.Size); d != want || l.PlacedEnd() != want {
		t.Fatalf("durable %x, placed end %x, want both %x", d, l.PlacedEnd(), want)
	}
	bySeg := map[uint64][]int64{}
	for _, p := range placed {
		bySeg[p.Seg] = append(bySeg[p.Seg], p.Loc.Offset)
	}
	for seg := uint64(1); seg <= last.Seg; seg++ {
		r, err := segment.OpenReader(fsys, "db/"+segment.Name(seg))
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		res, err := r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindEvents {
				got = append(got, fi.Offset)
			}
			return nil
		})
		r.Close()
		if err != nil {
			t.Fatalf("segment %d: %v", seg, err)
		}
		if sealed := seg < last.Seg; res.Sealed != sealed || res.Torn {
			t.Errorf("segment %d: sealed %v torn %v, want sealed %v", seg, res.Sealed, res.Torn, sealed)
		}
		if len(got) != len(bySeg[seg]) {
			t.Fatalf("segment %d holds frames at %v, placed at %v", seg, got, bySeg[seg])
		}
		for i := range got {
			if got[i] != bySeg[seg][i] {
				t.Fatalf("segment %d holds frames at %v, placed at %v", seg, got, bySeg[seg])
			}
		}
	}
}

// TestUndoDeadPlacer: a placer that died mid-write left bytes past the
// tail (placing past it); the next placement zeroes them first and
// writes its frame at the tail, and the file scans clean up to it.
func TestUndoDeadPlacer(t *testing.T) {
	l, sh, fsys, _ := newTestLog(t, 1<<20)
	f, err := fsys.OpenReadWrite("db/" + segment.Name(1))
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 3000)
	for i := range junk {
		junk[i] = 0xa5
	}
	if _, err := f.WriteAt(junk, segment.HeaderSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sh.Word(Placing).Store(position(1, segment.HeaderSize+int64(len(junk))))
	e, err := segment.Encoder{}.Events("s", 0, testgen.Events(0, 2, 40))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Place(&Placement{Frames: []*segment.Encoded{e}}); err != nil {
		t.Fatal(err)
	}
	if err := l.SyncPlaced(); err != nil {
		t.Fatal(err)
	}
	end := segment.HeaderSize + e.Size()
	b, err := vfs.ReadFile(fsys, "db/"+segment.Name(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := end; i < int64(len(b)); i++ {
		if b[i] != 0 {
			t.Fatalf("byte %d of the dead placer's write survived past the new frame (ends at %d)", i, end)
		}
	}
	if p := sh.Word(Placing).Load(); p != position(1, end) {
		t.Fatalf("placing %x, want %x", p, position(1, end))
	}
}

// TestCutTail: a torn frame after the last whole one (as a crash leaves
// it) is cut by CutTail: zeroed in a preallocated segment, trimmed off
// otherwise; a placement after it then scans clean, and a sealed segment
// is refused. (It was segment's TestOpenWriterAfterTornTail.)
func TestCutTail(t *testing.T) {
	for _, prealloc := range []bool{false, true} {
		l, sh, fsys, _ := newTestLog(t, 64<<10)
		path := "db/" + segment.Name(1)
		if prealloc {
			f, _ := fsys.OpenReadWrite(path)
			f.WriteAt(make([]byte, 8192), segment.HeaderSize) // zeros ahead, as a growth leaves
			f.Close()
		}
		var enc segment.Encoder
		var frames []*segment.Encoded
		for i := range 2 {
			e, err := enc.Events("s", uint64(2*i), testgen.Events(uint64(2*i), 2, 100))
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, e)
			if err := l.Place(&Placement{Frames: []*segment.Encoded{e}}); err != nil {
				t.Fatal(err)
			}
			if err := l.SyncPlaced(); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		good := segment.HeaderSize + frames[0].Size()
		// Tear the second frame: keep half of it.
		f, _ := fsys.OpenReadWrite(path)
		f.WriteAt(make([]byte, 40), good+40)
		f.Close()
		scan := func() segment.ScanResult {
			t.Helper()
			b, err := vfs.ReadFile(fsys, path)
			if err != nil {
				t.Fatal(err)
			}
			res, err := segment.Scan(path, b, segment.ScanOptions{}, nil)
			if err != nil {
				t.Fatalf("prealloc=%v: %v", prealloc, err)
			}
			return res
		}
		res := scan()
		if !res.Torn || res.End != good {
			t.Fatalf("prealloc=%v: scan = %+v; want torn at %d", prealloc, res, good)
		}
		if err := CutTail(fsys, path, res, prealloc); err != nil {
			t.Fatal(err)
		}
		size := func() int64 {
			b, _ := vfs.ReadFile(fsys, path)
			return int64(len(b))
		}
		if got := size(); prealloc && got == good || !prealloc && got != good {
			t.Fatalf("prealloc=%v: the file is %d bytes after the cut, the frames end at %d", prealloc, got, good)
		}
		if res := scan(); res.Torn || res.End != good || res.DirtyEnd != good {
			t.Fatalf("prealloc=%v: after the cut scan = %+v, want clean at %d", prealloc, res, good)
		}
		// The log goes on from there.
		p := position(1, good)
		sh.Word(Tail).Store(p)
		sh.Word(Placing).Store(p)
		sh.Word(Durable).Store(p)
		sh.Word(Frames).Store(1)
		l2 := New(l.cfg)
		e, err := enc.Events("s", 2, testgen.Events(2, 3, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := l2.Place(&Placement{Frames: []*segment.Encoded{e}}); err != nil {
			t.Fatal(err)
		}
		if err := l2.SyncPlaced(); err != nil {
			t.Fatal(err)
		}
		if err := l2.RollNow(); err != nil {
			t.Fatal(err)
		}
		l2.Close()
		if res := scan(); res.Torn || !res.Sealed || res.Frames != 2 {
			t.Fatalf("prealloc=%v: after a placement and a roll scan = %+v, want sealed with 2 events frames", prealloc, res)
		}
		if err := CutTail(fsys, path, scan(), prealloc); !errors.Is(err, segment.ErrSealed) {
			t.Fatalf("CutTail of a sealed segment: %v, want ErrSealed", err)
		}
	}
}

// TestPreparerKickedOnlyWithWork: a placement wakes the preparer (Kick)
// only when it has work: the active segment's file to grow ahead of the
// tail, or, past half of the segment, the next segment to create. Run as
// the engine's preparer runs (Grow, then PrepareNext, on each wake-up),
// the file is grown to the segment's size and the next segment exists
// before every roll, and the wake-ups are a few per segment, not one per
// placement past its half.
func TestPreparerKickedOnlyWithWork(t *testing.T) {
	const size = 64 << 10
	l, sh, fsys, _ := newTestLog(t, size)
	l.cfg.NoPreallocate = false
	l.cfg.PreallocateStart = 4 << 10
	kick := make(chan struct{}, 1)
	l.cfg.Kick = kick
	var enc segment.Encoder
	kicks, placements := 0, 0
	fileSize := func(seg uint64) int64 {
		f, err := fsys.OpenReadWrite("db/" + segment.Name(seg))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err := f.Size()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; ; i++ {
		e, err := enc.Events("s", uint64(i), testgen.Events(uint64(i), 1, 400))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Place(&Placement{Frames: []*segment.Encoded{e}}); err != nil {
			t.Fatal(err)
		}
		placements++
		select {
		case <-kick:
			kicks++
			if err := l.Grow(); err != nil {
				t.Fatal(err)
			}
			if err := l.PrepareNext(); err != nil {
				t.Fatal(err)
			}
		default:
		}
		seg, off := splitPosition(sh.Word(Tail).Load())
		if seg == 4 {
			break
		}
		if got := fileSize(seg); got <= off {
			t.Fatalf("segment %d: tail at %d, its file %d bytes: the placements extend it, not grown ahead", seg, off, got)
		}
		if off > size*3/4 {
			if got := fileSize(seg); got != size {
				t.Fatalf("segment %d: tail at %d, its file %d bytes: not grown to %d ahead of the tail", seg, off, got, size)
			}
			r, err := segment.OpenReader(fsys, "db/"+segment.Name(seg+1))
			if err != nil {
				t.Fatalf("segment %d: tail at %d, and the next segment is not prepared: %v", seg, off, err)
			}
			r.Close()
		}
	}
	// Per segment: the growths from 4 KiB (at most 5 doublings) and
	// the next segment's creation, with a wake-up or two to spare.
	if kicks > 3*8 {
		t.Fatalf("%d wake-ups of the preparer for %d placements in 3 segments: woken without work", kicks, placements)
	}
}

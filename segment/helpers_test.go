package segment

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// makeEvents returns n deterministic events from seq first, each about
// size bytes.
func makeEvents(first uint64, n, size int) []event.Event { return testgen.Events(first, n, size) }

// writerOpts configure a testWriter.
type writerOpts struct {
	Size         int64 // the segment's size (for Create); default 64 MiB
	Uncompressed bool
	MinCompress  int
	MaxFrameRaw  int
	Preallocate  bool
	// BufferSize is how many bytes of frames Append gathers before it
	// writes them without a sync; default 1 MiB.
	BufferSize int
	Now        func() time.Time
}

// smallOpts are writer options for tests: small segments, tiny buffers so
// that spills happen.
func smallOpts() writerOpts {
	return writerOpts{Size: 64 << 10, BufferSize: 4 << 10}
}

// testWriter builds a segment file the way the engine's writer
// (engine/internal/wal) does, through what the package exports: Create,
// an Encoder, Encoded.AppendFrame and AppendSeal. Frames gather in a
// buffer; a write of it is issued only once every earlier write is
// fdatasynced, and each frame records the offset of its write (its base),
// the discipline Scan's torn-tail rule rests on.
type testWriter struct {
	path     string
	f        vfs.File
	hdr      Header
	enc      Encoder
	bufSize  int
	buf      []byte
	bufStart int64 // where buf goes
	end      int64 // after the last frame appended
	durable  int64
	unsynced bool // a write is not fdatasynced yet
	frames   uint32
}

func newTestWriter(fsys vfs.FS, path string, id uint64, o writerOpts) (*testWriter, error) {
	fsys = orDefault(fsys)
	if err := Create(fsys, path, id, CreateOptions{Size: o.Size, Preallocate: o.Preallocate, Now: o.Now}); err != nil {
		return nil, err
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		return nil, err
	}
	var hb [HeaderSize]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return nil, err
	}
	hdr, err := DecodeHeader(path, hb[:])
	if err != nil {
		return nil, err
	}
	if o.BufferSize == 0 {
		o.BufferSize = 1 << 20
	}
	enc := Encoder{Uncompressed: o.Uncompressed, MinCompress: o.MinCompress, MaxFrameRaw: o.MaxFrameRaw}
	return &testWriter{path: path, f: f, hdr: hdr, enc: enc, bufSize: o.BufferSize, bufStart: HeaderSize, end: HeaderSize, durable: HeaderSize}, nil
}

func (w *testWriter) Header() Header   { return w.hdr }
func (w *testWriter) Size() int64      { return w.end }
func (w *testWriter) Durable() int64   { return w.durable }
func (w *testWriter) Encoder() Encoder { return w.enc }

func (w *testWriter) Append(key string, firstSeq uint64, evs []event.Event) (Location, error) {
	e, err := w.enc.Events(key, firstSeq, evs)
	if err != nil {
		return Location{}, err
	}
	return w.AppendEncoded(e)
}

func (w *testWriter) AppendEncoded(e *Encoded) (Location, error) {
	loc := Location{Offset: w.end, Size: e.Size()}
	w.buf = e.AppendFrame(w.buf, w.bufStart)
	w.end += e.Size()
	if e.Events() {
		w.frames++
	}
	if len(w.buf) >= w.bufSize {
		return loc, w.writeOut(false)
	}
	return loc, nil
}

// writeOut writes the buffered frames (after the sync of the write before
// them) and, with sync, fdatasyncs them.
func (w *testWriter) writeOut(sync bool) error {
	if len(w.buf) > 0 {
		if w.unsynced {
			if err := w.f.Sync(); err != nil {
				return err
			}
			w.durable = w.bufStart
		}
		if _, err := w.f.WriteAt(w.buf, w.bufStart); err != nil {
			return err
		}
		w.bufStart, w.buf, w.unsynced = w.end, w.buf[:0], true
	}
	if sync && w.unsynced {
		if err := w.f.Sync(); err != nil {
			return err
		}
		w.durable, w.unsynced = w.end, false
	}
	return nil
}

func (w *testWriter) Sync() error { return w.writeOut(true) }

// Seal writes the seal frame after the last frame, syncs it and trims the
// zeros of a preallocated file, as a roll does.
func (w *testWriter) Seal() error {
	if err := w.Sync(); err != nil {
		return err
	}
	seal := AppendSeal(nil, w.frames, w.end)
	if _, err := w.f.WriteAt(seal, w.end); err != nil {
		return err
	}
	w.end += int64(len(seal))
	if err := w.f.Sync(); err != nil {
		return err
	}
	if size, err := w.f.Size(); err == nil && size > w.end {
		if err := w.f.Truncate(w.end); err != nil {
			return err
		}
		if err := w.f.Sync(); err != nil {
			return err
		}
	}
	w.bufStart, w.durable = w.end, w.end
	return nil
}

func (w *testWriter) Close() error { return w.f.Close() }

func mustCreate(t testing.TB, fsys vfs.FS, path string, o writerOpts) *testWriter {
	t.Helper()
	w, err := newTestWriter(fsys, path, 1, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustAppend(t testing.TB, w *testWriter, key string, evs []event.Event) Location {
	t.Helper()
	loc, err := w.Append(key, evs[0].Seq, evs)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustSync(t testing.TB, w *testWriter) {
	t.Helper()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, fsys vfs.FS, path string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frameOffsets returns the offsets of every valid frame Scan finds.
func frameOffsets(t testing.TB, data []byte) []int64 {
	t.Helper()
	var offs []int64
	if _, err := Scan("t", data, ScanOptions{}, func(fi *FrameInfo) error {
		offs = append(offs, fi.Offset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return offs
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5e61)) }

func xxhashSum(b []byte) uint64 { return xxhash.Sum64(b) }

// equalEvents is a fast exact comparison (cmp walks []byte element by
// element through reflection, which dominates the crash loops).
func equalEvents(a, b []event.Event) bool {
	return slices.EqualFunc(a, b, func(x, y event.Event) bool {
		return x.Seq == y.Seq && x.Type == y.Type && x.Time == y.Time && x.Ignorable == y.Ignorable &&
			bytes.Equal(x.Data, y.Data) && bytes.Equal(x.SurfaceOp, y.SurfaceOp) &&
			slices.Equal(x.SourceEventSeqs, y.SourceEventSeqs) &&
			(x.Data == nil) == (y.Data == nil) && (x.SurfaceOp == nil) == (y.SurfaceOp == nil) &&
			(x.SourceEventSeqs == nil) == (y.SourceEventSeqs == nil)
	})
}

package segment

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// makeEvents returns n deterministic events from seq first, each about
// size bytes.
func makeEvents(first uint64, n, size int) []event.Event { return testgen.Events(first, n, size) }

// smallOpts are writer options for tests: small segments, tiny buffers so
// that spills happen.
func smallOpts() WriterOptions {
	return WriterOptions{Size: 64 << 10, BufferSize: 4 << 10}
}

func mustCreate(t testing.TB, fsys vfs.FS, path string, o WriterOptions) *Writer {
	t.Helper()
	w, err := Create(fsys, path, 1, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustAppend(t testing.TB, w *Writer, key string, evs []event.Event) Location {
	t.Helper()
	loc, err := w.Append(key, evs[0].Seq, evs)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustSync(t testing.TB, w *Writer) {
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
